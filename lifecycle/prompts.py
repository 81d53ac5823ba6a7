"""Prompts of the lifecycle's LLM engine: compress, extract facts, aggregate, persona.

The shared pieces (the system prompt that says the memory records are data, never instructions,
and the escaped data blocks that carry them) are `llm.prompts`. Every prompt here states the
exact JSON shape expected (the engine validates it anyway) and asks for the language of the
memories.
"""

from __future__ import annotations

from llm import chat_messages, cut, data_block

# Longest piece of one memory sent to the model; longer text is cut (the model sees "…").
MAX_ITEM_CHARS = 8000

CATEGORY_GUIDE = (
    "preference (likes, dislikes, wanted style), habit (recurring behaviour), expertise (skills, "
    "domains, tools known well), decision (a choice that was made), plan (something to do later), "
    "metric (a measured number), event (something that happened once), fact (anything else)"
)


def _language_rule(language: str) -> str:
    if language == "zh":
        return (
            "Write every text field in the language of the records: they are mostly Chinese, "
            "so write in Chinese (简体中文)."
        )
    return (
        "Write every text field in the language of the records (Chinese records -> Chinese, "
        "English records -> English)."
    )


def _cut(text: str) -> str:
    return cut(text, MAX_ITEM_CHARS)


def compress_messages(items: list[str], target_count: int, language: str) -> list[dict[str, str]]:
    records = [{"index": i, "text": _cut(t)} for i, t in enumerate(items)]
    task = f"""Task: compress these working-memory items of an agent into AT MOST {target_count} \
long-term memories.
- Group items about the same topic; each group becomes one summary.
- Every item index must appear in the source_indexes of exactly one summary.
- A summary keeps every detail worth remembering later (decisions, preferences, numbers, names, \
dates, open tasks) and drops chit-chat and greetings. It must be understandable on its own.
- Keep the words that say how long something holds as they were said ("until Friday", "for the \
next three days", "直到下周一", "接下来两周"); never turn them into a date.
- importance is a number from 0 to 1: how valuable the summary is in the long term \
(decisions, preferences and key metrics 0.7-0.9; plans about 0.6; routine events 0.3-0.5).
- {_language_rule(language)}

Reply with JSON exactly like:
{{"summaries": [{{"content": "...", "importance": 0.7, "source_indexes": [0, 1]}}]}}"""
    return chat_messages(task, data_block("memories", records))


def extract_facts_messages(items: list[str], language: str) -> list[dict[str, str]]:
    records = [{"index": i, "text": _cut(t)} for i, t in enumerate(items)]
    task = f"""Task: extract the atomic facts worth remembering long term from these \
working-memory items of an agent.
- One fact states one thing and is self-contained: replace pronouns and vague references \
("it", "he", "this project", "他", "这个") with what they refer to, and keep dates and numbers.
- Keep observations, decisions, preferences, plans, skills and key data; skip chit-chat, \
greetings, thanks, questions and transient chatter. If nothing is worth keeping, return \
{{"facts": []}}.
- category is one of: {CATEGORY_GUIDE}.
- importance is a number from 0 to 1 (decisions, preferences and key metrics 0.7-0.9; plans \
about 0.6; one-off events 0.3-0.5).
- source_indexes lists the indexes of the items the fact comes from.
- expires_at: only when the fact says it stops being true on a calendar date the item writes \
out ("on leave until 2027-01-31", "直到2027年1月31日"), that date as YYYY-MM-DD; otherwise \
leave it out. Never compute a date from "Friday" or "next week", never guess one (nor the \
year of "March 10", nor the month of "the 15th"): keep such words in the fact as they were said ("until Friday", "for the \
next three days", "until March 10", "直到下周一", "接下来两周", "直到3月10日").
- {_language_rule(language)}

Reply with JSON exactly like:
{{"facts": [{{"content": "...", "importance": 0.8, "category": "preference", "source_indexes": [2]}}]}}"""
    return chat_messages(task, data_block("memories", records))


def aggregate_messages(memories: list[tuple[int, str]], language: str) -> list[dict[str, str]]:
    records = [{"id": memory_id, "text": _cut(text)} for memory_id, text in memories]
    task = f"""Task: group these long-term memories of an agent into scenarios: topic blocks \
such as a project, a line of research, a recurring activity or an area of preferences.
- A scenario gathers at least 2 memories about the same topic; a memory belongs to at most one \
scenario; memories that fit nowhere are left out.
- name: a short topic title (at most 10 words / 20 Chinese characters).
- summary: 1-3 sentences that synthesise what the memories of the scenario say.
- memory_ids: the ids (numbers from the "id" fields) of its memories, only ids from the records.
- {_language_rule(language)}

Reply with JSON exactly like:
{{"scenarios": [{{"name": "...", "summary": "...", "memory_ids": [12, 15]}}]}}"""
    return chat_messages(task, data_block("memories", records))


def persona_messages(
    facts: list[tuple[int, str, str]],
    scenarios: list[tuple[str, str, str]],
    language: str,
    profile: list[tuple[str, str]] | None = None,
) -> list[dict[str, str]]:
    fact_records = [
        {"id": memory_id, "category": category, "text": _cut(text)}
        for memory_id, text, category in facts
    ]
    scenario_records = [
        {"id": scenario_id, "name": name, "summary": _cut(summary)}
        for scenario_id, name, summary in scenarios
    ]
    task = f"""Task: build the profile (persona) of the user this agent works for, from the \
agent's memories and scenario summaries.
- preferences: what they like, dislike or want (short items).
- habits: recurring behaviour and routines.
- expertise: their domains, skills and tools.
- communication_style: how they want to be answered (length, tone, format); "" if unknown.
- summary: 2-4 sentences describing them; start from the profile fields (exact, set or \
confirmed for this user: they win over any memory that disagrees).
- memory_ids: the ids of the memories you used; scenario_ids: the ids of the scenarios you used.
- Only include what the records support; use empty lists when there is nothing.
- {_language_rule(language)}

Reply with JSON exactly like:
{{"preferences": ["..."], "habits": ["..."], "expertise": ["..."], "communication_style": "...", \
"summary": "...", "memory_ids": [1, 2], "scenario_ids": ["..."]}}"""
    blocks = [data_block("memories", fact_records), data_block("scenarios", scenario_records)]
    if profile:
        records = [{"key": key, "value": _cut(value)} for key, value in profile]
        blocks.insert(0, data_block("profile", records))
    return chat_messages(task, *blocks)
