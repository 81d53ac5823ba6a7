"""Working-memory events: signals that let a higher app (the lifecycle pipeline) react to
working-memory writes and evictions without the memories app importing it (imports flow
tenants <- memories <- lifecycle). Defined here, below everything that sends or receives them.
"""

from __future__ import annotations

import django.dispatch

# Sent after a working-memory item is stored: kwargs team (Team), agent_id (str) and, optionally,
# run_id (str, the session the write named; "" or absent when none).
working_memory_written = django.dispatch.Signal()

# Sent by the working store *before* it removes the items the per-agent cap pushes out: kwargs
# team_id (str), agent_id (str), items (list of memories.working.WorkingItem, oldest first). A
# receiver keeps them (the lifecycle archives them, restorable). If a receiver raises, the store
# keeps the items — working memory stays above its cap until a later write hands them over — so
# an item is never lost between the two.
working_memory_evicting = django.dispatch.Signal()
