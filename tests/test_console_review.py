"""Review console: list filters, search by meaning, correction and revert, bulk actions, sharing.

Real services and embeddings throughout (no mocks): a correction must be findable by search,
a console grant must be honoured by the API for an agent-scoped key.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from memories.models import Memory, MemoryRevision, MemoryShare
from tenants.services import agent_ensure, api_key_issue

from .factories import MemoryFactory
from .helpers import SignedClient, ok_data

pytestmark = pytest.mark.django_db


def _mem(team, content, *, scope="personal", agent_id="researcher", **kwargs) -> Memory:
    return MemoryFactory(team=team, content=content, scope=scope, agent_id=agent_id, **kwargs)


def _listed(response) -> set[int]:
    return {int(i) for i in re.findall(r'<tr data-id="(\d+)"', response.content.decode())}


def _url(team, suffix: str = "") -> str:
    return f"/review/{team.id}/memories/{suffix}"


@pytest.fixture
def corpus(team, other_team):
    """A few memories of two agents, team memories, and one of another team."""
    agent_ensure(team=team, agent_id="coder")
    m = {
        "tea": _mem(team, "The user prefers green tea in the morning.", importance=0.9),
        "deploy": _mem(
            team,
            "Deploys to production happen on Tuesdays after the review.",
            agent_id="coder",
            category="ops",
            metadata={"source": "extraction", "source_items": ["wm_1"], "job_id": 7},
        ),
        "team": _mem(
            team,
            "The office wifi password rotates every month.",
            scope="team",
            agent_id="",
            importance=0.2,
            pinned=True,
        ),
        "old": _mem(team, "The project codename was Falcon.", importance=0.1),
        "foreign": _mem(other_team, "Team B secret plans for the merger.", agent_id="spy"),
    }
    # "old" has not been recalled for 40 days; "tea" was recalled yesterday.
    Memory.objects.filter(pk=m["old"].pk).update(
        created_at=timezone.now() - timedelta(days=40), last_accessed=None
    )
    Memory.objects.filter(pk=m["tea"].pk).update(
        created_at=timezone.now() - timedelta(days=60),
        last_accessed=timezone.now() - timedelta(days=1),
    )
    return m


# --- list and filters ------------------------------------------------------------------------


def test_the_list_shows_the_teams_memories_newest_first_never_another_teams(lead, corpus):
    r = lead.get(_url(corpus["tea"].team))
    assert r.status_code == 200
    ids = _listed(r)
    assert ids == {corpus[k].pk for k in ("tea", "deploy", "team", "old")}
    assert corpus["foreign"].pk not in ids
    assert "Team B secret" not in r.content.decode()


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"agent": "coder"}, {"deploy"}),
        ({"scope": "team"}, {"team"}),
        ({"scope": "personal"}, {"tea", "deploy", "old"}),
        ({"source": "extraction"}, {"deploy"}),
        ({"source": "api"}, {"tea", "team", "old"}),
        ({"category": "ops"}, {"deploy"}),
        ({"importance_min": "0.5"}, {"tea", "deploy"}),
        ({"importance_max": "0.2"}, {"team", "old"}),
        ({"importance_min": "0.15", "importance_max": "0.6"}, {"team", "deploy"}),
        ({"idle_days": "30"}, {"old"}),
        ({"pinned": "yes"}, {"team"}),
        ({"pinned": "no"}, {"tea", "deploy", "old"}),
    ],
)
def test_filters(lead, corpus, params, expected):
    r = lead.get(_url(corpus["tea"].team), params)
    assert r.status_code == 200
    assert _listed(r) == {corpus[k].pk for k in expected}


def test_superseded_memories_are_hidden_by_default_and_can_be_shown(lead, corpus):
    Memory.objects.filter(pk=corpus["old"].pk).update(superseded_by=corpus["tea"])
    team = corpus["tea"].team
    assert corpus["old"].pk not in _listed(lead.get(_url(team)))
    assert _listed(lead.get(_url(team), {"superseded": "only"})) == {corpus["old"].pk}
    assert corpus["old"].pk in _listed(lead.get(_url(team), {"superseded": "all"}))


def test_bad_filters_are_shown_as_errors_not_a_500(lead, corpus):
    r = lead.get(
        _url(corpus["tea"].team),
        {"importance_min": "2", "idle_days": "-1", "agent": "nobody", "importance_max": "x"},
    )
    assert r.status_code == 200
    assert _listed(r) == set()
    assert "errorlist" in r.content.decode()


def test_search_finds_a_memory_by_a_paraphrase_and_shows_its_score(lead, corpus):
    r = lead.get(_url(corpus["tea"].team), {"q": "what does the user drink at breakfast"})
    assert r.status_code == 200
    body = r.content.decode()
    ids = _listed(r)
    assert corpus["tea"].pk in ids
    assert corpus["foreign"].pk not in ids and corpus["old"].pk not in ids
    # Best first: the tea memory is the first row, with its score shown.
    first = body.index('<tr data-id="')
    assert body[first:].startswith(f'<tr data-id="{corpus["tea"].pk}"')
    assert 'class="score"' in body


def test_search_respects_the_filters_and_does_not_count_as_a_recall(lead, corpus):
    team = corpus["tea"].team
    before = Memory.objects.get(pk=corpus["tea"].pk)
    r = lead.get(_url(team), {"q": "what does the user drink at breakfast", "agent": "coder"})
    assert corpus["tea"].pk not in _listed(r)
    r = lead.get(_url(team), {"q": "what does the user drink at breakfast", "scope": "personal"})
    assert corpus["tea"].pk in _listed(r)
    after = Memory.objects.get(pk=corpus["tea"].pk)
    assert (after.access_count, after.last_accessed) == (before.access_count, before.last_accessed)


def test_the_list_is_paged(lead, team):
    for i in range(55):
        _mem(team, f"note number {i} about item {i * 7}")
    r = lead.get(_url(team))
    assert len(_listed(r)) == 50
    assert "page=2" in r.content.decode()
    assert len(_listed(lead.get(_url(team), {"page": "2"}))) == 5


# --- correction, revisions, revert ----------------------------------------------------------


def test_a_correction_is_re_embedded_and_recorded_as_a_revision_by_the_user(lead, corpus):
    memory = corpus["deploy"]
    team = memory.team
    r = lead.post(
        _url(team, f"{memory.pk}/"),
        {
            "content": "Deploys to production happen on Thursdays, never on Fridays.",
            "importance": "0.8",
            "category": "release",
            "pinned": "on",
        },
    )
    assert r.status_code == 302
    memory.refresh_from_db()
    assert memory.content == "Deploys to production happen on Thursdays, never on Fridays."
    assert (memory.importance, memory.category, memory.pinned) == (0.8, "release", True)
    rev = MemoryRevision.objects.get(memory=memory)
    assert rev.user.username == "lead_a" and rev.actor == "user lead_a"
    assert rev.before["content"].startswith("Deploys to production happen on Tuesdays")
    assert (rev.before["pinned"], rev.after["pinned"]) == (False, True)
    assert (rev.before["category"], rev.after["category"]) == ("ops", "release")
    # Re-embedded: search by the new meaning finds it.
    found = lead.get(_url(team), {"q": "which weekday are releases shipped on Thursday"})
    assert memory.pk in _listed(found)
    # The diff is shown on the detail page.
    page = lead.get(_url(team, f"{memory.pk}/")).content.decode()
    assert re.search(r"<del>[^<]*Tuesdays[^<]*</del>", page)
    assert re.search(r"<ins>[^<]*Thursdays[^<]*</ins>", page)
    assert "Deploys to production happen on " in page
    assert "by user lead_a" in page


def test_the_detail_shows_a_memorys_own_expiry(lead, corpus):
    memory = corpus["tea"]
    page = lead.get(_url(memory.team, f"{memory.pk}/")).content.decode()
    assert "<dt>expires</dt>" not in page
    memory.expires_at = timezone.now().replace(year=2031, month=5, day=1, hour=18, minute=0)
    memory.save()
    page = lead.get(_url(memory.team, f"{memory.pk}/")).content.decode()
    assert "<dt>expires</dt><dd>2031-05-01 18:00" in page


def test_a_lead_sets_moves_and_clears_an_expiry_each_a_revision(lead, corpus):
    """The correction's expiry field: set (UTC), kept when sent back as shown, cleared when
    blank, refused in the past; a form without the field leaves it."""
    memory = corpus["tea"]
    url = _url(memory.team, f"{memory.pk}/")
    fields = {"content": memory.content, "importance": "0.9", "category": memory.category}

    def expiry_after(**sent):
        r = lead.post(url, {**fields, **sent})
        memory.refresh_from_db()
        return r, memory.expires_at

    r, end = expiry_after(expires_at="2031-05-01T18:00")
    assert r.status_code == 302 and end == datetime(2031, 5, 1, 18, tzinfo=UTC)
    page = lead.get(url).content.decode()
    assert 'value="2031-05-01T18:00:00"' in page  # shown in the form as it is kept
    # Sent back as shown (another field changed): the expiry stays, one revision for the pin.
    r, end = expiry_after(expires_at="2031-05-01T18:00:00", pinned="on")
    assert end == datetime(2031, 5, 1, 18, tzinfo=UTC)
    # Without the field (a page from before it existed): left as it is, nothing changed.
    _, end = expiry_after(pinned="on")
    assert end is not None
    # In the past: refused, nothing written.
    r, end = expiry_after(expires_at="2020-01-01T00:00")
    assert r.status_code == 200 and "Must be in the future" in r.content.decode()
    assert end is not None
    # Blank: never.
    r, end = expiry_after(expires_at="", pinned="on")
    assert r.status_code == 302 and end is None
    changes = [
        (rev.before.get("expires_at"), rev.after.get("expires_at"))
        for rev in MemoryRevision.objects.filter(memory=memory).order_by("pk")
    ]
    assert changes == [
        (None, "2031-05-01T18:00:00Z"),
        (None, None),  # the pin alone
        ("2031-05-01T18:00:00Z", None),
    ]


def test_an_expired_memory_corrected_before_it_is_moved_keeps_its_expiry(lead, corpus):
    memory = corpus["tea"]
    memory.expires_at = timezone.now() - timedelta(minutes=5)
    memory.save()
    page = lead.get(_url(memory.team, f"{memory.pk}/")).content.decode()
    shown = re.search(r'name="expires_at" value="([^"]+)"', page)
    assert shown is not None
    r = lead.post(
        _url(memory.team, f"{memory.pk}/"),
        {
            "content": "The user prefers jasmine tea.",
            "importance": "0.9",
            "category": "general",
            "expires_at": shown.group(1),
        },
    )
    assert r.status_code == 302
    kept = memory.expires_at
    memory.refresh_from_db()
    assert memory.content == "The user prefers jasmine tea." and memory.expires_at == kept


def test_pinning_alone_is_recorded_as_a_revision(lead, corpus):
    memory = corpus["tea"]
    r = lead.post(_url(memory.team, f"{memory.pk}/quick/"), {"pinned": "1"})
    assert r.status_code == 302
    memory.refresh_from_db()
    assert memory.pinned
    rev = MemoryRevision.objects.get(memory=memory)
    assert (rev.before, rev.after, rev.actor) == (
        {"pinned": False},
        {"pinned": True},
        "user lead_a",
    )


def test_a_correction_with_bad_input_is_re_rendered_with_errors(lead, corpus):
    memory = corpus["tea"]
    r = lead.post(
        _url(memory.team, f"{memory.pk}/"),
        {"content": "   ", "importance": "1.5", "category": "x"},
    )
    assert r.status_code == 200
    assert "errorlist" in r.content.decode()
    memory.refresh_from_db()
    assert memory.content == "The user prefers green tea in the morning."
    assert not MemoryRevision.objects.filter(memory=memory).exists()


def test_revert_restores_the_previous_version_and_records_it(lead, corpus):
    memory = corpus["tea"]
    team = memory.team
    lead.post(
        _url(team, f"{memory.pk}/"),
        {"content": "The user prefers black coffee.", "importance": "0.3", "category": "taste"},
    )
    rev = MemoryRevision.objects.get(memory=memory)
    r = lead.post(_url(team, f"{memory.pk}/revisions/{rev.pk}/revert/"))
    assert r.status_code == 302
    memory.refresh_from_db()
    assert memory.content == "The user prefers green tea in the morning."
    assert (memory.importance, memory.category) == (0.9, "general")
    newest = MemoryRevision.objects.filter(memory=memory).order_by("-id").first()
    assert newest.action == "revert" and newest.actor == "user lead_a"
    assert newest.before["content"] == "The user prefers black coffee."
    # Re-embedded with the restored content.
    assert memory.pk in _listed(lead.get(_url(team), {"q": "green tea in the morning"}))
    assert memory.pk not in _listed(lead.get(_url(team), {"q": "black coffee"}))


def test_reverting_a_supersede_makes_the_memory_current_again(lead, corpus):
    from memories.services import Actor, memory_supersede

    old, new = corpus["old"], corpus["tea"]
    memory_supersede(old=old, new=new, actor=Actor())
    rev = MemoryRevision.objects.get(memory=old, action="supersede")
    lead.post(_url(old.team, f"{old.pk}/revisions/{rev.pk}/revert/"))
    old.refresh_from_db()
    assert old.superseded_by_id is None


# --- bulk actions ---------------------------------------------------------------------------


def _bulk(client, team, ids, action, **extra):
    return client.post(
        _url(team, "bulk/"), {"ids": [str(i) for i in ids], "action": action, **extra}
    )


def test_bulk_delete_skips_pinned_memories_and_says_so(lead, corpus):
    team = corpus["tea"].team
    ids = [corpus["tea"].pk, corpus["old"].pk, corpus["team"].pk]
    r = _bulk(lead, team, ids, "delete")
    assert r.status_code == 302
    assert set(Memory.objects.filter(pk__in=ids).values_list("pk", flat=True)) == {
        corpus["team"].pk
    }
    page = lead.get(r["Location"]).content.decode()
    assert "Deleted 2 memories. Skipped 1 pinned (protected) memories." in page
    # Deleted memories never come back in search.
    assert corpus["tea"].pk not in _listed(lead.get(_url(team), {"q": "green tea"}))


def test_bulk_pin_unpin_and_importance(lead, corpus):
    team = corpus["tea"].team
    ids = [corpus["tea"].pk, corpus["old"].pk]
    _bulk(lead, team, ids, "pin")
    assert Memory.objects.filter(pk__in=ids, pinned=True).count() == 2
    _bulk(lead, team, ids, "unpin")
    assert Memory.objects.filter(pk__in=ids, pinned=True).count() == 0
    _bulk(lead, team, ids, "importance", importance="0.42")
    assert set(Memory.objects.filter(pk__in=ids).values_list("importance", flat=True)) == {0.42}
    assert MemoryRevision.objects.filter(memory_id__in=ids, user__username="lead_a").count() == 6


def test_bulk_importance_is_validated(lead, corpus):
    team = corpus["tea"].team
    r = _bulk(lead, team, [corpus["tea"].pk], "importance", importance="7")
    assert r.status_code == 302
    assert Memory.objects.get(pk=corpus["tea"].pk).importance == 0.9
    assert "importance" in lead.get(r["Location"]).content.decode()


def test_bulk_share_grants_personal_memories_to_chosen_agents(lead, corpus):
    team = corpus["tea"].team
    ids = [corpus["tea"].pk, corpus["team"].pk]
    _bulk(lead, team, ids, "share", agents=["coder"], permission="write")
    assert list(MemoryShare.objects.values_list("memory_id", "agent_id", "permission")) == [
        (corpus["tea"].pk, "coder", "write")
    ]


def test_bulk_share_only_offers_agents_of_this_team(lead, corpus):
    team = corpus["tea"].team
    _bulk(lead, team, [corpus["tea"].pk], "share", agents=["spy"], permission="read")
    assert not MemoryShare.objects.exists()


def test_a_bulk_selection_never_touches_another_teams_memory(lead, corpus):
    team, foreign = corpus["tea"].team, corpus["foreign"]
    for action, extra in [
        ("pin", {}),
        ("importance", {"importance": "0.01"}),
        ("share", {"agents": ["coder"]}),
        ("delete", {}),
    ]:
        _bulk(lead, team, [foreign.pk], action, **extra)
    foreign.refresh_from_db()
    assert (foreign.pinned, foreign.importance) == (False, 0.5)
    assert not MemoryShare.objects.filter(memory=foreign).exists()
    assert not MemoryRevision.objects.filter(memory=foreign).exists()


# --- sharing --------------------------------------------------------------------------------


def test_promote_creates_a_linked_team_memory_and_keeps_the_original(lead, corpus):
    original = corpus["tea"]
    r = lead.post(_url(original.team, f"{original.pk}/promote/"))
    assert r.status_code == 302
    promoted = Memory.objects.get(promoted_from=original)
    assert promoted.scope == "team"
    assert (promoted.content, promoted.importance, promoted.category) == (
        original.content,
        original.importance,
        original.category,
    )
    assert promoted.metadata["promoted_from"] == original.pk
    assert Memory.objects.filter(pk=original.pk, scope="personal").exists()
    assert MemoryRevision.objects.get(memory=original, action="promote").actor == "user lead_a"
    assert r["Location"] == _url(original.team, f"{promoted.pk}/")
    page = lead.get(_url(original.team, f"{original.pk}/")).content.decode()
    assert f"#{promoted.pk}" in page
    # Indexed like any team memory: team search finds it.
    assert promoted.pk in _listed(
        lead.get(_url(original.team), {"q": "green tea morning", "scope": "team"})
    )


def test_promoting_what_the_team_already_knows_says_so_and_writes_nothing(lead, corpus):
    original = corpus["tea"]
    _mem(original.team, original.content, scope="team", agent_id="")
    before = Memory.objects.count()
    r = lead.post(_url(original.team, f"{original.pk}/promote/"))
    assert Memory.objects.count() == before
    assert "already says the same thing" in lead.get(r["Location"]).content.decode()


def test_a_console_grant_is_honoured_by_the_api_for_an_agent_scoped_key(lead, corpus):
    memory = corpus["tea"]
    team = memory.team
    coder = agent_ensure(team=team, agent_id="coder")
    k = api_key_issue(team=team, agent=coder)
    coder_api = SignedClient(Client(), k.key_id, k.secret)
    search = {"agent_id": "coder", "query": "green tea in the morning", "include_shared": True}

    def found() -> list[int]:
        return [m["id"] for m in ok_data(coder_api.post("/memories/personal/search", search))]

    def put():
        return coder_api.put(f"/memories/personal/{memory.pk}", {"importance": 0.1})

    assert found() == []
    assert put().status_code == 403

    r = lead.post(_url(team, f"{memory.pk}/share/"), {"agents": ["coder"], "permission": "read"})
    assert r.status_code == 302
    assert found() == [memory.pk]
    assert put().status_code == 403  # read, not write
    assert "coder" in lead.get(_url(team, f"{memory.pk}/")).content.decode()

    lead.post(_url(team, f"{memory.pk}/share/"), {"agents": ["coder"], "permission": "write"})
    assert MemoryShare.objects.get(memory=memory).permission == "write"
    assert put().status_code == 200

    lead.post(_url(team, f"{memory.pk}/unshare/"), {"agent": "coder"})
    assert not MemoryShare.objects.filter(memory=memory).exists()
    assert found() == []
    assert put().status_code == 403


def test_sharing_refuses_the_owner_and_agents_of_other_teams(lead, corpus, other_team):
    memory = corpus["tea"]
    agent_ensure(team=other_team, agent_id="spy")
    for agent in ("researcher", "spy", "nobody"):
        lead.post(_url(memory.team, f"{memory.pk}/share/"), {"agents": [agent]})
    assert not MemoryShare.objects.exists()


# --- scoping: other teams 404, viewers 403 ---------------------------------------------------


def _post_urls(memory: Memory, revision_id: int) -> list[tuple[str, dict]]:
    return [
        (f"{memory.pk}/", {"content": "x", "importance": "0.5", "category": "c"}),
        (f"{memory.pk}/quick/", {"pinned": "1"}),
        (f"{memory.pk}/revisions/{revision_id}/revert/", {}),
        (f"{memory.pk}/promote/", {}),
        (f"{memory.pk}/share/", {"agents": ["coder"], "permission": "read"}),
        (f"{memory.pk}/unshare/", {"agent": "coder"}),
        ("bulk/", {"ids": [str(memory.pk)], "action": "delete"}),
    ]


def test_every_url_of_another_teams_memory_answers_404(lead, corpus, other_team):
    from memories.services import Actor, memory_update

    foreign = corpus["foreign"]
    memory_update(memory=foreign, actor=Actor(), importance=0.7)
    rev = MemoryRevision.objects.get(memory=foreign)
    team = corpus["tea"].team
    # Through our own team's URLs: the id is simply not found.
    assert lead.get(_url(team, f"{foreign.pk}/")).status_code == 404
    for suffix, data in _post_urls(foreign, rev.pk)[:-1]:
        assert lead.post(_url(team, suffix), data).status_code == 404, suffix
    # Through the other team's URLs: the team itself is not found.
    assert lead.get(_url(other_team)).status_code == 404
    assert lead.get(_url(other_team, f"{foreign.pk}/")).status_code == 404
    for suffix, data in _post_urls(foreign, rev.pk):
        assert lead.post(_url(other_team, suffix), data).status_code == 404, suffix
    # A revision of another memory through one of ours: 404 too.
    own = corpus["tea"]
    assert lead.post(_url(team, f"{own.pk}/revisions/{rev.pk}/revert/")).status_code == 404
    foreign.refresh_from_db()
    assert foreign.importance == 0.7 and Memory.objects.filter(pk=foreign.pk).exists()
    assert MemoryRevision.objects.filter(memory=foreign).count() == 1


def test_a_viewer_sees_everything_but_every_post_answers_403(viewer, lead, corpus):
    memory = corpus["tea"]
    team = memory.team
    lead.post(_url(team, f"{memory.pk}/quick/"), {"importance": "0.6"})
    rev = MemoryRevision.objects.get(memory=memory)
    listing = viewer.get(_url(team))
    assert listing.status_code == 200
    assert memory.pk in _listed(listing)
    assert 'id="bulk"' not in listing.content.decode()
    page = viewer.get(_url(team, f"{memory.pk}/"))
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="correction"' not in body and "revert to the version" not in body
    assert "Promote to team memory" not in body
    for suffix, data in _post_urls(memory, rev.pk):
        assert viewer.post(_url(team, suffix), data).status_code == 403, suffix
    memory.refresh_from_db()
    assert memory.importance == 0.6 and not memory.pinned
    assert MemoryRevision.objects.filter(memory=memory).count() == 1


def test_post_only_urls_refuse_get(lead, corpus):
    memory = corpus["tea"]
    assert lead.get(_url(memory.team, f"{memory.pk}/promote/")).status_code == 405
    assert lead.get(_url(memory.team, "bulk/")).status_code == 405


def test_the_list_runs_a_fixed_number_of_queries_whatever_the_page_size(lead, team):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert lead.get(_url(team), {"pinned": "no", "idle_days": "0"}).status_code == 200
        return len(ctx.captured_queries)

    for i in range(3):
        _mem(team, f"small note {i}", agent_id=f"agent{i}")
    few = count()
    for i in range(3, 30):
        _mem(team, f"small note {i}", agent_id=f"agent{i}", metadata={"source": "compression"})
    assert count() == few


def test_a_quick_edit_from_the_list_goes_back_to_the_filtered_list(lead, corpus):
    memory = corpus["tea"]
    back = _url(memory.team) + "?scope=personal&page=1"
    r = lead.post(_url(memory.team, f"{memory.pk}/quick/"), {"importance": "0.25", "next": back})
    assert r["Location"] == back
    memory.refresh_from_db()
    assert memory.importance == 0.25
    # Off-site or other pages are never a target.
    r = lead.post(
        _url(memory.team, f"{memory.pk}/quick/"), {"pinned": "1", "next": "https://evil.test/"}
    )
    assert r["Location"] == _url(memory.team, f"{memory.pk}/")


def test_a_quick_edit_without_a_value_changes_nothing(lead, corpus):
    memory = corpus["tea"]
    r = lead.post(_url(memory.team, f"{memory.pk}/quick/"), {"importance": ""})
    assert r.status_code == 302
    assert not MemoryRevision.objects.filter(memory=memory).exists()


def test_the_content_diff_is_by_word_and_by_character_for_chinese():
    from console.review.diffs import content_diff

    assert [(s.op, s.text) for s in content_diff("deploy on Tuesday", "deploy on Friday")] == [
        ("equal", "deploy on "),
        ("delete", "Tuesday"),
        ("insert", "Friday"),
    ]
    assert [(s.op, s.text) for s in content_diff("样本量 120", "样本数 150")] == [
        ("equal", "样本"),
        ("delete", "量"),
        ("insert", "数"),
        ("equal", " "),
        ("delete", "120"),
        ("insert", "150"),
    ]
    # A Devanagari word keeps its vowel signs; Thai goes by letter with its marks.
    assert [(s.op, s.text) for s in content_diff("नमस्ते दुनिया", "नमस्कार दुनिया")] == [
        ("delete", "नमस्ते"),
        ("insert", "नमस्कार"),
        ("equal", " दुनिया"),
    ]
    thai = content_diff("ผู้ใช้ชอบชา", "ผู้ใช้ไม่ชอบชา")
    assert [(s.op, s.text) for s in thai] == [
        ("equal", "ผู้ใช้"),
        ("insert", "ไม่"),
        ("equal", "ชอบชา"),
    ]
    for before, after in (("नमस्ते दुनिया", "नमस्कार"), ("ผู้ใช้ชอบชา", "ผู้ใช้ไม่ชอบชา")):
        segments = content_diff(before, after)
        assert "".join(s.text for s in segments if s.op != "insert") == before
        assert "".join(s.text for s in segments if s.op != "delete") == after


def test_a_derived_memory_links_to_its_job_and_sources(lead, corpus):
    memory = corpus["deploy"]
    page = lead.get(_url(memory.team, f"{memory.pk}/")).content.decode()
    assert f"/review/{memory.team.id}/lifecycle/jobs/7/" in page
    assert f"/review/{memory.team.id}/lifecycle/memories/{memory.pk}/sources/" in page


def test_odd_client_metadata_does_not_break_the_page(lead, team):
    memory = _mem(team, "odd", metadata={"job_id": "x/../y", "source_items": "wm_1", "source": 3})
    assert lead.get(_url(team, f"{memory.pk}/")).status_code == 200
    assert lead.get(_url(team), {"source": "api"}).status_code == 200


def test_only_get_on_the_list_and_get_or_post_on_a_memory(lead, corpus):
    memory = corpus["tea"]
    assert lead.post(_url(memory.team), {"q": "x"}).status_code == 405
    assert lead.delete(_url(memory.team, f"{memory.pk}/")).status_code == 405
    assert Memory.objects.filter(pk=memory.pk).exists()


@pytest.fixture
def embedder_down(settings):
    from memories.retrieval import embeddings

    settings.EMBEDDING_BACKEND = "nope"
    yield
    embeddings._embedder = None
    embeddings._embedder_key = None


def test_with_the_embedding_model_down_search_and_correction_say_so(lead, corpus, embedder_down):
    memory = corpus["tea"]
    team = memory.team
    r = lead.get(_url(team), {"q": "green tea"})
    assert r.status_code == 200
    assert "Search is unavailable" in r.content.decode()
    assert len(_listed(lead.get(_url(team)))) == 4  # the plain list needs no model
    r = lead.post(
        _url(team, f"{memory.pk}/"),
        {"content": "new words", "importance": "0.9", "category": "general"},
    )
    assert r.status_code == 200
    assert "embedding model unavailable" in r.content.decode()
    memory.refresh_from_db()
    assert memory.content == "The user prefers green tea in the morning."
    assert not MemoryRevision.objects.filter(memory=memory).exists()
