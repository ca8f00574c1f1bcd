"""Who may do what, for every app: one predicate and one view decorator per role (and the typed
request of an htmx-aware view).

* A **researcher** is an active staff user: study design, transcripts, arm names, reports, queues.
* An **annotator** is an active user in the ``annotators`` group, or a researcher (who may try the
  annotation screens).
* A **worker** has no login at all: only a participant bound to their Django session
  (``studies.participants``), so no page behind these decorators can be reached by them.

Anonymous visitors are sent to the login page; a logged-in user without the role gets 403, not a
login loop.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from django.contrib.auth.models import User
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase
from django_htmx.middleware import HtmxDetails

ANNOTATOR_GROUP = "annotators"

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (``request.htmx``)."""

    htmx: HtmxDetails


class AuthenticatedHttpRequest(HtmxHttpRequest):
    """The request of a view behind :func:`researcher_required` or :func:`annotator_required`: the user
    is logged in (so a :class:`User`, never ``AnonymousUser``)."""

    user: User


def is_researcher(user: object) -> bool:
    return isinstance(user, User) and user.is_active and user.is_staff


def is_annotator(user: object) -> bool:
    if not isinstance(user, User) or not user.is_active:
        return False
    return user.is_staff or user.groups.filter(name=ANNOTATOR_GROUP).exists()


def _role_required(has_role: Callable[[object], bool], denied: str) -> Callable[[View], View]:
    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user):
                raise PermissionDenied(denied)
            return view(request, *args, **kwargs)

        return cast(View, wrapper)

    return decorator


researcher_required = _role_required(is_researcher, "Researchers only.")
researcher_required.__doc__ = "The view is for researchers (active staff users)."
annotator_required = _role_required(is_annotator, "Annotators only.")
annotator_required.__doc__ = "The view is for annotators (active users in the annotators group) and researchers."
