"""What a type checker sees of the clients' answers: checked by `mypy .` (pyproject's mypy
`exclude` keeps this folder of tests/ in) and by tests/test_client_types.py, never run. A wrong
annotation in memoryplatform/client.py, or an endpoint that lost its type on one of the two
clients, makes these `assert_type`s fail."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import assert_type

from memoryplatform.client import (
    Agent,
    AsyncMemoryClient,
    BatchResult,
    CleanupResult,
    CompressResult,
    Consolidated,
    Episode,
    Health,
    ImportResult,
    IngestMessage,
    IngestResult,
    Job,
    JobAccepted,
    Memory,
    MemoryClient,
    MemoryDetail,
    MemoryHistory,
    MemoryPage,
    Procedure,
    ProcedureList,
    Profile,
    ProfileHistory,
    ProfileSetResult,
    Proposals,
    SearchHit,
    Stats,
    Team,
    TrashPage,
    WorkingItem,
)


def check_sync(client: MemoryClient) -> None:
    assert_type(client.health(), Health)
    assert_type(client.get_stats(), Stats)
    assert_type(client.upsert_team("t", "T"), Team)
    assert_type(client.list_agents("t"), list[Agent])
    assert_type(client.delete_agent("t", "a"), None)
    assert_type(client.write_memory("a", "note", importance=0.8), Memory)
    assert_type(client.get_memory(1), MemoryDetail)
    assert_type(client.memory_history(1), MemoryHistory)
    assert_type(client.list_memories(page_size=2, run_id="run-1"), MemoryPage)
    assert_type(client.iter_memories(run_id="run-1"), Iterator[Memory])
    assert_type(client.search("a", "tea", limit=3, run_id="run-1"), list[SearchHit])
    assert_type(client.search_team("tea"), list[SearchHit])
    assert_type(client.get_recent("a"), list[Memory])
    assert_type(client.write_memories([{"agent_id": "a", "content": "x"}]), BatchResult)
    assert_type(client.list_trash(), TrashPage)
    assert_type(client.write_working("a", "x"), WorkingItem)
    assert_type(client.compress("a"), CompressResult)
    assert_type(client.cleanup(dry_run=True), CleanupResult)
    assert_type(client.get_job(1), Job)
    assert_type(client.wait_for_job(1, timeout=5), Job)
    assert_type(client.export(), JobAccepted)
    assert_type(client.search_episodes("a", "deploy"), list[Episode])
    assert_type(client.list_procedures("a"), ProcedureList)
    assert_type(client.update_procedure("a", 1, status="active"), Procedure)
    assert_type(client.download_export(1), bytes)
    assert_type(client.import_bundle(b"", on_conflict="skip"), ImportResult)
    assert_type(client.get_profile("a"), Profile)
    assert_type(client.set_profile("a", {"occupation": "SRE"}), ProfileSetResult)
    assert_type(client.delete_profile_field("a", "occupation"), None)
    assert_type(client.profile_history("a", limit=5), ProfileHistory)
    assert_type(client.get_profile("a")["fields"]["occupation"]["value"], str)
    messages = [{"role": "user", "content": "I drink green tea"}]
    assert_type(client.ingest("a", messages, run_id="r"), IngestResult | JobAccepted)
    typed: list[IngestMessage] = [{"role": "user", "content": "I drink tea", "name": "alice"}]
    assert_type(client.ingest("a", typed, fact_roles=["user"]), IngestResult | JobAccepted)
    # The bodies are TypedDicts: their keys and value types are known.
    assert_type(client.get_memory(1)["content"], str)
    assert_type(client.get_memory(1)["superseded_by"], int | None)
    assert_type(client.search("a", "tea")[0]["score"], float)
    assert_type(client.list_memories()["next_cursor"], str | None)
    answer = client.ingest("a", messages, async_=True)
    if "job_id" in answer:
        assert_type(answer, JobAccepted)
    else:
        assert_type(answer, IngestResult)
    # A search hit, a memory's detail: both are memories.
    memories: list[Memory] = [client.get_memory(1), *client.search("a", "tea")]
    del memories


async def check_async(client: AsyncMemoryClient) -> None:
    assert_type(await client.health(), Health)
    assert_type(await client.get_stats(), Stats)
    assert_type(await client.delete_team("t"), None)
    assert_type(await client.write_memory("a", "note"), Memory)
    assert_type(await client.get_memory(1), MemoryDetail)
    assert_type(await client.list_memories(cursor="c", run_id="r"), MemoryPage)
    assert_type(client.iter_memories(page_size=10), AsyncIterator[Memory])
    assert_type(await client.search("a", "tea", run_id="r"), list[SearchHit])
    assert_type(await client.list_trash(page=2), TrashPage)
    assert_type(await client.get_job(1), Job)
    assert_type(await client.wait_for_job(1, interval=0.1), Job)
    assert_type(await client.export("a1"), JobAccepted)
    assert_type(await client.record_episode("a", "deploy", "success"), Episode)
    assert_type(await client.propose_procedures("a"), Proposals)
    assert_type(await client.consolidate("a"), Consolidated)
    assert_type(await client.download_export(1), bytes)
    assert_type(await client.import_bundle(b""), ImportResult)
    assert_type(await client.get_profile("a"), Profile)
    assert_type(await client.profile_history("a"), ProfileHistory)
    assert_type(
        await client.ingest("a", [], idempotency_key="k", async_=True), IngestResult | JobAccepted
    )
    assert_type((await client.get_memory(1))["content"], str)
    async for memory in client.iter_memories():
        assert_type(memory["id"], int)
