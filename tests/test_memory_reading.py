"""Reading memories: one by id, its history, and every memory page by page with a cursor that
stays valid while memories are added; another team's ids are 404 like missing ones."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from memories.models import Memory
from memories.services import Actor, memory_supersede

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db


def q(path, params):
    return f"{path}?{urlencode(params)}" if params else path


def write(api, content, agent="researcher", **extra):
    r = api.post("/memories/personal", {"agent_id": agent, "content": content, **extra})
    assert r.status_code == 201, r.content
    return ok_data(r)["id"]


def test_one_memory_by_id_with_its_state(api, other_api):
    mid = write(api, "用户每周二部署生产环境", metadata={"source": "chat"})
    data = ok_data(api.get(f"/memories/{mid}"))
    assert (data["id"], data["content"], data["source"]) == (mid, "用户每周二部署生产环境", "chat")
    assert data["superseded_by"] is None and data["pinned"] is False
    team_id = ok_data(api.post("/memories/team", {"content": "the team meets on Mondays"}))["id"]
    assert ok_data(api.get(f"/memories/{team_id}"))["scope"] == "team"
    # Another team's id answers exactly like an id that does not exist.
    theirs, missing = other_api.get(f"/memories/{mid}"), other_api.get("/memories/99999999")
    assert (theirs.status_code, error_code(theirs)) == (404, "NOT_FOUND")
    assert theirs.json() == missing.json()
    theirs = other_api.get(f"/memories/{mid}/history")
    assert theirs.json() == other_api.get("/memories/99999999/history").json()
    assert theirs.status_code == 404


def test_an_agent_key_reads_its_own_shared_and_team_memories_only(api, agent_api):
    own = write(api, "researcher's own note")
    other = write(api, "another agent's note", agent="coder")
    assert agent_api.get(f"/memories/{own}").status_code == 200
    assert error_code(agent_api.get(f"/memories/{other}")) == "FORBIDDEN"
    api.post(
        f"/memories/personal/{other}/share", {"agent_ids": ["researcher"], "permission": "read"}
    )
    assert agent_api.get(f"/memories/{other}").status_code == 200


def test_history_lists_changes_oldest_first_and_what_replaced_what(api, team):
    old = write(api, "the deploy day is Monday", importance=0.4)
    api.put(f"/memories/personal/{old}", {"importance": 0.6})
    api.put(f"/memories/personal/{old}", {"content": "the deploy day is Tuesday"})
    history = ok_data(api.get(f"/memories/{old}/history"))
    assert [r["change"] for r in history["revisions"]] == ["update", "update"]
    assert history["revisions"][0]["before"] == {"importance": 0.4}
    assert history["revisions"][1]["after"]["content"] == "the deploy day is Tuesday"
    assert history["revisions"][0]["by"].startswith("key mk_")
    new = write(api, "deploys moved to Wednesday")
    memory_supersede(old=Memory.objects.get(pk=old), new=Memory.objects.get(pk=new), actor=Actor())
    assert ok_data(api.get(f"/memories/{old}/history"))["superseded_by"] == new
    assert ok_data(api.get(f"/memories/{new}/history"))["supersedes"] == [old]
    assert ok_data(api.get(f"/memories/{old}"))["superseded_by"] == new


def test_the_cursor_stays_valid_while_memories_are_added(api):
    first = [write(api, f"记忆第 {i} 条：主题 {i * 7}") for i in range(5)]
    page = ok_data(api.get(q("/memories", {"page_size": 2})))
    seen = [m["id"] for m in page["items"]]
    assert seen == [first[4], first[3]]
    added = [write(api, f"后来写入的第 {i} 条") for i in range(3)]  # between two pages
    while page["next_cursor"]:
        page = ok_data(api.get(q("/memories", {"page_size": 2, "cursor": page["next_cursor"]})))
        seen += [m["id"] for m in page["items"]]
    assert seen == sorted(first, reverse=True)  # nothing skipped, nothing repeated
    # A fresh listing starts with what was added meanwhile.
    assert [m["id"] for m in ok_data(api.get(q("/memories", {"page_size": 3})))["items"]] == added[
        ::-1
    ]


def test_list_filters_and_isolation(api, other_api, agent_api):
    mine = write(api, "researcher memory")
    coder = write(api, "coder memory", agent="coder")
    team_mem = ok_data(api.post("/memories/team", {"content": "a team memory"}))["id"]
    write(other_api, "team B memory")

    def ids(client, **params):
        return {m["id"] for m in ok_data(client.get(q("/memories", params)))["items"]}

    assert ids(api) == {mine, coder, team_mem}
    assert ids(api, scope="team") == {team_mem}
    assert ids(api, agent_id="coder") == {coder}
    assert ids(agent_api) == {mine, team_mem}
    assert error_code(agent_api.get(q("/memories", {"agent_id": "coder"}))) == "FORBIDDEN"
    assert team_mem not in ids(other_api) and mine not in ids(other_api)


@pytest.mark.parametrize(
    "params",
    [{"cursor": "made-up"}, {"page_size": 0}, {"page_size": 201}, {"scope": "global"}],
)
def test_bad_list_parameters_are_a_400(api, params):
    assert error_code(api.get(q("/memories", params))) == "VALIDATION_ERROR"


def test_a_cursor_from_another_team_reads_only_your_own_memories(api, other_api):
    for i in range(3):
        write(other_api, f"team B note {i}")
    theirs = ok_data(other_api.get(q("/memories", {"page_size": 1})))["next_cursor"]
    mine = write(api, "team A note")
    items = ok_data(api.get(q("/memories", {"cursor": theirs})))["items"]
    assert all(m["team_id"] == "team_a" for m in items) and mine not in [m["id"] for m in items]
