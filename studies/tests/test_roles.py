"""studies.roles: the one place that says who is a researcher and who is an annotator, for every app."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from django.urls import reverse

from studies.models import Study
from studies.roles import annotator_required, is_annotator, is_researcher, researcher_required

pytestmark = pytest.mark.django_db


@researcher_required
def researcher_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse("for researchers")


@annotator_required
def annotator_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse("for annotators")


def call(view: Any, user: Any) -> HttpResponse | None:
    """The view's response, or None when it refused (403)."""
    request = RequestFactory().get("/some/page/?x=1")
    request.user = user
    try:
        return view(request)
    except PermissionDenied:
        return None


def test_each_role_is_one_predicate(researcher: User, annotator: User, outsider: User) -> None:
    assert is_researcher(researcher) and is_annotator(researcher)  # researchers may use the annotation screens
    assert is_annotator(annotator) and not is_researcher(annotator)
    assert not is_researcher(outsider) and not is_annotator(outsider)
    assert not is_researcher(AnonymousUser()) and not is_annotator(AnonymousUser())


def test_a_deactivated_user_loses_every_role(researcher: User, annotator: User) -> None:
    for user in (researcher, annotator):
        user.is_active = False
    assert not is_researcher(researcher) and not is_annotator(researcher)
    assert not is_annotator(annotator)
    assert call(researcher_page, researcher) is None
    assert call(annotator_page, annotator) is None


def test_the_decorators_send_anonymous_visitors_to_log_in_and_refuse_the_wrong_role(
    researcher: User, annotator: User, outsider: User
) -> None:
    for view in (researcher_page, annotator_page):
        response = call(view, AnonymousUser())
        assert response is not None and response.status_code == 302
        assert response["Location"] == reverse("login") + "?next=/some/page/%3Fx%3D1"
    assert call(researcher_page, annotator) is None
    assert call(annotator_page, outsider) is None
    allowed = call(researcher_page, researcher), call(annotator_page, annotator)
    assert [r.content if r else None for r in allowed] == [b"for researchers", b"for annotators"]
    assert researcher_page.__name__ == "researcher_page"


def test_every_apps_researcher_pages_use_the_same_rule(client: Client, annotator: User, study: Study) -> None:
    """A staff user who is not a superuser is a researcher everywhere; an annotator nowhere."""
    pages = [
        reverse("studies:list"),
        reverse("annotation:queues"),
        reverse("reports:study_analysis", args=[study.slug]),
    ]
    client.force_login(annotator)
    assert [client.get(url).status_code for url in pages] == [403, 403, 403]
    staff = User.objects.create_user("sam", password="pw", is_staff=True)
    study.shared_with.add(staff)  # object-level: a study's pages are for its creator and whom it is shared with
    client.force_login(staff)
    assert [client.get(url).status_code for url in pages] == [200, 200, 200]
