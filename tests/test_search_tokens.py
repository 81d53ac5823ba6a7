"""Search tokens stored with the memory: an index load reads them instead of tokenising again."""

from __future__ import annotations

import pytest

from memories.models import Memory
from memories.retrieval import index
from memories.retrieval.embeddings import get_embedder
from memories.retrieval.text import tokenize, tokens_for_storage, tokens_from_storage

from .test_memories_api import search, write

pytestmark = pytest.mark.django_db


def test_writes_store_stamped_tokens_and_updates_refresh_them(api):
    mid = write(api, "回测数据源：Binance USDT 永续合约").json()["data"]["id"]
    stored = Memory.objects.get(pk=mid).search_tokens
    assert tokens_from_storage(stored) == tokenize("回测数据源：Binance USDT 永续合约")
    api.put(
        f"/memories/personal/{mid}", {"content": "The staging database is refreshed on Sundays"}
    )
    stored = Memory.objects.get(pk=mid).search_tokens
    assert tokens_from_storage(stored) == tokenize("The staging database is refreshed on Sundays")


def test_tokens_of_another_tokenizer_are_recomputed(settings):
    stored = tokens_for_storage("用户偏好简洁直接的回复")
    assert tokens_from_storage(stored) is not None
    settings.SEARCH_JIEBA_MIN_FREQ = settings.SEARCH_JIEBA_MIN_FREQ + 1
    assert tokens_from_storage(stored) is None  # another dictionary: not trusted
    assert tokens_from_storage("") is None


def test_the_index_uses_stored_tokens_and_falls_back_without_them(api, team):
    a = write(api, "Alice prefers Python for data pipelines").json()["data"]["id"]
    b = write(api, "Bob reviews every unsafe Rust block").json()["data"]["id"]
    # Row a carries tokens the text does not contain: the load must read the stored ones.
    Memory.objects.filter(pk=a).update(search_tokens=tokens_for_storage("zebrafish aquarium"))
    Memory.objects.filter(pk=b).update(search_tokens="")  # written before the column: recompute
    index.registry.clear()
    ix = index.registry.get(
        team_id=team.id, scope="personal", agent_id="assistant", embedder=get_embedder()
    )
    assert "zebrafish" in ix.term_id and "python" not in ix.term_id
    assert b in {r["id"] for r in search(api, "unsafe Rust", mode="keyword")}


def test_reembed_memories_tokens_backfills_missing_and_outdated_tokens(team):
    from io import StringIO

    from django.core.management import call_command

    from memories.services import memory_create

    fresh, _ = memory_create(team=team, scope="personal", agent_id="a", content="ports of call")
    old, _ = memory_create(team=team, scope="personal", agent_id="a", content="回测数据源")
    stale, _ = memory_create(team=team, scope="team", agent_id="", content="ships at sea")
    Memory.objects.filter(pk=old.pk).update(search_tokens="")
    Memory.objects.filter(pk=stale.pk).update(search_tokens="t0.5|ships")
    out = StringIO()
    call_command("reembed_memories", "--tokens", "--team", team.id, stdout=out)
    assert "2 memories without current search tokens" in out.getvalue()
    assert "stored the search tokens of 2 memories" in out.getvalue()
    for m in (fresh, old, stale):
        m.refresh_from_db()
        assert tokens_from_storage(m.search_tokens) == tokenize(m.content)
