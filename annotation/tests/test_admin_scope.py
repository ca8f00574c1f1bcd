"""The annotation admin follows the queue pages' rule (``Queue.objects.visible_to``): a researcher given
the admin permissions sees the queues they may see, and nothing that hangs off another researcher's."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from annotation.models import Assignment, Item, Queue
from annotation.services import claim_next_item
from annotation.sources import add_items
from annotation.tests.conftest import pair_spec
from studies.models import Study

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(db: Any) -> dict[str, Any]:
    alice = User.objects.create_user("alice", password="pw", is_staff=True)
    bob = User.objects.create_user("bob", password="pw", is_staff=True)
    bob.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["annotation", "studies"]))
    alices = Queue.objects.create(
        name="Alice secret queue", kind="pairs", study=Study.objects.create(name="Alice's", created_by=alice)
    )
    bobs = Queue.objects.create(
        name="Bob queue", kind="pairs", study=Study.objects.create(name="Bob's", created_by=bob), created_by=bob
    )
    for q in (alices, bobs):
        add_items(q, [pair_spec(f"m of {q.name}", "s")])
        assert claim_next_item(q, alice) is not None
    return {"bob": bob, "alices": alices, "bobs": bobs}


def test_a_researcher_sees_no_row_of_another_researchers_queue_in_the_annotation_admin(setup: dict[str, Any]) -> None:
    client = Client()
    client.force_login(setup["bob"])
    alices, bobs = setup["alices"], setup["bobs"]
    for model in ("queue", "item", "assignment", "label", "draft"):
        response = client.get(reverse(f"admin:annotation_{model}_changelist"))
        assert response.status_code == 200 and "Alice secret queue" not in response.content.decode(), model
    assert "Bob queue" in client.get(reverse("admin:annotation_item_changelist")).content.decode()
    pages = [
        reverse("admin:annotation_queue_change", args=[alices.pk]),
        reverse("admin:annotation_item_change", args=[Item.objects.get(queue=alices).pk]),
        reverse("admin:annotation_assignment_change", args=[Assignment.objects.get(queue=alices).pk]),
    ]
    for url in pages:  # Django's admin redirects a missing object to its index with a message
        response = client.get(url)
        assert response.status_code in (302, 404) and "m of Alice secret queue" not in response.content.decode()
    form = client.get(reverse("admin:annotation_queue_change", args=[bobs.pk])).context["adminform"].form
    assert [s.name for s in form.fields["study"].queryset] == ["Bob's"]
