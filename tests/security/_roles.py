"""The four users every role matrix of the security tests runs as."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser

from tenants.models import Team

from ..factories import MembershipFactory, UserFactory


def member(username: str, *memberships: tuple[Team, str]) -> AbstractBaseUser:
    user = UserFactory(username=username)
    for team, role in memberships:
        MembershipFactory(user=user, team=team, role=role)
    return user


def role_matrix_users(team_a: Team, team_b: Team) -> dict[str, AbstractBaseUser]:
    """Users by role towards team B's objects: its lead, its viewer, the lead of team A only,
    and the lead of A who only views B (the one a per-request check lets through)."""
    return {
        "lead": member("lead_b", (team_b, "lead")),
        "viewer": member("viewer_b", (team_b, "viewer")),
        "lead_elsewhere": member("lead_a", (team_a, "lead")),
        "lead_a_viewer_b": member("lead_a_viewer_b", (team_a, "lead"), (team_b, "viewer")),
    }
