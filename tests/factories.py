from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from tenants.models import Agent, Team, TeamMembership


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("id",)

    id = factory.Sequence(lambda n: f"team_{n}")
    name = factory.LazyAttribute(lambda o: f"Team {o.id}")


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent

    team = factory.SubFactory(TeamFactory)
    agent_id = factory.Sequence(lambda n: f"agent_{n}")
    name = factory.LazyAttribute(lambda o: o.agent_id)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    is_staff = True
    password = factory.django.Password("pw-123456")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamMembership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = TeamMembership.ROLE_LEAD
