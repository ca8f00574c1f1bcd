"""The new-queue form: every documented setting, including the stage groups of a chained summary queue."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from annotation.forms import QueueForm
from annotation.models import Queue
from annotation.tests.conftest import queue_form_data
from studies.models import Study

pytestmark = pytest.mark.django_db


def queue_data(study: Study, **extra: Any) -> dict[str, Any]:
    return queue_form_data(study, name="Chained summaries", kind="summaries", **extra)


def test_the_stage_groups_typed_in_the_form_are_stored_on_the_queue(
    client: Client, researcher: User, study: Study
) -> None:
    client.force_login(researcher)
    page = client.get(reverse("annotation:queue_create")).content.decode()
    assert 'name="stage_groups"' in page and "a JSON list of group names per stage" in page
    upload = SimpleUploadedFile("summaries.jsonl", b'{"summary": ["Has a dog named Rex"]}\n')
    data = queue_data(study, stage_groups='["", "seniors"]', source_file=upload)
    response = client.post(reverse("annotation:queue_create"), data)
    assert response.status_code == 302
    assert Queue.objects.get(name="Chained summaries").stage_groups == ["", "seniors"]


def test_an_empty_stage_groups_box_means_any_annotator_at_every_stage(study: Study) -> None:
    form = QueueForm(queue_data(study, stage_groups=""))
    assert form.is_valid(), form.errors
    assert form.save().stage_groups == []


@pytest.mark.parametrize(
    "typed, message",
    [
        ('{"stage": "seniors"}', "Give a JSON list of group names"),
        ('["", 3]', "Give a JSON list of group names"),
        ("seniors", "Enter a valid JSON"),
    ],
)
def test_stage_groups_that_are_not_a_list_of_names_are_refused(study: Study, typed: str, message: str) -> None:
    form = QueueForm(queue_data(study, stage_groups=typed))
    assert not form.is_valid()
    assert message in " ".join(form.errors["stage_groups"])
    assert not Queue.objects.exists()
