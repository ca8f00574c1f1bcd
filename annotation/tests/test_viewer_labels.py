"""A study's viewers see its annotation queues and label none of their items (studies/team.py: a viewer changes
nothing): not offered in the workspace, 403 on a claim, and a submit, skip or draft of an assignment they hold from
before they became a viewer stores nothing. Their labels would otherwise join a judge-admission sample (judges/),
unblinded. The study's owner, its editors and the annotators group work its queues as before; the annotators'
pairwise comparisons follow the same rule."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from annotation import services
from annotation.models import Assignment, Draft, Item, Label, Queue
from annotation.sources import add_items
from annotation.tests.conftest import pair_spec
from pairwise.models import Comparison, Judge
from studies.models import Study

pytestmark = pytest.mark.django_db


@pytest.fixture
def owners_study(owner: User) -> Study:
    return Study.objects.create(name="Olga's study", created_by=owner)


@pytest.fixture
def queue(owner: User, owners_study: Study) -> Queue:
    q = Queue.objects.create(name="Olga study queue", kind="pairs", study=owners_study, created_by=owner)
    add_items(q, [pair_spec("Has a dog.", "Has a cat."), pair_spec("Likes tea.", "Likes coffee.")])
    return q


@pytest.fixture
def viewer(other: User, owners_study: Study) -> User:
    owners_study.viewers.add(other)
    return other


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def in_annotators_group(user: User) -> User:
    group, _ = Group.objects.get_or_create(name="annotators")
    user.groups.add(group)
    return user


@pytest.mark.parametrize("also_annotator", [False, True], ids=["researcher", "in-annotators-group"])
def test_a_viewer_is_not_offered_the_studys_queue_and_cannot_claim_an_item(
    viewer: User, queue: Queue, also_annotator: bool
) -> None:
    if also_annotator:
        in_annotators_group(viewer)
    client = logged_in(viewer)
    assert client.get(reverse("annotation:queue_detail", args=[queue.pk])).status_code == 200  # still sees it
    home = client.get(reverse("annotation:home")).content.decode()
    assert queue.name not in home and reverse("annotation:work", args=[queue.pk]) not in home
    response = client.get(reverse("annotation:work", args=[queue.pk]))
    assert response.status_code == 403 and "Has a dog." not in response.content.decode()
    assert not Assignment.objects.filter(annotator=viewer).exists()
    assert not Queue.objects.workable_by(viewer).filter(pk=queue.pk).exists()


def test_an_assignment_held_from_before_the_viewer_role_can_be_neither_submitted_skipped_nor_drafted(
    viewer: User, owners_study: Study, queue: Queue
) -> None:
    # an editor claims an item, then the owner makes them a viewer (studies.team.accept does this swap)
    owners_study.viewers.remove(viewer)
    owners_study.shared_with.add(viewer)
    assignment = services.claim_next_item(queue, viewer)
    assert assignment is not None
    owners_study.shared_with.remove(viewer)
    owners_study.viewers.add(viewer)
    client = logged_in(viewer)
    posts = [
        (reverse("annotation:submit", args=[assignment.pk]), {"op": "PASS"}),
        (reverse("annotation:skip", args=[assignment.pk]), {}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == 403, url
    draft = client.post(
        reverse("annotation:draft", args=[assignment.pk]), json.dumps({"op": "PASS"}), content_type="application/json"
    )
    assert draft.status_code == 403
    assert not Label.objects.exists() and not Draft.objects.exists()
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.OPEN  # the skip did not go through either
    assert not Item.objects.exclude(status=Item.Status.OPEN).exists()


def test_the_owner_an_editor_and_the_annotators_group_still_label_the_studys_queue(
    owner: User, other: User, owners_study: Study, queue: Queue, annotator: User
) -> None:
    owners_study.shared_with.add(other)
    for user in (owner, other, annotator):
        client = logged_in(user)
        assert queue.name in client.get(reverse("annotation:home")).content.decode(), user
        page = client.get(reverse("annotation:work", args=[queue.pk]))
        assert page.status_code == 200 and "Has a" in page.content.decode(), user
        assignment = Assignment.objects.get(annotator=user, status=Assignment.Status.OPEN)
        assert client.post(reverse("annotation:submit", args=[assignment.pk]), {"op": "PASS"}).status_code == 302
    assert Label.objects.count() == 3


def test_a_viewer_cannot_judge_the_studys_annotators_comparison(viewer: User, owners_study: Study, owner: User) -> None:
    comparison = Comparison.objects.create(
        study=owners_study, name="Olga's pairs", audience=Comparison.Audience.ANNOTATORS, status="open"
    )
    for user in (viewer, in_annotators_group(viewer)):
        client = logged_in(user)
        assert comparison.name not in client.get(reverse("annotation:home")).content.decode()
        assert client.get(reverse("pairwise:annotate", args=[comparison.slug])).status_code == 403
        assert client.get(reverse("pairwise:next", args=[comparison.slug])).status_code == 404
    assert not Judge.objects.exists()
    assert Comparison.objects.workable_by(owner).filter(pk=comparison.pk).exists()
