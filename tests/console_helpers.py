"""Helpers for console tests: users with a role in a team, logged in on Django's test client."""

from __future__ import annotations

from django.test import Client

from .factories import MembershipFactory, UserFactory


def member_client(team, username: str, role: str = "lead") -> Client:  # type: ignore[no-untyped-def]
    """A test client logged in as a staff user holding `role` in `team`."""
    user = UserFactory(username=username)
    MembershipFactory(user=user, team=team, role=role)
    client = Client()
    client.force_login(user)
    return client
