"""Who may do what, for every app: one predicate and one view decorator per role (and the typed
request of an htmx-aware view).

* A **researcher** is an active staff user: study design, transcripts, arm names, reports, queues. Per study, a
  researcher is its **owner** (its creator), an **editor** (``Study.shared_with``) or a **viewer**
  (``Study.viewers``): viewers see the study, its reports and queues and change nothing (:func:`study_for`); only
  the owner invites (studies/team.py), sees raw worker IDs and deletes workers (docs/privacy.md).
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
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import get_object_or_404
from django_htmx.middleware import HtmxDetails

from studies.models import Study

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


def viewed_only_by(user: Any) -> QuerySet[Study]:
    """The studies ``user`` is a viewer of and no more (not their owner, an editor or a superuser): they see them
    and label nothing of them (none of their annotation queues or annotators' comparisons: a viewer sees the arms)."""
    if not getattr(user, "is_active", False) or getattr(user, "is_superuser", False) or user.pk is None:
        return Study.objects.none()
    viewing = Study.viewers.through.objects.filter(user=user).values("study_id")
    shared = Study.shared_with.through.objects.filter(user=user).values("study_id")
    return Study.objects.filter(pk__in=viewing).exclude(created_by=user).exclude(pk__in=shared)


SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def study_for(request: HttpRequest, slug: str, *, change: bool | None = None) -> Study:
    """The study ``slug`` if the user may see it (404 otherwise). A change (``change=True``, or by default any
    request that is not GET/HEAD/OPTIONS) needs the owner's or an editor's role: a viewer gets 403."""
    study = get_object_or_404(Study.objects.visible_to(request.user), slug=slug)
    if (request.method not in SAFE_METHODS if change is None else change) and not study.can_change(request.user):
        raise PermissionDenied("You are a viewer of this study: only its owner and editors change it.")
    return study
