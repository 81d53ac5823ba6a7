"""GET /lifecycle/persona/<agent_id>.md and /lifecycle/scenarios/<agent_id>.md: one Markdown
document tracing persona -> scenarios -> memories -> the archived messages they came from;
errors stay in the JSON envelope; the JSON routes beside them are unchanged."""

from __future__ import annotations

import pytest

from lifecycle.models import WorkingArchive
from memories.models import Memory

from .factories import MemoryFactory, PersonaFactory, ScenarioFactory
from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

MESSAGES = [
    {
        "role": "user",
        "content": "今天决定把量化策略的回测周期从 3 个月改为 6 个月，因为短期数据噪声太大",
        "name": "alice",
    },
    {"role": "assistant", "content": "好的，已记录。"},
    {
        "role": "user",
        "content": "发现 DeepSeek V4 在代码生成任务上比 MiMo 快约 40%，但中文理解稍弱",
    },
    {"role": "user", "content": "用户偏好简洁直接的回复风格，不喜欢冗长的解释"},
    {"role": "user", "content": "2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩"},
    {"role": "user", "content": "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今"},
    {"role": "user", "content": "下周一需要和团队讨论 Q3 的风控模型升级方案"},
    {"role": "user", "content": "风控规则：单策略最大仓位 30%，总杠杆不超过 3x"},
]


@pytest.fixture
def built(api):
    """A persona built from one ingest: messages archived, facts, scenarios, persona."""
    sent = ok_data(
        api.post(
            "/memories/ingest",
            {
                "agent_id": "researcher",
                "run_id": "s-1",
                "messages": [
                    {**m, "at": f"2026-11-30T09:0{i}:00Z"} for i, m in enumerate(MESSAGES)
                ],
            },
        )
    )
    assert len(sent["facts"]) >= 5
    ok_data(api.post("/lifecycle/aggregate-scenes", {"agent_id": "researcher"}))
    persona = ok_data(api.post("/lifecycle/generate-persona", {"agent_id": "researcher"}))
    assert persona["persona"]["scenario_ids"]
    return persona["persona"]


def _markdown(response) -> str:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    return response.content.decode("utf-8")


def _at(text: str, needle: str, after: int = 0) -> int:
    position = text.find(needle, after)
    assert position >= 0, f"{needle!r} not in the document after {after}"
    return position


def test_the_persona_document_traces_down_to_the_ingested_messages(api, built):
    text = _markdown(api.get("/lifecycle/persona/researcher.md"))
    assert text.startswith("# Persona of `researcher`\n")
    assert f"Persona `{built['id']}`" in text
    for scenario_id in built["scenario_ids"]:
        assert f"(`{scenario_id}`)" in text
    # Every memory the persona names, with its id and content, each followed by the archived
    # messages it came from (id, role, time, content) - in that order, top-down.
    for memory_id in built["memory_ids"]:
        memory = Memory.objects.get(pk=memory_id)
        heading = _at(text, f"Memory #{memory_id}\n")
        body = _at(text, f"> {memory.content.splitlines()[0]}", heading)
        sources = memory.metadata["source_items"]
        assert sources, memory.metadata
        for item_id in sources:
            row = WorkingArchive.objects.get(team_id="team_a", item_id=item_id)
            line = _at(text, f"- `{item_id}` · {row.role}", body)
            assert "2026-11-30T09:0" in text[line : line + 120]
            _at(text, f"  > {row.content}", line)
    # Persona before scenarios before memories before sources.
    first_scenario = _at(text, "## Scenario: ")
    assert _at(text, "## Preferences") < first_scenario
    assert first_scenario < _at(text, "Memory #") < _at(text, "- `")
    # The speaker of a message and its run are shown; the assistant's reply fed no fact.
    assert "user (alice)" in text
    assert "run `s-1`" in text
    assert "好的，已记录。" not in text


def test_the_scenarios_document_traces_each_scenario(api, built):
    text = _markdown(api.get("/lifecycle/scenarios/researcher.md"))
    assert text.startswith("# Scenarios of `researcher`\n")
    scenarios = ok_data(api.get("/lifecycle/scenarios/researcher"))
    assert scenarios
    positions = [_at(text, f"(`{s['id']}`)") for s in scenarios]
    assert positions == sorted(positions)  # newest first, as the JSON list
    for s in scenarios:
        for memory_id in s["memory_ids"]:
            _at(text, f"Memory #{memory_id}\n")
    assert "  > 风控规则：单策略最大仓位 30%，总杠杆不超过 3x" in text  # a source of a memory


def test_gone_memories_and_memories_without_sources_are_said_so(api, team):
    kept = MemoryFactory(team=team, agent_id="researcher", content="line one\n# not a heading")
    scenario = ScenarioFactory(team=team, memory_ids=[kept.pk, 987654])
    PersonaFactory(
        team=team,
        memory_ids=[kept.pk],
        scenario_ids=[scenario.pk],
        scenarios_snapshot=[
            {"id": "gone0", "name": "old topic", "summary": "s", "memory_ids": [987654]}
        ],
    )
    text = _markdown(api.get("/lifecycle/persona/researcher.md"))
    assert "_As the persona saw it; no longer stored._" in text
    assert "### Memory #987654\n\n_No longer stored._" in text
    # Stored text is quoted, so its Markdown cannot break the outline.
    assert "> line one\n> # not a heading" in text
    assert "_No archived sources" in text
    assert "## Other memories" in text  # kept is in no scenario the persona saw
    text = _markdown(api.get("/lifecycle/scenarios/researcher.md"))
    assert f"Memory #{kept.pk}" in text and "Memory #987654" in text


def test_another_agents_memories_are_not_shown(api, team):
    theirs = MemoryFactory(team=team, agent_id="writer", content="the writer's secret")
    ScenarioFactory(team=team, memory_ids=[theirs.pk])
    text = _markdown(api.get("/lifecycle/scenarios/researcher.md"))
    assert "secret" not in text and f"Memory #{theirs.pk}\n\n_No longer stored._" in text


def test_no_scenarios_is_an_empty_document(api):
    assert _markdown(api.get("/lifecycle/scenarios/researcher.md")) == (
        "# Scenarios of `researcher`\n\n_No scenarios yet._\n"
    )


def test_errors_stay_in_the_json_envelope(api, agent_api, built):
    missing = api.get("/lifecycle/persona/nobody.md")
    assert missing.status_code == 404 and missing["Content-Type"].startswith("application/json")
    assert missing.json() == {"ok": False, "code": "NOT_FOUND", "error": "persona not found"}
    assert error_code(agent_api.get("/lifecycle/persona/writer.md")) == "FORBIDDEN"
    assert error_code(agent_api.get("/lifecycle/scenarios/writer.md")) == "FORBIDDEN"
    assert _markdown(agent_api.get("/lifecycle/persona/researcher.md"))
    assert api.delete("/lifecycle/persona/researcher.md").status_code == 405


def test_the_json_routes_beside_them_are_unchanged(api, built):
    assert ok_data(api.get("/lifecycle/persona/researcher"))["id"] == built["id"]
    assert isinstance(ok_data(api.get("/lifecycle/scenarios/researcher")), list)
    # A persona id is still deleted through the <key> route.
    assert ok_data(api.delete(f"/lifecycle/persona/{built['id']}")) == {"deleted": built["id"]}


def test_another_team_gets_what_a_missing_agent_gets(api, other_api, built):
    theirs = other_api.get("/lifecycle/persona/researcher.md")
    missing = other_api.get("/lifecycle/persona/nobody.md")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    assert _markdown(other_api.get("/lifecycle/scenarios/researcher.md")) == (
        "# Scenarios of `researcher`\n\n_No scenarios yet._\n"
    )
