"""Who may see and manage an annotation queue: a queue copies transcripts out of its study, so it is
no more visible than the study (``Study.objects.visible_to``); a queue without a study belongs to the
researcher who made it. Annotators still work every active queue."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from annotation.models import Assignment, Item, Queue
from annotation.sources import add_items
from annotation.tests.conftest import pair_spec
from studies.models import Study

pytestmark = pytest.mark.django_db


@pytest.fixture
def owners_study(owner: User) -> Study:
    return Study.objects.create(name="Olga's study", created_by=owner)


@pytest.fixture
def queues(owner: User, owners_study: Study) -> dict[str, Queue]:
    out = {
        "of_study": Queue.objects.create(name="Olga study queue", kind="pairs", study=owners_study, created_by=owner),
        "imported": Queue.objects.create(name="Olga imported queue", kind="pairs", created_by=owner),
        "by_command": Queue.objects.create(name="Command queue", kind="pairs"),
    }
    for q in out.values():
        add_items(q, [pair_spec("Has a dog.", "Has a cat.")])
    return out


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def researcher_pages(queue: Queue) -> list[tuple[str, str]]:
    item = Item.objects.filter(queue=queue).first()
    assert item is not None
    pages = [
        ("get", reverse("annotation:queue_detail", args=[queue.pk])),
        ("get", reverse("annotation:queue_report_json", args=[queue.pk])),
        ("get", reverse("annotation:adjudication", args=[queue.pk])),
        ("get", reverse("annotation:export_gold", args=[queue.pk])),
        ("post", reverse("annotation:queue_toggle", args=[queue.pk])),
        ("post", reverse("annotation:queue_pull", args=[queue.pk])),
        ("post", reverse("annotation:queue_import", args=[queue.pk])),
        ("post", reverse("annotation:adjudicate", args=[item.pk])),
    ]
    return pages


def test_a_researcher_sees_no_queue_of_another_researchers_study(other: User, queues: dict[str, Queue]) -> None:
    body = logged_in(other).get(reverse("annotation:queues")).content.decode()
    assert not any(q.name in body for q in queues.values())


def test_every_page_of_another_researchers_queue_is_not_found_and_changes_nothing(
    other: User, queues: dict[str, Queue]
) -> None:
    client = logged_in(other)
    for queue in queues.values():
        for method, url in researcher_pages(queue):
            response = getattr(client, method)(url, {"label": "PASS"} if "adjudicate" in url else {})
            assert response.status_code == 404, (method, url, response.status_code)
    assert Queue.objects.filter(active=False).count() == 0
    assert not Item.objects.exclude(status=Item.Status.OPEN).exists()


def test_the_owner_sees_her_study_queue_and_her_imported_queue_but_not_a_command_made_one(
    owner: User, queues: dict[str, Queue]
) -> None:
    client = logged_in(owner)
    body = client.get(reverse("annotation:queues")).content.decode()
    assert queues["of_study"].name in body and queues["imported"].name in body
    assert queues["by_command"].name not in body
    assert client.get(reverse("annotation:queue_detail", args=[queues["of_study"].pk])).status_code == 200
    assert client.get(reverse("annotation:queue_detail", args=[queues["imported"].pk])).status_code == 200


def test_sharing_the_study_shares_its_queues_but_not_the_owners_other_queues(
    other: User, owners_study: Study, queues: dict[str, Queue]
) -> None:
    owners_study.shared_with.add(other)
    client = logged_in(other)
    assert client.get(reverse("annotation:queue_detail", args=[queues["of_study"].pk])).status_code == 200
    assert client.get(reverse("annotation:queue_detail", args=[queues["imported"].pk])).status_code == 404
    assert list(Queue.objects.visible_to(other)) == [queues["of_study"]]


def test_a_superuser_sees_every_queue_and_an_inactive_or_non_staff_user_none(
    researcher: User, owner: User, queues: dict[str, Queue]
) -> None:
    assert set(Queue.objects.visible_to(researcher)) == set(queues.values())
    owner.is_active = False
    assert not Queue.objects.visible_to(owner).exists()
    annotator = User.objects.create_user("ann", password="pw")
    assert not Queue.objects.visible_to(annotator).exists()


def test_an_annotator_still_works_a_queue_of_any_study(annotator: User, queues: dict[str, Queue]) -> None:
    response = logged_in(annotator).get(reverse("annotation:work", args=[queues["of_study"].pk]))
    assert response.status_code == 200 and "Has a dog." in response.content.decode()


def test_a_researcher_cannot_read_or_label_another_researchers_queue_in_the_annotator_workspace(
    other: User, queues: dict[str, Queue]
) -> None:
    # staff makes the other researcher an annotator too: the workspace must not be a way round the queue pages' 404
    client = logged_in(other)
    assert "Olga study queue" not in client.get(reverse("annotation:home")).content.decode()
    response = client.get(reverse("annotation:work", args=[queues["of_study"].pk]))
    assert response.status_code == 404 and "Has a dog." not in response.content.decode()
    assert not Assignment.objects.filter(annotator=other).exists()


def test_a_researcher_annotates_the_queues_they_may_see_or_all_when_also_in_the_annotators_group(
    owner: User, other: User, queues: dict[str, Queue]
) -> None:
    home = logged_in(owner).get(reverse("annotation:home")).content.decode()
    assert "Olga study queue" in home and "Command queue" not in home
    assert logged_in(owner).get(reverse("annotation:work", args=[queues["of_study"].pk])).status_code == 200
    group, _ = Group.objects.get_or_create(name="annotators")
    other.groups.add(group)
    assert logged_in(other).get(reverse("annotation:work", args=[queues["of_study"].pk])).status_code == 200
