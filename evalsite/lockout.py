"""The page a locked-out login gets (django-axes calls it: ``AXES_LOCKOUT_CALLABLE``)."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


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
