"""Login throttling (django-axes) of the admin login and of the console, which logs in through it.

A (username, client address) pair is refused after LOGIN_FAILURE_LIMIT failed logins, even with
the right password, until LOGIN_COOLOFF_MINUTES have passed since its last failure or an
operator unlocks it. Other users, and the same user from another address, are not affected.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.db.models import F
from django.test import Client

from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pw-123456"  # tests.factories.UserFactory's
HOME = "1.2.3.4"


def _console_login_url() -> str:
    """Where the console sends an anonymous visitor: its login page."""
    response = Client().get("/review/")
    assert response.status_code == 302
    return response["Location"]


LOGINS = {
    "admin": lambda: "/admin/login/?next=/admin/",
    "console": _console_login_url,
}


@pytest.fixture(params=sorted(LOGINS))
def login_url(request) -> str:  # type: ignore[no-untyped-def]
    url = LOGINS[request.param]()
    assert url.startswith("/admin/login/")
    return url


@pytest.fixture
def users(db):  # type: ignore[no-untyped-def]
    team = TeamFactory(id="team_a")
    found = {}
    for name in ("lead_a", "lead_a2"):
        found[name] = UserFactory(username=name)
        MembershipFactory(user=found[name], team=team, role="lead")
    return found


def attempt(url: str, username: str, password: str, *, ip: str = HOME, client=None, **extra):  # type: ignore[no-untyped-def]
    client = client or Client()
    next_url = url.split("next=", 1)[1] if "next=" in url else "/admin/"
    response = client.post(
        url, {"username": username, "password": password, "next": next_url}, REMOTE_ADDR=ip, **extra
    )
    return response, client


def logged_in(response, client) -> bool:  # type: ignore[no-untyped-def]
    return response.status_code == 302 and "_auth_user_id" in client.session


def fail_until_locked(url: str, username: str, *, ip: str = HOME, **extra) -> None:  # type: ignore[no-untyped-def]
    limit = settings.LOGIN_FAILURE_LIMIT
    for n in range(1, limit + 1):
        response, _ = attempt(url, username, "wrong", ip=ip, **extra)
        # The form's error until the limit; the failure that reaches it gets the lockout page.
        assert response.status_code == (429 if n == limit else 200), n


def test_the_limit_and_cool_off_come_from_the_settings():
    assert (settings.LOGIN_FAILURE_LIMIT, settings.LOGIN_COOLOFF_MINUTES) == (5, 15)
    assert settings.AXES_FAILURE_LIMIT == settings.LOGIN_FAILURE_LIMIT
    assert timedelta(minutes=settings.LOGIN_COOLOFF_MINUTES) == settings.AXES_COOLOFF_TIME
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_after_n_failures_even_the_right_password_is_refused(users, login_url):
    fail_until_locked(login_url, "lead_a")
    response, client = attempt(login_url, "lead_a", PASSWORD)
    assert response.status_code == 429
    assert not logged_in(response, client)
    assert int(response["Retry-After"]) == settings.LOGIN_COOLOFF_MINUTES * 60
    page = response.content.decode()
    assert "Too many failed logins" in page and "lead_a" in page
    assert f"{settings.LOGIN_COOLOFF_MINUTES} minutes" in page
    assert "manage.py axes_reset_username lead_a" in page
    # Not logged in: the console still sends the client to the login page.
    assert client.get("/review/").status_code == 302


def test_another_user_and_the_same_user_elsewhere_are_not_locked(users, login_url):
    fail_until_locked(login_url, "lead_a")
    assert logged_in(*attempt(login_url, "lead_a2", PASSWORD))  # same address, other user
    # Same user, another address: an attacker cannot lock a lead out from everywhere.
    assert logged_in(*attempt(login_url, "lead_a", PASSWORD, ip="5.6.7.8"))
    assert not logged_in(*attempt(login_url, "lead_a", PASSWORD))  # still locked at HOME


def test_after_the_cool_off_the_right_password_works(users, login_url):
    fail_until_locked(login_url, "lead_a")
    cool_off = timedelta(minutes=settings.LOGIN_COOLOFF_MINUTES)
    # Advance time by moving the recorded failures into the past (axes compares them with now).
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - (cool_off - timedelta(minutes=1)))
    assert not logged_in(*attempt(login_url, "lead_a", PASSWORD))  # a minute early: still locked
    # That refused attempt counted as a failure and restarted the wait.
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - cool_off - timedelta(seconds=1))
    assert logged_in(*attempt(login_url, "lead_a", PASSWORD))


def test_an_operator_unlocks_with_axes_reset_username(users, login_url):
    fail_until_locked(login_url, "lead_a")
    call_command("axes_reset_username", "lead_a", verbosity=0)
    assert logged_in(*attempt(login_url, "lead_a", PASSWORD))


def test_a_successful_login_clears_the_count(users, login_url):
    limit = settings.LOGIN_FAILURE_LIMIT
    for _ in range(limit - 1):
        attempt(login_url, "lead_a", "wrong")
    assert logged_in(*attempt(login_url, "lead_a", PASSWORD))
    for _ in range(limit - 1):
        response, _ = attempt(login_url, "lead_a", "wrong")
        assert response.status_code == 200
    assert logged_in(*attempt(login_url, "lead_a", PASSWORD))


def test_behind_a_proxy_the_address_it_saw_counts_not_what_the_client_claims(users, settings):
    settings.LOGIN_TRUSTED_PROXY_COUNT = 1
    url, proxy = "/admin/login/?next=/admin/", "10.0.0.1"
    fail_until_locked(url, "lead_a", ip=proxy, HTTP_X_FORWARDED_FOR="1.1.1.1, 9.9.9.9")
    # The attacker (9.9.9.9 to the proxy) cannot escape by claiming another address...
    response, _ = attempt(
        url, "lead_a", PASSWORD, ip=proxy, HTTP_X_FORWARDED_FOR="2.2.2.2, 9.9.9.9"
    )
    assert response.status_code == 429
    # ...and the lead, another client of the same proxy, is not locked out.
    assert logged_in(*attempt(url, "lead_a", PASSWORD, ip=proxy, HTTP_X_FORWARDED_FOR="8.8.8.8"))
