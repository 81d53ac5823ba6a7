"""The agent profile: exactly-known fields by key, overwritten with a revision per change, kept
apart from the memories; set through the API or read from facts by extraction and ingest (never
over a value set through the API); read first by the persona."""

from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection

from memories.models import Memory, ProfileField, ProfileRevision
from memories.profile import profile_fields_in
from memories.services import Actor, profile_set
from memoryplatform.client import MemoryAPIError
from tenants.services import agent_delete, api_key_issue, team_upsert

from .factories import AgentFactory
from .helpers import SignedClient, error_code, ok_data
from .test_client_live import new_client  # noqa: F401  (the fixture: both clients)

pytestmark = pytest.mark.django_db(transaction=True)


def _put(api: SignedClient, fields: dict, agent_id: str = "researcher"):
    return api.put(f"/profile/{agent_id}", {"fields": fields})


def _profile(api: SignedClient, agent_id: str = "researcher") -> dict:
    return ok_data(api.get(f"/profile/{agent_id}"))["fields"]


def _values(api: SignedClient, agent_id: str = "researcher") -> dict[str, str]:
    return {k: f["value"] for k, f in _profile(api, agent_id).items()}


def _history(api: SignedClient, agent_id: str = "researcher") -> list[dict]:
    return ok_data(api.get(f"/profile/{agent_id}/history"))["revisions"]


# --- the API: CRUD, overwrite semantics, revisions ------------------------------------------------


def test_put_overwrites_the_given_keys_and_records_a_revision_per_change(api):
    assert ok_data(api.get("/profile/researcher")) == {"agent_id": "researcher", "fields": {}}
    first = ok_data(
        _put(api, {"occupation": "backend engineer", "timezone": "Asia/Shanghai", "team_size": "8"})
    )
    assert sorted(first["changed"]) == ["occupation", "team_size", "timezone"]
    field = first["fields"]["occupation"]
    assert list(field) == ["value", "updated_at", "source", "source_memory_id"]
    assert field["value"] == "backend engineer" and field["source"] == "api"
    assert field["source_memory_id"] is None

    # Listed keys set, others untouched; an unchanged value is no change and no revision.
    second = ok_data(_put(api, {"occupation": "SRE", "timezone": "Asia/Shanghai"}))
    assert second["changed"] == ["occupation"]
    assert _values(api) == {"occupation": "SRE", "team_size": "8", "timezone": "Asia/Shanghai"}
    history = _history(api)
    assert len(history) == 4
    assert history[0]["key"] == "occupation"  # newest first
    assert (history[0]["before"], history[0]["after"]) == ("backend engineer", "SRE")
    assert history[0]["by"].startswith("key ") and history[0]["source"] == "api"
    assert {h["key"]: h["before"] for h in history[1:]} == {
        "occupation": None,
        "timezone": None,
        "team_size": None,
    }
    # Kept apart from the memories.
    assert not Memory.objects.exists()


def test_delete_removes_a_key_keeps_its_history_and_404s_when_absent(api):
    ok_data(_put(api, {"location": "Singapore", "name": "Alice"}))
    assert ok_data(api.delete("/profile/researcher/location")) is None
    assert _values(api) == {"name": "Alice"}
    latest = _history(api)[0]
    assert (latest["key"], latest["before"], latest["after"]) == ("location", "Singapore", None)
    missing = api.delete("/profile/researcher/location")
    assert missing.status_code == 404 and error_code(missing) == "NOT_FOUND"
    assert len(_history(api)) == 3  # a refused delete records nothing
    limited = ok_data(api.get("/profile/researcher/history?limit=1"))["revisions"]
    assert len(limited) == 1


def test_values_are_trimmed_and_an_unchanged_value_writes_no_revision(api):
    ok_data(_put(api, {"name": "  Alice  "}))
    assert _values(api) == {"name": "Alice"}
    again = ok_data(_put(api, {"name": "Alice"}))
    assert again["changed"] == []
    assert len(_history(api)) == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"Occupation": "x"}, "fields.Occupation"),
        ({"9lives": "x"}, "fields.9lives"),
        ({"history": "x"}, "fields.history"),
        ({"occupation": ""}, "fields.occupation"),
        ({"occupation": "   "}, "fields.occupation"),
        ({"occupation": 3}, "fields.occupation"),
        ({"tools": ["vim"]}, "fields.tools"),
        ({"occupation": "x" * 1001}, "fields.occupation"),
        ({"timezone": "Mars/Olympus"}, "fields.timezone"),
        ({}, "fields"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(api, fields, field):
    response = _put(api, {"name": "Alice", **fields} if fields else fields)
    assert response.status_code == 400 and error_code(response) == "VALIDATION_ERROR"
    assert field in response.json()["details"]
    assert not ProfileField.objects.exists() and not ProfileRevision.objects.exists()


def test_a_body_without_fields_and_a_bad_agent_id_are_400(api):
    response = api.put("/profile/researcher", {"occupation": "SRE"})
    assert response.status_code == 400 and "fields" in response.json()["details"]
    bad = api.get("/profile/bad%20agent")
    assert bad.status_code == 400 and "agent_id" in bad.json()["details"]


def test_timezone_takes_a_zone_or_a_utc_offset(api):
    ok_data(_put(api, {"timezone": "UTC+8"}))
    ok_data(_put(api, {"timezone": "Europe/Berlin"}))
    assert _values(api) == {"timezone": "Europe/Berlin"}


def test_concurrent_writes_of_a_new_key_keep_one_row_and_every_change(team):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite's in-memory test database fails concurrent writers; MariaDB covers it")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def write(value: str) -> None:
        barrier.wait()
        try:
            profile_set(team=team, agent_id="a", fields={"location": value}, actor=Actor())
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=[f"city {i}"]) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    row = ProfileField.objects.get(team=team, agent_id="a", key="location")
    revisions = list(ProfileRevision.objects.filter(agent_id="a").order_by("id"))
    # One insert, then each later write changed the value it found: a chain, nothing lost.
    assert revisions[0].before == "" and revisions[-1].after == row.value
    assert all(a.after == b.before for a, b in itertools.pairwise(revisions))
    assert len(revisions) == 4


def test_the_agent_limit_of_keys(api, settings):
    ok_data(_put(api, {f"k{i}": "v" for i in range(50)}))
    ok_data(_put(api, {f"j{i}": "v" for i in range(50)}))
    response = _put(api, {"one_more": "v"})
    assert response.status_code == 400 and "fields" in response.json()["details"]
    # Changing an existing key is still fine at the limit.
    assert ok_data(_put(api, {"k1": "w"}))["changed"] == ["k1"]


# --- isolation --------------------------------------------------------------------------------


def test_another_team_sees_nothing_and_deletes_nothing(api, other_api):
    ok_data(_put(api, {"occupation": "SRE"}))
    assert ok_data(other_api.get("/profile/researcher")) == {
        "agent_id": "researcher",
        "fields": {},
    }
    assert ok_data(other_api.get("/profile/researcher/history"))["revisions"] == []
    theirs = other_api.delete("/profile/researcher/occupation")
    missing = other_api.delete("/profile/researcher/nothing_here")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    # Their own write of the same agent id is their own profile.
    ok_data(_put(other_api, {"occupation": "trader"}))
    assert _values(api) == {"occupation": "SRE"}
    assert _values(other_api) == {"occupation": "trader"}


def test_an_agent_key_uses_only_its_own_agents_profile(team, agent, agent_api):
    AgentFactory(team=team, agent_id="trader")
    for response in (
        agent_api.get("/profile/trader"),
        _put(agent_api, {"occupation": "x"}, agent_id="trader"),
        agent_api.delete("/profile/trader/occupation"),
        agent_api.get("/profile/trader/history"),
    ):
        assert response.status_code == 403 and error_code(response) == "FORBIDDEN"
    assert not ProfileField.objects.exists()
    ok_data(_put(agent_api, {"occupation": "researcher"}))
    assert _values(agent_api) == {"occupation": "researcher"}


def test_deleting_the_agent_deletes_its_profile(api, team, agent):
    ok_data(_put(api, {"occupation": "SRE"}))
    agent_delete(team=team, agent_id="researcher")
    assert not ProfileField.objects.exists() and not ProfileRevision.objects.exists()


# --- the classifier -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "I work as a backend engineer at Acme.",
            {"occupation": "backend engineer", "employer": "Acme"},
        ),
        ("The user works as a product manager.", {"occupation": "product manager"}),
        ("I live in Singapore and trade crypto on Binance.", {"location": "Singapore"}),
        ("My timezone is UTC+8.", {"timezone": "UTC+8"}),
        ("I use vim and tmux every day", {"tools": "vim, tmux"}),
        ("We run on AWS.", {"cloud_platform": "AWS"}),
        ("My native language is Chinese", {"language": "Chinese"}),
        ("My name is Alice Chen.", {"name": "Alice Chen"}),
        ("我是一名后端工程师", {"occupation": "后端工程师"}),
        ("我住在上海，在腾讯工作", {"location": "上海"}),
        ("我在腾讯工作", {"employer": "腾讯"}),
        ("我们用阿里云", {"cloud_platform": "Alibaba Cloud"}),
        ("我的母语是中文", {"language": "Chinese"}),
        ("我的时区是Asia/Shanghai", {"timezone": "Asia/Shanghai"}),
        ("我主要用Python写脚本", {"tools": "Python"}),
        # Conservative: what only might be a profile field is none.
        ("I don't live in Paris anymore", {}),
        ("I use it every day", {}),
        ("call me tomorrow", {}),
        ("我在家工作", {}),
        ("我叫他帮忙看代码", {}),
        ("我是一个很懒的人", {}),
        ("My timezone is somewhere east", {}),
        ("My leverage limit is 3x on every account.", {}),
    ],
)
def test_the_classifier_reads_profile_fields_in_both_languages(text, expected):
    assert profile_fields_in(text) == expected


# --- extraction and ingest write profile fields -----------------------------------------------


def test_ingest_writes_profile_fields_in_english_and_reports_them(api):
    messages = [
        {"role": "user", "content": "I work as a backend engineer at Acme. I live in Singapore."},
        {"role": "assistant", "content": "I live in the cloud, as an assistant."},
    ]
    data = ok_data(api.post("/memories/ingest", {"agent_id": "researcher", "messages": messages}))
    assert data["profile"] == {
        "occupation": "backend engineer",
        "employer": "Acme",
        "location": "Singapore",
    }
    fields = _profile(api)
    assert {k: f["source"] for k, f in fields.items()} == dict.fromkeys(fields, "ingest")
    # Each field names the memory (still written, as ever) it was read from.
    memory = Memory.objects.get(pk=fields["location"]["source_memory_id"])
    assert "Singapore" in memory.content and memory.metadata["source"] == "ingest"
    # The same conversation again changes nothing: no "profile" in the answer, no revision.
    again = ok_data(api.post("/memories/ingest", {"agent_id": "researcher", "messages": messages}))
    assert "profile" not in again
    assert len(_history(api)) == 3


def test_ingest_without_profile_facts_answers_as_before(api):
    data = ok_data(
        api.post(
            "/memories/ingest",
            {"agent_id": "researcher", "messages": [{"role": "user", "content": "BTC is up."}]},
        )
    )
    assert list(data) == ["archived", "facts"]


def test_extraction_writes_profile_fields_in_chinese(api):
    for content in ("我是一名后端工程师。", "我住在上海。", "我们用阿里云部署服务。"):
        api.post("/memories/working", {"agent_id": "researcher", "content": content})
    ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "researcher"}))
    fields = _profile(api)
    assert {k: f["value"] for k, f in fields.items()} == {
        "occupation": "后端工程师",
        "location": "上海",
        "cloud_platform": "Alibaba Cloud",
    }
    assert {f["source"] for f in fields.values()} == {"extraction"}
    assert {h["by"] for h in _history(api)} == {"lifecycle"}


def test_extraction_never_overwrites_a_value_set_through_the_api(api):
    ok_data(_put(api, {"location": "Berlin"}))
    ok_data(
        api.post(
            "/memories/ingest",
            {
                "agent_id": "researcher",
                "messages": [{"role": "user", "content": "I live in Paris. I work as a chef."}],
            },
        )
    )
    fields = _profile(api)
    assert fields["location"]["value"] == "Berlin" and fields["location"]["source"] == "api"
    assert fields["occupation"]["value"] == "chef"  # a key nobody set is written
    # An extracted value is overwritten by a newer extraction, then by the API.
    ok_data(
        api.post(
            "/memories/ingest",
            {"agent_id": "researcher", "messages": [{"role": "user", "content": "我是一名厨师长"}]},
        )
    )
    assert _values(api)["occupation"] == "厨师长"
    ok_data(_put(api, {"occupation": "head chef"}))
    assert _profile(api)["occupation"]["source"] == "api"


def test_confirming_an_extracted_value_through_the_api_makes_it_authoritative(api):
    api.post(
        "/memories/ingest",
        {"agent_id": "researcher", "messages": [{"role": "user", "content": "I live in Paris."}]},
    )
    assert ok_data(_put(api, {"location": "Paris"}))["changed"] == []
    assert _profile(api)["location"]["source"] == "api"
    api.post(
        "/memories/ingest",
        {"agent_id": "researcher", "messages": [{"role": "user", "content": "I live in Rome."}]},
    )
    assert _values(api)["location"] == "Paris"


# --- persona --------------------------------------------------------------------------------------


def test_the_persona_starts_from_the_profile(api):
    ok_data(
        api.post(
            "/memories/personal",
            {
                "agent_id": "researcher",
                "content": "I prefer short answers.",
                "category": "preference",
            },
        )
    )
    ok_data(_put(api, {"occupation": "backend engineer", "location": "Singapore"}))
    persona = ok_data(api.post("/lifecycle/generate-persona", {"agent_id": "researcher"}))[
        "persona"
    ]
    assert persona["summary"].startswith(
        "Profile: location: Singapore; occupation: backend engineer. "
    )
    assert persona["preferences"] == ["I prefer short answers."]


# --- the clients ----------------------------------------------------------------------------------


def test_both_clients_read_write_and_delete_profile_fields(live_server, new_client):  # noqa: F811
    team, _ = team_upsert(team_id="team_p", name="P")
    key = api_key_issue(team=team)
    client = new_client(key.key_id, key.secret, base_url=live_server.url)
    written = client.set_profile("a1", {"occupation": "SRE", "timezone": "UTC+8"})
    assert sorted(written["changed"]) == ["occupation", "timezone"]
    assert client.get_profile("a1")["fields"]["occupation"]["value"] == "SRE"
    assert client.set_profile("a1", {"occupation": "SRE"})["changed"] == []
    assert client.delete_profile_field("a1", "timezone") is None
    assert list(client.get_profile("a1")["fields"]) == ["occupation"]
    history = client.profile_history("a1")["revisions"]
    # Newest first; one request's revisions in the order of its keys.
    assert [(r["key"], r["after"]) for r in history] == [
        ("timezone", None),
        ("timezone", "UTC+8"),
        ("occupation", "SRE"),
    ]
    with pytest.raises(MemoryAPIError) as missing:
        client.delete_profile_field("a1", "timezone")
    assert missing.value.status == 404
    with pytest.raises(MemoryAPIError) as bad:
        client.set_profile("a1", {"timezone": "Mars/Olympus"})
    assert bad.value.status == 400 and "fields.timezone" in bad.value.details


def test_the_llm_engine_gets_the_profile_as_its_first_data_block(fake_llm):
    from lifecycle.llm import get_engine

    from .test_lifecycle_engines import _block, _reply, _user_message

    _reply(fake_llm, {"summary": "后端工程师，住在上海。"})
    draft, _ = get_engine().persona(
        [(1, "用户偏好简洁回复", "preference")], [], [("location", "上海")]
    )
    assert draft.summary == "后端工程师，住在上海。"
    user = _user_message(fake_llm)
    assert "上海" in _block(user, "profile")
    assert user.index("<profile>") < user.index("<memories>")
    # No profile: the prompt is as it was.
    _reply(fake_llm, {"summary": "x"})
    get_engine().persona([(1, "用户偏好简洁回复", "preference")], [])
    assert "<profile>" not in _user_message(fake_llm)


def test_the_offline_persona_opens_with_the_profile_in_the_memories_language():
    from lifecycle.offline import OfflineEngine

    draft, _ = OfflineEngine().persona(
        [(1, "用户偏好简洁回复", "preference")], [], [("occupation", "后端工程师")]
    )
    assert draft.summary.startswith("档案：occupation：后端工程师。")
    alone, _ = OfflineEngine().persona([], [], [("timezone", "UTC+8")])
    assert alone.summary.startswith("Profile: timezone: UTC+8. ")


# --- search with include_profile ------------------------------------------------------------------


def _search(api: SignedClient, query: str, agent_id: str = "researcher", **extra) -> list[dict]:
    body = {"agent_id": agent_id, "query": query, **extra}
    return ok_data(api.post("/memories/personal/search", body))


def test_a_search_can_bring_the_profile_fields_it_is_about(api, other_api):
    ok_data(
        _put(
            api,
            {
                "occupation": "backend engineer",
                "location": "Singapore",
                "cloud_platform": "AWS",
                "tools": "vim, tmux",
            },
        )
    )
    ok_data(
        api.post(
            "/memories/personal",
            {"agent_id": "researcher", "content": "The user is debugging a Kafka consumer lag."},
        )
    )
    # Without asking: memories only, as every client expects.
    plain = _search(api, "what does the user do for a living")
    assert all(h.get("kind") != "profile" for h in plain)
    found = _search(api, "what does the user do for a living", include_profile=True)
    profile = [h for h in found if h.get("kind") == "profile"]
    assert profile and profile[0]["key"] == "occupation" and profile[0]["id"] is None
    assert profile[0]["content"] == "occupation: backend engineer"
    assert found[: len(profile)] == profile  # first, before the memories
    assert "vim" not in {h["value"] for h in profile}  # only what the query is about
    # Across languages, with the same min_score meaning.
    zh = _search(api, "用户住在哪个城市", include_profile=True)
    assert [h["key"] for h in zh if h.get("kind") == "profile"][:1] == ["location"]
    # Nothing the query is about: no field.
    assert not [
        h
        for h in _search(api, "favourite pizza topping", include_profile=True)
        if h.get("kind") == "profile"
    ]
    # Another team's agent of the same id has no profile here.
    assert _search(other_api, "what does the user do for a living", include_profile=True) == []
