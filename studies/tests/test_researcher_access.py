"""Only researchers (staff) reach the researcher pages; everyone else is redirected or refused."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat.models import ArmJob, Episode
from studies.models import Study

pytestmark = pytest.mark.django_db


def researcher_urls(study: Study, episode: Episode) -> list[tuple[str, str]]:
    slug = study.slug
    return [
        ("get", reverse("studies:list")),
        ("get", reverse("studies:create")),
        ("get", reverse("studies:detail", args=[slug])),
        ("get", reverse("studies:edit", args=[slug])),
        ("post", reverse("studies:status", args=[slug])),
        ("post", reverse("studies:default_metrics", args=[slug])),
        ("post", reverse("studies:invite", args=[slug])),
        ("get", reverse("studies:episode", args=[slug, episode.pk])),
        ("post", reverse("studies:check_arms", args=[slug])),
        ("get", reverse("studies:readiness", args=[slug])),
        ("get", reverse("reports:study_data_export", args=[slug, "transcripts", "csv"])),
    ]


def test_anonymous_visitors_are_sent_to_the_login_page(client: Client, study: Study, finished_episode: Episode) -> None:
    for method, url in researcher_urls(study, finished_episode):
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url


@pytest.mark.parametrize("who", ["annotator", "outsider"])
def test_logged_in_non_researchers_get_403(
    client: Client, study: Study, finished_episode: Episode, who: str, request: Any
) -> None:
    client.force_login(request.getfixturevalue(who))
    for method, url in researcher_urls(study, finished_episode):
        assert getattr(client, method)(url).status_code == 403, url
    assert Study.objects.get(pk=study.pk).status == Study.Status.OPEN  # the status POST changed nothing
    assert not ArmJob.objects.exists()  # nor did the check POST start a job


def test_a_researcher_reaches_every_page(
    client: Client, researcher: Any, study: Study, finished_episode: Episode
) -> None:
    client.force_login(researcher)
    for method, url in researcher_urls(study, finished_episode):
        if method == "get":
            assert client.get(url).status_code == 200, url


def test_a_staff_user_who_is_not_superuser_is_a_researcher(
    client: Client, study: Study, django_user_model: Any
) -> None:
    staff = django_user_model.objects.create_user("sam", password="pw", is_staff=True)
    study.shared_with.add(staff)  # a researcher who is not a superuser sees their own and shared studies only
    client.force_login(staff)
    assert client.get(reverse("studies:detail", args=[study.slug])).status_code == 200


def test_the_worker_facing_home_page_never_shows_arm_names(client: Client, study: Study) -> None:
    body = client.get("/").content.decode()
    for arm in study.arms.all():
        assert arm.name not in body
        assert arm.memory_system not in body


def test_a_crowdworker_bound_by_a_prolific_link_is_no_researcher_and_never_sees_arm_names(
    client: Client, study: Study, finished_episode: Episode
) -> None:
    # the arms get names a worker must never read anywhere
    for arm in study.arms.all():
        arm.name = f"SECRET-ARM-{arm.pk}"
        arm.save()
    pages = [client.get(f"/s/{study.slug}/?PROLIFIC_PID=w-123&STUDY_ID=s&SESSION_ID=x", follow=True)]
    pages.append(client.post(reverse("studies:consent", args=[study.slug]), {"agree": "yes"}, follow=True))
    assert pages[-1].status_code == 200
    assert pages[-1].redirect_chain[-1][0].startswith("/chat/")  # the worker is in their first chat session
    for method, url in researcher_urls(study, finished_episode):
        response = getattr(client, method)(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url
    for page in pages:
        body = page.content.decode()
        assert "SECRET-ARM-" not in body
        for arm in study.arms.all():
            assert f'"{arm.memory_system}"' not in body and f">{arm.memory_system}<" not in body
