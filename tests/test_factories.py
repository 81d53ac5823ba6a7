"""The factories give rows as the services write them: one of each model, valid and findable."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.apps import apps
from django.utils import timezone

from lifecycle.models import JobRun
from memories.models import Memory, TrashedMemory
from memories.retrieval.embeddings import embed_passages, from_bytes, get_embedder
from tenants.models import Agent
from tenants.services import api_key_secrets

from . import factories
from .helpers import ok_data

pytestmark = pytest.mark.django_db

APPS = ("tenants", "memories", "lifecycle", "graph")


FACTORIES = [
    f
    for f in vars(factories).values()
    if isinstance(f, type)
    and issubclass(f, factories.factory.django.DjangoModelFactory)
    and f._meta.model is not None
]


def test_every_model_of_our_apps_has_a_factory():
    models = {m for app in APPS for m in apps.get_app_config(app).get_models()}
    assert models - {f._meta.model for f in FACTORIES} == set()


@pytest.mark.parametrize("model_factory", FACTORIES, ids=lambda f: f.__name__)
def test_every_factory_creates_a_row(model_factory):
    obj = model_factory()
    assert type(obj).objects.filter(pk=obj.pk).exists()


def test_a_memory_is_written_by_the_service(team, api):
    m = factories.MemoryFactory(team=team, agent_id="alice", content="Alice drinks oolong tea")
    expected = embed_passages(["Alice drinks oolong tea"])[0]
    assert m.embedding_model == get_embedder().model_name
    assert np.allclose(from_bytes(m.embedding), expected, atol=1e-6)
    assert m.content_hash and m.search_tokens
    assert Agent.objects.filter(team=team, agent_id="alice").exists()
    found = ok_data(
        api.post("/memories/personal/search", {"agent_id": "alice", "query": "oolong tea"})
    )
    assert [hit["id"] for hit in found] == [m.pk]


def test_fields_the_service_does_not_take_are_set_afterwards(team):
    old = timezone.now() - timedelta(days=40)
    m = factories.MemoryFactory(team=team, created_at=old, access_count=3)
    assert (m.created_at, m.access_count) == (old, 3)
    assert Memory.objects.get(pk=m.pk).created_at == old


def test_a_plain_row_can_be_back_dated(team):
    old = timezone.now() - timedelta(days=3)
    job = factories.JobRunFactory(team=team, created_at=old)
    assert JobRun.objects.get(pk=job.pk).created_at == old == job.created_at


def test_keys_trash_and_graph(team):
    key = factories.ApiKeyFactory(team=team)
    assert api_key_secrets(api_key=key) == [key.secret]
    trashed = factories.TrashedMemoryFactory(team=team, content="gone for now")
    assert not Memory.objects.filter(pk=trashed.memory_id).exists()
    assert TrashedMemory.objects.get(pk=trashed.pk).embedding
    relation = factories.RelationFactory(source__team=team)
    assert relation.team_id == relation.target.team_id == team.id
    assert relation.source.embedding and relation.source.normalized_name
