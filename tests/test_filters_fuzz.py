"""Any filter an agent can send either is refused with a FilterError (the API's 400 naming it) or
runs as a query, on SQLite and on MariaDB: never an exception the API would answer with a 500.

Generated from the filter grammar with awkward operands — dates with no such day or no time in
UTC, integers past 64 bits, nulls, nested lists — the kinds of values that were 500s once
(a well-formed "2031-02-30", "9999-12-31T23:59:59-05:00")."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memories.filters import FIELDS, OPERATORS, FilterError, filters_q, parse_filters
from memories.models import Memory

from .factories import MemoryFactory

pytestmark = pytest.mark.django_db

SCALARS = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        -1,
        0.5,
        1e308,
        2**63,
        2**64 + 1,
        -(2**63) - 1,
        "",
        "x",
        "hot",
        "2031-01-01T00:00:00Z",
        "2031-01-01",
        "2031-02-30T00:00:00",
        "9999-12-31T23:59:59-05:00",
        "0001-01-01T00:00:00+01:00",
        "24:00",
        "\x00",
        "é" * 70,
        "a__b",
    ]
)
DATES = [
    "2031-01-01T00:00:00Z",
    "2031-01-01",
    "2031-01-01T00:00:00",
    "2031-02-30T00:00:00",
    "9999-12-31T23:59:59-05:00",
    "0001-01-01T00:00:00+01:00",
    "0999-01-01T00:00:00Z",
]
NUMBERS = [0, -1, 0.5, 1e308, 2**63, 2**64 + 1, -(2**63) - 1]
TEXTS = ["", "x", "hot", "cold", "\x00", "é" * 70, "a__b", "100%", "_"]
# Mostly what each field takes, so that most examples reach the database; now and then any
# value, a key or an operator the grammar does not allow.
VALUES = {
    "importance": NUMBERS,
    "created_at": DATES,
    "expires_at": [None, *DATES],
    "category": TEXTS,
    "run_id": TEXTS,
    "tier": TEXTS,
    "metadata.source": [None, True, *TEXTS, *NUMBERS, "2031-02-30"],
    "metadata.n": [None, *NUMBERS, "3"],
    "created_after": DATES,
    "created_before": DATES,
    "colour": TEXTS,
}


@st.composite
def condition(draw: st.DrawFn, key: str) -> object:
    value = (
        st.one_of(st.sampled_from(VALUES[key]), SCALARS)
        if draw(st.booleans())
        else st.sampled_from(VALUES[key])
    )
    if key in ("created_after", "created_before") or draw(st.integers(0, 3)) == 0:
        return draw(value)
    ops = draw(st.lists(st.sampled_from([*sorted(OPERATORS), "$regex"]), min_size=1, max_size=2))
    return {
        op: draw(st.lists(value, max_size=3)) if op in ("$in", "$nin") else draw(value)
        for op in ops
    }


@st.composite
def leaf(draw: st.DrawFn) -> dict[str, object]:
    keys = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=2, unique=True))
    return {key: draw(condition(key)) for key in keys}


FILTERS = st.recursive(
    leaf(),
    lambda inner: st.dictionaries(
        st.sampled_from(["$and", "$or"]), st.lists(inner, min_size=1, max_size=3), min_size=1
    ),
    max_leaves=5,
)


@pytest.fixture
def rows(team):
    MemoryFactory(team=team, agent_id="a1", metadata={"source": "chat", "n": 3})
    MemoryFactory(team=team, agent_id="a1", metadata={"source": None})
    return team


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=FILTERS)
def test_a_filter_is_refused_or_runs_never_raises_anything_else(rows, raw):
    try:
        parsed = parse_filters(raw)
    except FilterError:
        return
    list(Memory.objects.filter(filters_q(parsed), team=rows).values_list("id", flat=True))


def test_every_filter_field_is_generated():
    assert set(VALUES) >= FIELDS
