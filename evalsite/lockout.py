"""The login throttle's site parts: the page of a locked-out login, and known devices.

django-axes pauses a username at one client address after ``LOGIN_FAILURE_LIMIT`` failures in a row
(``AXES_LOCKOUT_PARAMETERS``; the address is the one evalsite.clientaddr settled). That alone lets anyone
who shares the researcher's address (an office NAT, or every client behind a proxy that is not named in
``TRUSTED_PROXIES``) pause the researcher's login by typing wrong passwords. So a browser that has logged in
as a user before carries a signed device cookie (OWASP's "device cookies"), and its attempts for that user
are counted for that device alone (:func:`known_device`, axes' whitelist hook): nobody else's failures pause
it, and its own are still limited to ``LOGIN_FAILURE_LIMIT`` per pause.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.signals import user_login_failed
from django.core import signing
from django.core.cache import cache
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

DEVICE_COOKIE = "memeval_device"
DEVICE_SALT = "memeval.login.device"
DEVICE_MAX_AGE = 365 * 24 * 3600


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """429 with what happened and how long to wait; the login form is not shown, so nothing is retried."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    context = {
        "username": str(username)[:150],
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "minutes": math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60),
    }
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response


def _username(request: HttpRequest | None, credentials: dict[str, Any] | None) -> str:
    value = (credentials or {}).get("username")
    if value is None and request is not None:
        value = request.POST.get("username", "")
    return str(value or "")


def device_of(request: HttpRequest | None, username: str) -> str | None:
    """The id of this browser's device cookie when it was issued for ``username`` (None otherwise)."""
    raw = getattr(request, "COOKIES", {}).get(DEVICE_COOKIE) if request is not None else None
    if not raw or not username:
        return None
    try:
        data = signing.loads(raw, salt=DEVICE_SALT, max_age=DEVICE_MAX_AGE)
    except (signing.BadSignature, ValueError):
        return None
    if not isinstance(data, dict) or data.get("u") != username or not isinstance(data.get("d"), str):
        return None
    return str(data["d"])


def _failures_key(device: str) -> str:
    return f"login-device-failures:{device}"


def known_device(request: HttpRequest, credentials: dict[str, Any] | None = None) -> bool:
    """axes' whitelist hook: a browser that logged in as this user before is judged on its own failures."""
    device = device_of(request, _username(request, credentials))
    if device is None:
        return False
    return int(cache.get(_failures_key(device)) or 0) < int(settings.AXES_FAILURE_LIMIT)


@receiver(user_login_failed)
def _count_device_failure(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any
) -> None:
    device = device_of(request, _username(request, credentials))
    if device is None:
        return
    key = _failures_key(device)
    timeout = int(settings.AXES_COOLOFF_TIME.total_seconds())
    if not cache.add(key, 1, timeout):
        try:
            cache.incr(key)
        except ValueError:
            cache.set(key, 1, timeout)


class LoginView(auth_views.LoginView):
    """Django's login, which also gives the browser its device cookie for this user."""

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        username = form.get_user().get_username()
        device = device_of(self.request, username) or secrets.token_urlsafe(16)
        cache.delete(_failures_key(device))
        response.set_cookie(
            DEVICE_COOKIE,
            signing.dumps({"u": username, "d": device}, salt=DEVICE_SALT),
            max_age=DEVICE_MAX_AGE,
            httponly=True,
            samesite="Lax",
            secure=not settings.DEBUG,
        )
        return response
