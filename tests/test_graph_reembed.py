"""reembed_entities: graph entities embedded again after a model change or the simplified
reading of Chinese, seen by graph search in every worker, one team at a time."""

from __future__ import annotations

from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from graph.models import Entity
from graph.search import rank_entities
from graph.services import embedding_text, entity_create_or_merge
from memories.retrieval.embeddings import embed_passages, from_bytes, get_embedder, to_bytes

# Written for these tests: one organisation's name in traditional characters, with a description.
TRADITIONAL = ("臺北市資料處理中心", "負責備份與災難復原")
SIMPLIFIED_QUERY = "台北市资料处理中心"


def create(team, name, description="", agent_id=""):
    return entity_create_or_merge(
        team=team,
        name=name,
        entity_type="organization",
        description=description,
        agent_id=agent_id,
    )[0]


def score_of(team, entity, q):
    return dict(rank_entities(team=team, q=q, acting_agent=None)).get(entity.pk, 0.0)


def run(*args):
    out = StringIO()
    call_command("reembed_entities", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_entities_of_another_model_are_embedded_again_in_that_team_only(team, other_team):
    mine = create(team, "Backtest cluster", "runs the nightly strategy backtests")
    current = create(team, "Risk desk", "sets leverage limits")
    theirs = create(other_team, "Backtest cluster", "runs the nightly strategy backtests")
    Entity.objects.filter(pk__in=[mine.pk, theirs.pk]).update(
        embedding_model="an-older-model", embedding=to_bytes(np.ones(get_embedder().dim))
    )
    # Graph search ignores another model's vector: only the name can match.
    assert score_of(team, mine, "nightly backtesting of trading strategies") == 0.0
    current_before = bytes(Entity.objects.get(pk=current.pk).embedding)

    out = run("--team", team.id)
    assert f"1 entities to embed ({get_embedder().model_name})" in out
    assert "re-embedded 1 entities" in out
    mine.refresh_from_db()
    assert mine.embedding_model == get_embedder().model_name
    np.testing.assert_allclose(
        from_bytes(mine.embedding),
        embed_passages([embedding_text(mine.name, mine.description)])[0],
        rtol=1e-6,
    )
    # The team's vector cache reloaded: the description is found by meaning again.
    assert score_of(team, mine, "nightly backtesting of trading strategies") > 0.3
    # Neither the other team's entity nor an up-to-date one was touched.
    assert Entity.objects.get(pk=theirs.pk).embedding_model == "an-older-model"
    assert bytes(Entity.objects.get(pk=current.pk).embedding) == current_before
    # --all takes every entity of the team again.
    assert "re-embedded 2 entities" in run("--team", team.id, "--all")


def assert_read_in_simplified(entity):
    """The entity's stored vector is that of its text in simplified characters."""
    entity.refresh_from_db()
    np.testing.assert_allclose(
        from_bytes(entity.embedding),
        embed_passages([embedding_text(SIMPLIFIED_QUERY, "负责备份与灾难复原")])[0],
        rtol=1e-5,
        atol=1e-6,
    )


def test_traditional_entities_are_read_in_simplified_characters(team):
    entity = create(team, *TRADITIONAL)
    english = create(team, "Taipei data centre", "backups and disaster recovery")
    # As the previous release stored it: the vector of the text as written.
    as_written = get_embedder()._cached_encode([embedding_text(*TRADITIONAL)], is_query=False)[0]
    Entity.objects.filter(pk=entity.pk).update(embedding=to_bytes(as_written))
    english_before = bytes(Entity.objects.get(pk=english.pk).embedding)
    before = score_of(team, entity, SIMPLIFIED_QUERY)

    out = run("--team", team.id, "--traditional")
    assert "1 entities with Chinese in traditional characters" in out
    assert "re-embedded 1 entities" in out
    assert_read_in_simplified(entity)
    assert score_of(team, entity, SIMPLIFIED_QUERY) > before
    assert bytes(Entity.objects.get(pk=english.pk).embedding) == english_before
    # A second run has nothing left to change but finds the same entity by its text: the
    # command is idempotent (the vector is the same).
    assert "re-embedded 1 entities" in run("--team", team.id, "--traditional")
    assert_read_in_simplified(entity)


def test_an_entity_changed_while_it_was_embedded_keeps_its_own_vector(team, monkeypatch):
    from graph import services

    entity = create(team, "Backtest cluster", "runs the nightly strategy backtests")
    Entity.objects.filter(pk=entity.pk).update(embedding_model="an-older-model")
    real = services.embed_passages

    def rename_meanwhile(texts):
        # Another worker merges a description into it between the read and the write.
        Entity.objects.filter(pk=entity.pk).update(
            description="runs the weekly backtests", embedding_model="merged"
        )
        return real(texts)

    monkeypatch.setattr(services, "embed_passages", rename_meanwhile)
    assert services.entities_reembed(entity_ids=[entity.pk]) == 0
    assert Entity.objects.get(pk=entity.pk).embedding_model == "merged"


@pytest.mark.parametrize(
    "args", [["--batch-size", "0"], ["--all", "--traditional"], ["--team", "nope"]]
)
def test_bad_options_are_refused(team, args):
    with pytest.raises(CommandError):
        run(*args)
