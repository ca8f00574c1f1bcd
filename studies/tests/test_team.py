"""A study's research team (studies/team.py): the owner invites by link with a role, the invited person sets their
password from the link, editors change the study, viewers see it and change nothing, and the annotation queues of
the study follow the same rules."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.models import Item, Queue
from chat.models import ArmJob, Episode
from reports.models import ImportedDataset
from studies.invitations import INVITATION_MAX_AGE, StudyInvitation
from studies.models import Study
from studies.tests.conftest import study_urls

pytestmark = pytest.mark.django_db


@pytest.fixture
def owned(study: Study, owner: User) -> Study:
    study.created_by = owner
    study.save(update_fields=["created_by"])
    return study


def make_link(client: Client, study: Study, role: str = "editor", note: str = "Kim") -> str:
    """The owner's invitation, as the study page shows it (once)."""
    response = client.post(reverse("studies:team_invite", args=[study.slug]), {"role": role, "note": note})
    assert response.status_code == 302
    page = client.get(reverse("studies:detail", args=[study.slug])).content.decode()
    match = re.search(r'value="(http[^"]+/team/join/[^"]+/)"', page)
    assert match, "the link is shown on the study page"
    assert match.group(1) not in client.get(reverse("studies:detail", args=[study.slug])).content.decode()  # once
    return match.group(1)


def test_an_invited_co_researcher_sets_a_password_and_sees_the_study_and_no_other(
    client: Client, owned: Study, owner: User, other: User, settings: Any
) -> None:
    settings.AUTH_PASSWORD_VALIDATORS = [  # production's (DEBUG has none)
        {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
        {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    ]
    theirs = Study.objects.create(name="Oscars own study", created_by=other)
    client.force_login(owner)
    link = make_link(client, owned, "editor")
    invitation = StudyInvitation.objects.get()
    assert link.split("/team/join/")[1].rstrip("/") not in str(invitation.__dict__)  # only the hash is stored

    guest = Client()
    page = guest.get(link).content.decode()
    assert "Join the research team of “Test study”" in page and "Editor" in page
    weak = guest.post(link, {"username": "kim", "password1": "kim", "password2": "kim"})
    assert weak.status_code == 400 and not User.objects.filter(username="kim").exists()  # the site's validators
    response = guest.post(
        link, {"username": "kim", "password1": "a-long-Passphrase-42", "password2": "a-long-Passphrase-42"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("studies:detail", args=[owned.slug])
    kim = User.objects.get(username="kim")
    assert kim.is_staff and not kim.is_superuser and owned.role_of(kim) == "editor"
    studies = guest.get(reverse("studies:list")).content.decode()
    assert owned.name in studies and theirs.name not in studies
    assert guest.get(reverse("studies:detail", args=[theirs.slug])).status_code == 404
    # the link worked once
    assert guest.get(link).status_code == 410 and Client().get(link).status_code == 410
    signin = Client().post(reverse("login"), {"username": "kim", "password": "a-long-Passphrase-42"})
    assert signin.status_code == 302  # the password they set works


def test_forged_expired_and_withdrawn_links_are_refused(client: Client, owned: Study, owner: User) -> None:
    client.force_login(owner)
    link = make_link(client, owned)
    forged = link[:-3] + ("A" if link[-3] != "A" else "B") + link[-2:]
    assert Client().get(forged).status_code == 404
    assert "No invitation has this link" in Client().get(forged).content.decode()
    StudyInvitation.objects.update(created_at=timezone.now() - INVITATION_MAX_AGE - timezone.timedelta(minutes=1))
    assert Client().get(link).status_code == 410
    link2 = make_link(client, owned, "viewer")
    second = StudyInvitation.objects.get(role="viewer")
    assert client.post(reverse("studies:team_revoke", args=[owned.slug, second.pk])).status_code == 302
    post = Client().post(
        link2, {"username": "x", "password1": "a-long-Passphrase-42", "password2": "a-long-Passphrase-42"}
    )
    assert post.status_code == 410 and not User.objects.filter(username="x").exists()


def test_only_the_owner_invites(client: Client, owned: Study, other: User) -> None:
    owned.shared_with.add(other)  # an editor
    client.force_login(other)
    assert client.post(reverse("studies:team_invite", args=[owned.slug]), {"role": "editor"}).status_code == 403
    assert "Make an invitation link" not in client.get(reverse("studies:detail", args=[owned.slug])).content.decode()
    assert not StudyInvitation.objects.exists()


def test_a_signed_in_researcher_joins_with_one_button_as_a_viewer(
    client: Client, owned: Study, owner: User, other: User
) -> None:
    owned.shared_with.add(other)
    client.force_login(owner)
    link = make_link(client, owned, "viewer")
    guest = Client()
    guest.force_login(other)
    assert "Join as oscar" in guest.get(link).content.decode()
    assert guest.post(link).status_code == 302
    assert owned.role_of(other) == "viewer"  # the invited role replaces the one they had


def test_a_viewer_sees_every_page_and_changes_nothing(
    client: Client, owned: Study, finished_episode: Episode, other: User
) -> None:
    owned.viewers.add(other)
    client.force_login(other)
    before = (owned.status, owned.name, owned.metrics.count(), owned.shared_with.count())
    for method, url in study_urls(owned, finished_episode):
        status = getattr(client, method)(url).status_code
        if method == "post" or url.endswith("/edit/"):
            assert status == 403, (method, url, status)
        elif "plan/some-key" not in url and "/plots/" not in url:
            assert status in (200, 409), (method, url, status)
    owned.refresh_from_db()
    assert (owned.status, owned.name, owned.metrics.count(), owned.shared_with.count()) == before
    assert ImportedDataset.objects.filter(study=owned).exists() and not ArmJob.objects.exists()
    page = client.get(reverse("studies:detail", args=[owned.slug])).content.decode()
    assert 'id="my-role">viewer' in page


def test_a_viewer_sees_the_studys_queues_and_changes_none(client: Client, owned: Study, other: User) -> None:
    queue = Queue.objects.create(name="ops", kind=Queue.Kind.PAIRS, study=owned)
    item = Item.objects.create(queue=queue, payload={"m": "a", "s": "b"}, required=3)
    owned.viewers.add(other)
    client.force_login(other)
    assert client.get(reverse("annotation:queue_detail", args=[queue.pk])).status_code == 200
    assert client.post(reverse("annotation:queue_toggle", args=[queue.pk])).status_code == 403
    assert client.post(reverse("annotation:queue_pull", args=[queue.pk])).status_code == 403
    assert client.post(reverse("annotation:adjudicate", args=[item.pk]), {"label": "PASS"}).status_code == 403
    queue.refresh_from_db()
    assert queue.active
    owned.viewers.remove(other)
    owned.shared_with.add(other)  # as an editor: may change it
    assert client.post(reverse("annotation:queue_toggle", args=[queue.pk])).status_code == 302
    queue.refresh_from_db()
    assert not queue.active
