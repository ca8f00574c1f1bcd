"""A study belongs to its creator and to the researchers they share it with: another researcher gets 404
on every study URL (the study's existence is not confirmed), and sees none of it in lists or the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from annotation.models import Queue
from chat.models import ArmJob, Episode
from reports.models import ImportedDataset
from studies.models import Study
from studies.tests.conftest import study_urls

pytestmark = pytest.mark.django_db


@pytest.fixture
def owned(study: Study, owner: User) -> Study:
    study.created_by = owner
    study.save(update_fields=["created_by"])
    return study


def admin_urls(study: Study, episode: Episode) -> list[str]:
    session = episode.sessions.first()
    assert session is not None
    return [
        reverse("admin:studies_study_change", args=[study.pk]),
        reverse("admin:studies_arm_change", args=[study.arms.first().pk]),  # type: ignore[union-attr]
        reverse("admin:studies_participant_change", args=[episode.participant.pk]),
        reverse("admin:chat_episode_change", args=[episode.pk]),
        reverse("admin:chat_chatsession_change", args=[session.pk]),
        reverse("admin:chat_message_change", args=[session.messages.first().pk]),  # type: ignore[union-attr]
    ]


def test_another_researcher_gets_404_on_every_study_url_and_changes_nothing(
    client: Client, owned: Study, finished_episode: Episode, other: User
) -> None:
    client.force_login(other)
    before = (owned.status, owned.name, owned.metrics.count(), owned.shared_with.count())
    for method, url in study_urls(owned, finished_episode):
        assert getattr(client, method)(url).status_code == 404, (method, url)
    owned.refresh_from_db()
    assert (owned.status, owned.name, owned.metrics.count(), owned.shared_with.count()) == before
    assert ImportedDataset.objects.filter(study=owned).exists()  # the delete POST deleted nothing
    assert not ArmJob.objects.exists()  # no readiness check or evaluation was started


def test_the_creator_and_a_researcher_it_is_shared_with_reach_every_page(
    client: Client, owned: Study, finished_episode: Episode, owner: User, other: User
) -> None:
    owned.shared_with.add(other)
    for user in (owner, other):
        client.force_login(user)
        for method, url in study_urls(owned, finished_episode):
            # an unknown job key, or a plot without data (one episode), is 404 for anyone; plots find the
            # study as the analysis page does (reports.views._objects)
            if method == "get" and "plan/some-key" not in url and "/plots/" not in url:
                # 200, or 409 for the analysis of the empty imported dataset
                assert client.get(url).status_code in (200, 409), (user.username, url)


def test_the_study_list_shows_only_own_and_shared_studies(
    client: Client, owned: Study, owner: User, other: User
) -> None:
    theirs = Study.objects.create(name="Oscars own study", created_by=other)
    client.force_login(other)
    page = client.get(reverse("studies:list")).content.decode()
    assert theirs.name in page and owned.name not in page
    owned.shared_with.add(other)
    assert owned.name in client.get(reverse("studies:list")).content.decode()


def test_only_the_creator_can_change_who_a_study_is_shared_with(
    client: Client, owned: Study, owner: User, other: User
) -> None:
    third = User.objects.create_user("tess", password="pw", is_staff=True)
    client.force_login(owner)
    page = client.get(reverse("studies:detail", args=[owned.slug])).content.decode()
    assert "Save the team" in page and "oscar" in page and "tess" in page
    response = client.post(reverse("studies:share", args=[owned.slug]), {"shared_with": [other.pk]})
    assert response.status_code == 302
    assert list(owned.shared_with.all()) == [other]

    client.force_login(other)  # shared with: sees the study, but cannot re-share it
    assert "Save the team" not in client.get(reverse("studies:detail", args=[owned.slug])).content.decode()
    assert client.post(reverse("studies:share", args=[owned.slug]), {"shared_with": [third.pk]}).status_code == 403
    assert list(owned.shared_with.all()) == [other]


def test_a_study_cannot_be_shared_with_a_non_researcher(
    client: Client, owned: Study, owner: User, annotator: User
) -> None:
    client.force_login(owner)
    client.post(reverse("studies:share", args=[owned.slug]), {"shared_with": [annotator.pk]})
    assert not owned.shared_with.exists()


def test_the_admin_hides_another_researchers_study_and_its_transcripts(
    client: Client, owned: Study, finished_episode: Episode, other: User
) -> None:
    from django.contrib.auth.models import Permission

    other.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    client.force_login(other)
    assert owned.name not in client.get(reverse("admin:studies_study_changelist")).content.decode()
    for url in admin_urls(owned, finished_episode):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"] == reverse("admin:index"), url  # "not found"
    owned.shared_with.add(other)
    for url in admin_urls(owned, finished_episode):
        assert client.get(url).status_code == 200, url


def test_a_superuser_sees_every_study_and_a_study_without_creator_is_theirs_only(
    client: Client, researcher: User, other: User
) -> None:
    orphan = Study.objects.create(name="Made by a command")
    assert orphan in Study.objects.visible_to(researcher)
    assert orphan not in Study.objects.visible_to(other)


def test_an_annotation_queue_can_only_be_made_from_a_visible_study(client: Client, owned: Study, other: User) -> None:
    client.force_login(other)
    response = client.post(
        reverse("annotation:queue_create"),
        {"name": "steal", "kind": Queue.Kind.PAIRS, "study": owned.pk, "labels_per_item": 1, "gold_min_votes": 1,
         "summary_mode": Queue.Mode.CHAIN, "lease_minutes": 20, "max_edit_chars": 500},
    )  # fmt: skip
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Queue.objects.exists()
