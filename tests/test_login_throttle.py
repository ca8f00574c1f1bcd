"""Login throttling (django-axes): a username + IP pair is paused after LOGIN_FAILURE_LIMIT failures in a row."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


@pytest.fixture
def rita(db: Any) -> User:
    return User.objects.create_user("rita", password="right-password", is_staff=True)


def attempt(client: Client, username: str, password: str, ip: str = "10.0.0.1") -> Any:
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_thirty_wrong_passwords_in_a_row_lock_the_username_from_that_address_with_a_clear_page(
    client: Client, rita: User, settings: Any
) -> None:
    limit = settings.AXES_FAILURE_LIMIT
    statuses = [attempt(client, "rita", f"wrong-{i}").status_code for i in range(30)]
    assert statuses[: limit - 1] == [200] * (limit - 1)  # the form again, "didn't match"
    assert set(statuses[limit:]) == {429}
    locked = attempt(client, "rita", "right-password")  # even the right password waits now
    assert locked.status_code == 429
    body = locked.content.decode()
    assert "Too many failed logins" in body and "rita" in body and "15 minutes" in body
    assert locked["Retry-After"] == "900"
    assert "_auth_user_id" not in client.session


def test_the_lockout_is_per_username_and_address_so_others_can_still_log_in(client: Client, rita: User) -> None:
    User.objects.create_user("sam", password="sams-password", is_staff=True)
    for i in range(12):
        attempt(client, "rita", f"wrong-{i}")
    assert attempt(client, "rita", "right-password").status_code == 429
    # the same user from another address, and another user from the same address, are not affected
    assert attempt(Client(), "rita", "right-password", ip="10.0.0.2").status_code == 302
    assert attempt(Client(), "sam", "sams-password").status_code == 302


def test_a_successful_login_resets_the_count(client: Client, rita: User, settings: Any) -> None:
    for i in range(settings.AXES_FAILURE_LIMIT - 1):
        attempt(client, "rita", f"wrong-{i}")
    assert attempt(client, "rita", "right-password").status_code == 302
    client.post(reverse("logout"))
    for i in range(settings.AXES_FAILURE_LIMIT - 1):
        assert attempt(client, "rita", f"again-{i}").status_code == 200
    assert attempt(client, "rita", "right-password").status_code == 302


def test_the_pause_ends_after_the_cool_off(client: Client, rita: User, settings: Any) -> None:
    from axes.models import AccessAttempt

    for i in range(settings.AXES_FAILURE_LIMIT):
        attempt(client, "rita", f"wrong-{i}")
    assert attempt(client, "rita", "right-password").status_code == 429
    # as if LOGIN_LOCKOUT_MINUTES had passed since the last failure
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - settings.AXES_COOLOFF_TIME)
    assert attempt(client, "rita", "right-password").status_code == 302
