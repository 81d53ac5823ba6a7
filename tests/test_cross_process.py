"""Read-your-writes across server processes: each gunicorn worker has its own in-process index."""

from __future__ import annotations

import pytest

from memoryplatform.client import MemoryClient

from .livestack import live_stack

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_write_through_one_process_is_searchable_through_another_at_once(tmp_path):
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (MemoryClient(stack.api_key, stack.secret, base_url=u) for u in stack.urls)
        # Both processes build their index before the writes, so B must catch up, not load fresh.
        assert a.search("ops", "warm up") == [] and b.search("ops", "warm up") == []
        written = a.write_memory("ops", "生产数据库每周日凌晨从备份刷新到预发环境", importance=0.8)
        found = b.search("ops", "预发环境什么时候刷新")
        assert [m["id"] for m in found] == [written["id"]]

        # An update through B is what A returns next, never the old text.
        b.update_memory(written["id"], content="预发环境改为每周六凌晨刷新")
        found = a.search("ops", "预发环境 刷新", min_score=0.0)
        assert [m["content"] for m in found] == ["预发环境改为每周六凌晨刷新"]

        # A delete through A is gone from B at once.
        a.delete_memory(written["id"])
        assert b.search("ops", "预发环境 刷新", min_score=0.0) == []
        assert b.get_recent("ops") == []

        # Team memories too.
        t = b.write_team_memory("风控规则：单策略最大仓位 30%，总杠杆不超过 3x", importance=0.95)
        assert [m["id"] for m in a.search_team("风控 杠杆")] == [t["id"]]
