"""Who is a researcher: a staff user. Workers have no login; annotators are plain users in a group."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


def is_researcher(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def researcher_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous visitors go to the login page; logged-in non-researchers get 403 (not a login loop)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not is_researcher(request.user):
            raise PermissionDenied("Researchers only.")
        return view(request, *args, **kwargs)

    return wrapper
