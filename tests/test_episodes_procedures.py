"""Episodic memory (past cases found again by the task) and procedural memory (the agent's own
rules, which it edits itself; the lifecycle only proposes)."""

from __future__ import annotations

import pytest
from django.test import Client

from memories.models import Memory, Procedure, ProcedureRevision
from memories.services import MAX_RULES_PER_AGENT
from tenants.services import api_key_issue

from .factories import AgentFactory, MemoryFactory
from .helpers import SignedClient, error_code, ok_data

pytestmark = pytest.mark.django_db

DEPLOY = {
    "agent_id": "researcher",
    "task": "Deploy the billing service to production",
    "outcome": "failure",
    "steps": ["built the image", "ran the migration", "switched traffic"],
    "lesson": "Run the migration before building the image: the build reads the schema.",
}


def _other_api(other_team) -> SignedClient:
    k = api_key_issue(team=other_team)
    return SignedClient(Client(), k.key_id, k.secret)


# --- episodes ------------------------------------------------------------------------------------


def test_an_episode_is_kept_and_found_again_by_a_similar_task(api):
    failed = api.post("/episodes", DEPLOY)
    assert failed.status_code == 201
    body = failed.json()["data"]
    assert (body["task"], body["outcome"], body["steps"], body["lesson"]) == (
        DEPLOY["task"],
        "failure",
        DEPLOY["steps"],
        DEPLOY["lesson"],
    )
    worked = ok_data(api.post("/episodes", {**DEPLOY, "outcome": "success", "lesson": "ok"}))
    # The same task twice is two cases: both kept (no dedup between episodes).
    assert worked["id"] != body["id"]
    ok_data(
        api.post(
            "/episodes",
            {"agent_id": "researcher", "task": "写一份周报给团队", "outcome": "success"},
        )
    )
    hits = ok_data(
        api.post(
            "/episodes/search",
            {"agent_id": "researcher", "task": "deploy billing to prod", "min_score": 0},
        )
    )
    assert {h["id"] for h in hits[:2]} == {body["id"], worked["id"]}
    assert all("score" in h for h in hits)
    failures = ok_data(
        api.post(
            "/episodes/search",
            {
                "agent_id": "researcher",
                "task": "deploy billing",
                "outcome": "failure",
                "min_score": 0,
            },
        )
    )
    assert [h["id"] for h in failures] == [body["id"]]
    # An episode is a personal memory of category `episode`, traceable like any other.
    memory = Memory.objects.get(pk=body["id"])
    assert (memory.category, memory.scope, memory.metadata["outcome"]) == (
        "episode",
        "personal",
        "failure",
    )


def test_episode_search_never_returns_ordinary_memories(api):
    api.post("/memories/personal", {"agent_id": "researcher", "content": DEPLOY["task"]})
    assert (
        ok_data(
            api.post(
                "/episodes/search",
                {"agent_id": "researcher", "task": DEPLOY["task"], "min_score": 0},
            )
        )
        == []
    )


@pytest.mark.parametrize(
    "body, field",
    [
        ({**DEPLOY, "outcome": "meh"}, "outcome"),
        ({**DEPLOY, "task": "   "}, "task"),
        ({**DEPLOY, "steps": "one step"}, "steps"),
        ({**DEPLOY, "steps": ["x"] * 51}, "steps"),
        ({k: v for k, v in DEPLOY.items() if k != "agent_id"}, "agent_id"),
        ({**DEPLOY, "importance": 2}, "importance"),
    ],
)
def test_a_bad_episode_is_a_400_naming_the_field(api, body, field):
    response = api.post("/episodes", body)
    assert response.status_code == 400 and error_code(response) == "VALIDATION_ERROR"
    assert field in response.json()["details"]
    assert not Memory.objects.exists()


def test_episodes_are_the_agents_own_and_the_teams_own(team, agent, agent_api, api, other_team):
    ok_data(api.post("/episodes", DEPLOY))
    AgentFactory(team=team, agent_id="trader")
    refused = agent_api.post("/episodes", {**DEPLOY, "agent_id": "trader"})
    assert refused.status_code == 403
    assert (
        agent_api.post("/episodes/search", {"agent_id": "trader", "task": "x"}).status_code == 403
    )
    # Another team searching the same agent id finds nothing of this team's.
    theirs = ok_data(
        _other_api(other_team).post(
            "/episodes/search", {"agent_id": "researcher", "task": DEPLOY["task"], "min_score": 0}
        )
    )
    assert theirs == []


# --- procedures ----------------------------------------------------------------------------------


def test_the_agent_keeps_its_own_rules(team, agent, agent_api):
    made = agent_api.post("/procedures/researcher", {"rule": "Answer in at most three sentences."})
    assert made.status_code == 201
    rule = made.json()["data"]
    assert (rule["status"], rule["source"], rule["evidence"]) == ("active", "agent", [])
    second = ok_data(agent_api.post("/procedures/researcher", {"rule": "回答使用中文。"}))
    listed = ok_data(agent_api.get("/procedures/researcher"))["procedures"]
    assert [p["rule"] for p in listed] == ["Answer in at most three sentences.", "回答使用中文。"]
    edited = ok_data(
        agent_api.put(f"/procedures/researcher/{rule['id']}", {"rule": "Answer in two sentences."})
    )
    assert edited["rule"] == "Answer in two sentences." and edited["status"] == "active"
    assert ok_data(agent_api.delete(f"/procedures/researcher/{second['id']}")) == {
        "deleted": second["id"]
    }
    assert agent_api.delete(f"/procedures/researcher/{second['id']}").status_code == 404
    assert [p["id"] for p in ok_data(agent_api.get("/procedures/researcher"))["procedures"]] == [
        rule["id"]
    ]


def test_a_rule_added_again_is_the_rule_already_there(team, agent, agent_api):
    first = agent_api.post("/procedures/researcher", {"rule": "Answer in at most three sentences."})
    assert first.status_code == 201
    # The same text, whatever its case and spacing: the rule already there (200), not a second.
    for text in ["Answer in at most three sentences.", "  answer in AT MOST  three sentences. "]:
        again = agent_api.post("/procedures/researcher", {"rule": text})
        assert again.status_code == 200
        assert again.json()["data"] == first.json()["data"]
    # Different words are a different rule.
    assert (
        agent_api.post("/procedures/researcher", {"rule": "Answer in two sentences."}).status_code
        == 201
    )
    # Where case carries meaning (an identifier), it is part of the text.
    assert agent_api.post("/procedures/researcher", {"rule": "Tag builds x7Qz."}).status_code == 201
    assert agent_api.post("/procedures/researcher", {"rule": "Tag builds x7QZ."}).status_code == 201
    assert Procedure.objects.filter(team=team, agent_id="researcher").count() == 4


def test_an_edit_to_another_rules_text_is_refused(team, agent, agent_api, api, other_team):
    brief = ok_data(agent_api.post("/procedures/researcher", {"rule": "Be brief."}))
    cite = ok_data(agent_api.post("/procedures/researcher", {"rule": "Cite the source."}))
    # Another text of the agent's, in any case or spacing: 409 naming the rule that says it.
    clash = agent_api.put(f"/procedures/researcher/{cite['id']}", {"rule": "  be BRIEF. "})
    assert clash.status_code == 409
    body = clash.json()
    assert body["code"] == "CONFLICT" and str(brief["id"]) in body["error"]
    assert body["details"] == {"rule": [f"the same text as rule {brief['id']}"]}
    # A text and a status together: neither is written.
    both = {"rule": "Be brief.", "status": "rejected"}
    assert agent_api.put(f"/procedures/researcher/{cite['id']}", both).status_code == 409
    assert list(
        Procedure.objects.filter(team=team).order_by("id").values_list("rule", "status")
    ) == [("Be brief.", "active"), ("Cite the source.", "active")]
    # The rule's own text in another case is its own edit; a status alone is never compared.
    own = agent_api.put(f"/procedures/researcher/{brief['id']}", {"rule": "BE BRIEF."})
    assert ok_data(own)["rule"] == "BE BRIEF."
    status = agent_api.put(f"/procedures/researcher/{cite['id']}", {"status": "rejected"})
    assert status.status_code == 200
    # Another agent's, or another team's, rule of that text is not this agent's: the edit is
    # written.
    AgentFactory(team=team, agent_id="trader")
    ok_data(api.post("/procedures/trader", {"rule": "Check the spread."}))
    other = _other_api(other_team)
    ok_data(other.post("/procedures/researcher", {"rule": "Check the spread."}))
    edited = agent_api.put(f"/procedures/researcher/{cite['id']}", {"rule": "Check the spread."})
    assert ok_data(edited)["rule"] == "Check the spread."


@pytest.mark.parametrize("status", ["proposed", "rejected"])
def test_adding_a_proposed_or_rejected_rule_makes_it_active(team, agent, agent_api, status):
    held = Procedure.objects.create(
        team=team,
        agent_id="researcher",
        rule="Cite the source.",
        status=status,
        source="lifecycle",
        evidence=[7],
    )
    answer = agent_api.post("/procedures/researcher", {"rule": "Cite the source."})
    assert answer.status_code == 200
    body = answer.json()["data"]
    assert (body["id"], body["status"], body["source"], body["evidence"]) == (
        held.pk,
        "active",
        "lifecycle",
        [7],
    )
    assert list(Procedure.objects.filter(team=team).values_list("status", flat=True)) == ["active"]


def test_another_agents_or_teams_rule_of_the_same_text_is_not_met(
    team, agent, agent_api, api, other_team
):
    AgentFactory(team=team, agent_id="trader")
    theirs = ok_data(api.post("/procedures/trader", {"rule": "Be brief."}))
    mine = agent_api.post("/procedures/researcher", {"rule": "Be brief."})
    assert mine.status_code == 201 and mine.json()["data"]["id"] != theirs["id"]
    # Another team adding the same rule to the same agent id gets its own: nothing tells it that
    # this team has one.
    other = _other_api(other_team).post("/procedures/researcher", {"rule": "Be brief."})
    assert other.status_code == 201
    assert other.json()["data"]["id"] not in (theirs["id"], mine.json()["data"]["id"])
    assert Procedure.objects.filter(team=team, agent_id="researcher").count() == 1


def test_every_change_of_a_rule_is_in_its_history(team, agent, agent_api, api, issued):
    mine = f"key {agent_api.key_id}"
    team_key = f"key {issued.key_id}"
    rule = ok_data(agent_api.post("/procedures/researcher", {"rule": "Be brief."}))
    rid = rule["id"]
    agent_api.post("/procedures/researcher", {"rule": "be brief."})  # met, already active: none
    api.put(f"/procedures/researcher/{rid}", {"status": "rejected"})
    agent_api.post("/procedures/researcher", {"rule": "Be brief."})  # met: made active again
    agent_api.put(f"/procedures/researcher/{rid}", {"rule": "Be concise."})
    agent_api.put(f"/procedures/researcher/{rid}", {"rule": "Be concise."})  # no change: none
    other = ok_data(agent_api.post("/procedures/researcher", {"rule": "Cite the source."}))
    agent_api.delete(f"/procedures/researcher/{rid}")
    history = ok_data(agent_api.get("/procedures/researcher/history"))
    assert history["agent_id"] == "researcher"
    keys = ("procedure_id", "change", "rule_before", "rule", "status_before", "status", "by")
    seen = [tuple(r[k] for k in keys) for r in history["revisions"]]
    assert seen == [
        (rid, "removed", None, "Be concise.", None, "active", mine),
        (other["id"], "added", None, "Cite the source.", None, "active", mine),
        (rid, "changed", "Be brief.", "Be concise.", None, "active", mine),
        (rid, "changed", None, "Be brief.", "rejected", "active", mine),
        (rid, "changed", None, "Be brief.", "active", "rejected", team_key),
        (rid, "added", None, "Be brief.", None, "active", mine),
    ]
    # One rule's, a removed one's too; the newest first, as many as asked.
    one = ok_data(agent_api.get(f"/procedures/researcher/history?procedure_id={rid}&limit=2"))
    assert [r["change"] for r in one["revisions"]] == ["removed", "changed"]
    for bad in ("limit=0", "limit=501", "procedure_id=-1", "procedure_id=x"):
        answer = agent_api.get(f"/procedures/researcher/history?{bad}")
        assert (answer.status_code, error_code(answer)) == (400, "VALIDATION_ERROR")


def test_a_rules_history_is_the_agents_and_the_teams_own(team, agent, api, other_team):
    AgentFactory(team=team, agent_id="trader")
    traders = ok_data(api.post("/procedures/trader", {"rule": "Never exceed 3x leverage."}))
    k = api_key_issue(team=team, agent=agent)
    researcher = SignedClient(Client(), k.key_id, k.secret)
    assert researcher.get("/procedures/trader/history").status_code == 403
    # Another team: the same agent id has no history, and this team's rule id names none.
    other = _other_api(other_team)
    empty = {"agent_id": "trader", "revisions": []}
    assert ok_data(other.get("/procedures/trader/history")) == empty
    asked = f"/procedures/trader/history?procedure_id={traders['id']}"
    assert ok_data(other.get(asked)) == empty
    assert len(ok_data(api.get(asked))["revisions"]) == 1


def test_a_removed_rule_comes_back_with_its_id_text_and_status(team, agent, agent_api, api):
    rule = ok_data(agent_api.post("/procedures/researcher", {"rule": "Be brief."}))
    rid = rule["id"]
    api.put(f"/procedures/researcher/{rid}", {"status": "rejected"})
    ok_data(agent_api.delete(f"/procedures/researcher/{rid}"))
    restored = agent_api.post(f"/procedures/researcher/{rid}/restore")
    assert restored.status_code == 201
    back = restored.json()["data"]
    assert (back["id"], back["rule"], back["status"], back["source"]) == (
        rid,
        "Be brief.",
        "rejected",
        "agent",
    )
    assert ok_data(agent_api.get("/procedures/researcher"))["procedures"] == [back]
    history = ok_data(agent_api.get(f"/procedures/researcher/history?procedure_id={rid}"))
    latest = history["revisions"][0]
    assert (latest["change"], latest["rule"], latest["status"], latest["by"]) == (
        "restored",
        "Be brief.",
        "rejected",
        f"key {agent_api.key_id}",
    )
    # Not removed (restored already): 409, and nothing written.
    again = agent_api.post(f"/procedures/researcher/{rid}/restore")
    assert (again.status_code, error_code(again)) == (409, "CONFLICT")
    assert ProcedureRevision.objects.filter(procedure_id=rid).count() == 4
    # Removed again, it comes back again: the latest removal is what is restored.
    api.put(f"/procedures/researcher/{rid}", {"rule": "Be concise."})
    ok_data(api.delete(f"/procedures/researcher/{rid}"))
    assert ok_data(api.post(f"/procedures/researcher/{rid}/restore"))["rule"] == "Be concise."
    # A rule the agent never had, or one of another of its team's agents: 404.
    AgentFactory(team=team, agent_id="trader")
    theirs = ok_data(api.post("/procedures/trader", {"rule": "Hedge."}))
    ok_data(api.delete(f"/procedures/trader/{theirs['id']}"))
    for path in (
        f"/procedures/researcher/{theirs['id']}/restore",
        "/procedures/researcher/0/restore",
    ):
        missing = api.post(path)
        assert (missing.status_code, error_code(missing)) == (404, "NOT_FOUND")
    # An agent-scoped key restores its own agent's rules only.
    refused = agent_api.post(f"/procedures/trader/{theirs['id']}/restore")
    assert refused.status_code == 403
    assert not Procedure.objects.filter(pk=theirs["id"]).exists()


def test_a_restore_is_refused_as_an_add_of_its_text_would_be(team, agent, agent_api, api):
    rid = ok_data(agent_api.post("/procedures/researcher", {"rule": "Be brief."}))["id"]
    ok_data(agent_api.delete(f"/procedures/researcher/{rid}"))
    # Its words were added again meanwhile: one rule of a text, so the restore names that one.
    now = ok_data(agent_api.post("/procedures/researcher", {"rule": "BE BRIEF."}))
    taken = agent_api.post(f"/procedures/researcher/{rid}/restore")
    assert (taken.status_code, error_code(taken)) == (409, "CONFLICT")
    assert taken.json()["details"] == {"rule": [f"the same text as rule {now['id']}"]}
    ok_data(agent_api.delete(f"/procedures/researcher/{now['id']}"))
    # A full agent: 400, as for an add.
    _rules_held(team, "researcher", MAX_RULES_PER_AGENT)
    full = agent_api.post(f"/procedures/researcher/{rid}/restore")
    assert (full.status_code, error_code(full)) == (400, "VALIDATION_ERROR")
    assert not Procedure.objects.filter(pk=rid).exists()


def test_a_removed_rules_id_taken_meanwhile_brings_it_back_under_a_new_one(
    team, agent, agent_api, other_team
):
    rid = ok_data(agent_api.post("/procedures/researcher", {"rule": "Be brief."}))["id"]
    ok_data(agent_api.delete(f"/procedures/researcher/{rid}"))
    # Ids are not reused; a database restored without its counters could, for another team.
    Procedure.objects.create(pk=rid, team=other_team, agent_id="x", rule="Theirs.", source="team")
    back = agent_api.post(f"/procedures/researcher/{rid}/restore")
    assert back.status_code == 201
    new_id = back.json()["data"]["id"]
    assert new_id != rid and Procedure.objects.get(pk=new_id).rule == "Be brief."
    assert Procedure.objects.get(pk=rid).rule == "Theirs."
    restored = ProcedureRevision.objects.filter(team=team, change="restored").get()
    assert restored.procedure_id == new_id


def test_another_team_cannot_restore_or_detect_a_removed_rule(team, agent, api, other_team):
    rid = ok_data(api.post("/procedures/researcher", {"rule": "Be brief."}))["id"]
    ok_data(api.delete(f"/procedures/researcher/{rid}"))
    other = _other_api(other_team)
    AgentFactory(team=other_team, agent_id="researcher")
    theirs = other.post(f"/procedures/researcher/{rid}/restore")
    never = other.post("/procedures/researcher/987654321/restore")
    assert (theirs.status_code, theirs.json()) == (never.status_code, never.json())
    assert theirs.status_code == 404
    assert not Procedure.objects.filter(pk=rid).exists()
    assert not Procedure.objects.filter(team=other_team).exists()


def _rules_held(team, agent_id: str, count: int) -> None:
    Procedure.objects.bulk_create(
        Procedure(team=team, agent_id=agent_id, rule=f"Rule number {i}.", source="agent")
        for i in range(count)
    )


def test_an_agent_holds_at_most_the_limit_of_rules(team, agent, agent_api, api):
    _rules_held(team, "researcher", MAX_RULES_PER_AGENT - 1)
    last = agent_api.post("/procedures/researcher", {"rule": "Be brief."})
    assert last.status_code == 201
    # Full: a new rule is refused, saying why; restating one it has is still answered.
    refused = agent_api.post("/procedures/researcher", {"rule": "Cite the source."})
    assert refused.status_code == 400 and error_code(refused) == "VALIDATION_ERROR"
    assert refused.json()["details"] == {
        "rule": [
            f"An agent holds at most {MAX_RULES_PER_AGENT} rules: remove one it no longer "
            "follows first."
        ]
    }
    assert agent_api.post("/procedures/researcher", {"rule": "be brief."}).status_code == 200
    assert Procedure.objects.filter(team=team, agent_id="researcher").count() == 200
    # The limit is the agent's: another agent of the team adds its own.
    AgentFactory(team=team, agent_id="trader")
    assert api.post("/procedures/trader", {"rule": "Cite the source."}).status_code == 201
    # Removing one makes room.
    ok_data(agent_api.delete(f"/procedures/researcher/{last.json()['data']['id']}"))
    assert agent_api.post("/procedures/researcher", {"rule": "Cite the source."}).status_code == 201


def test_procedure_input_is_checked(api):
    assert error_code(api.post("/procedures/researcher", {"rule": ""})) == "VALIDATION_ERROR"
    assert error_code(api.post("/procedures/researcher", {})) == "VALIDATION_ERROR"
    assert error_code(api.get("/procedures/researcher?status=maybe")) == "VALIDATION_ERROR"
    made = ok_data(api.post("/procedures/researcher", {"rule": "Be brief."}))
    assert error_code(api.put(f"/procedures/researcher/{made['id']}", {})) == "VALIDATION_ERROR"
    bad = api.put(f"/procedures/researcher/{made['id']}", {"status": "archived"})
    assert error_code(bad) == "VALIDATION_ERROR"
    assert api.get("/procedures/not%20an%20id").status_code == 400


def test_rules_are_the_agents_and_the_teams_own(team, agent, agent_api, api, other_team):
    AgentFactory(team=team, agent_id="trader")
    traders = ok_data(api.post("/procedures/trader", {"rule": "Never exceed 3x leverage."}))
    assert ok_data(api.get("/procedures/trader"))["procedures"][0]["source"] == "team"
    # An agent key cannot read, add to, change or remove another agent's rules.
    assert agent_api.get("/procedures/trader").status_code == 403
    assert agent_api.post("/procedures/trader", {"rule": "x"}).status_code == 403
    assert agent_api.put(f"/procedures/trader/{traders['id']}", {"rule": "x"}).status_code == 403
    assert agent_api.delete(f"/procedures/trader/{traders['id']}").status_code == 403
    # Another team: the same agent id holds nothing, and this team's rule id is as missing as
    # one that does not exist.
    other = _other_api(other_team)
    assert ok_data(other.get("/procedures/trader")) == {"procedures": []}
    foreign = other.put(f"/procedures/trader/{traders['id']}", {"rule": "x"})
    missing = other.put("/procedures/trader/99999999", {"rule": "x"})
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()
    assert other.delete(f"/procedures/trader/{traders['id']}").json() == missing.json()
    assert Procedure.objects.get(pk=traders["id"]).rule == "Never exceed 3x leverage."


FEEDBACK = [
    "The user wants short answers without long explanations.",
    "The user asked again for shorter answers, no long explanations.",
    "The user prefers short answers and dislikes long explanations.",
]


def test_repeated_feedback_is_proposed_as_a_rule_never_applied_until_accepted(
    team, agent, agent_api
):
    for text in FEEDBACK:
        MemoryFactory(team=team, agent_id="researcher", content=text, category="preference")
    MemoryFactory(
        team=team, agent_id="researcher", content="The user likes green tea.", category="preference"
    )
    answer = ok_data(agent_api.post("/lifecycle/propose-procedures", {"agent_id": "researcher"}))
    assert answer["count"] == 1 and answer["examined"] == 4
    (proposal,) = answer["proposals"]
    assert proposal["status"] == "proposed" and proposal["source"] == "lifecycle"
    assert proposal["rule"] in FEEDBACK
    assert len(proposal["evidence"]) == 3
    (proposed,) = ok_data(agent_api.get("/procedures/researcher/history"))["revisions"]
    assert (proposed["change"], proposed["status"], proposed["by"]) == (
        "added",
        "proposed",
        "lifecycle",
    )
    # Proposed, not followed: the agent's active rules are unchanged until it accepts.
    assert ok_data(agent_api.get("/procedures/researcher?status=active")) == {"procedures": []}
    # Asking again proposes nothing new: that point has a rule (here, a proposal) already.
    again = ok_data(agent_api.post("/lifecycle/propose-procedures", {"agent_id": "researcher"}))
    assert again["count"] == 0
    accepted = ok_data(
        agent_api.put(f"/procedures/researcher/{proposal['id']}", {"status": "active"})
    )
    assert accepted["status"] == "active"
    assert [
        p["id"]
        for p in ok_data(agent_api.get("/procedures/researcher?status=active"))["procedures"]
    ] == [proposal["id"]]


@pytest.mark.parametrize("held, proposed", [(MAX_RULES_PER_AGENT - 1, 1), (MAX_RULES_PER_AGENT, 0)])
def test_nothing_is_proposed_past_the_agents_room_for_rules(team, agent, api, held, proposed):
    _rules_held(team, "researcher", held)
    for text in FEEDBACK:
        MemoryFactory(team=team, agent_id="researcher", content=text, category="preference")
    answer = ok_data(api.post("/lifecycle/propose-procedures", {"agent_id": "researcher"}))
    assert answer["count"] == proposed
    assert Procedure.objects.filter(team=team, agent_id="researcher").count() == held + proposed


def test_a_rejected_proposal_is_not_proposed_again(team, agent, api):
    for text in FEEDBACK:
        MemoryFactory(team=team, agent_id="researcher", content=text, category="preference")
    (proposal,) = ok_data(api.post("/lifecycle/propose-procedures", {"agent_id": "researcher"}))[
        "proposals"
    ]
    ok_data(api.put(f"/procedures/researcher/{proposal['id']}", {"status": "rejected"}))
    assert (
        ok_data(api.post("/lifecycle/propose-procedures", {"agent_id": "researcher"}))["count"] == 0
    )


def test_too_little_feedback_proposes_nothing(team, agent, api):
    for text in FEEDBACK[:2]:
        MemoryFactory(team=team, agent_id="researcher", content=text, category="preference")
    answer = ok_data(api.post("/lifecycle/propose-procedures", {"agent_id": "researcher"}))
    assert answer == {"proposals": [], "count": 0, "examined": 2}
