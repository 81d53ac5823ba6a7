"""Console scoping: login required, other teams 404, viewers read only."""

from __future__ import annotations

import pytest
from django.test import Client

from .console_helpers import member_client

pytestmark = pytest.mark.django_db

AREAS = ["", "dashboard/", "memories/", "purge/", "lifecycle/", "graph/", "keys/", "transfer/"]


def test_anonymous_is_sent_to_login(team):
    response = Client().get(f"/review/{team.id}/memories/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("area", AREAS)
def test_other_team_answers_404_and_unknown_team_too(team, other_team, area):
    client = member_client(team, "lead_a")
    assert client.get(f"/review/{other_team.id}/{area}").status_code == 404
    assert client.get(f"/review/no_such_team/{area}").status_code == 404
    assert client.get(f"/review/{team.id}/{area}", follow=True).status_code == 200


def test_index_lists_only_own_teams(team, other_team):
    from .factories import MembershipFactory, TeamFactory, UserFactory

    third = TeamFactory(id="team_c", name="Team C")
    user = UserFactory(username="two_teams")
    MembershipFactory(user=user, team=team, role="viewer")
    MembershipFactory(user=user, team=third, role="lead")
    client = Client()
    client.force_login(user)
    body = client.get("/review/").content.decode()
    assert "Team A" in body and "Team C" in body
    assert "Team B" not in body
