"""A worker deleted with manage.py delete_participant (or the button) leaves no Prolific submission behind:
a submission holds the raw Prolific ID (docs/privacy.md)."""

from __future__ import annotations

import pytest

from chat.privacy import erase_participant
from prolific.models import Submission, Wave
from studies.models import Participant, Study

pytestmark = pytest.mark.django_db


def test_erasing_a_worker_deletes_their_submissions_and_keeps_the_others(study: Study) -> None:
    wave = Wave.objects.create(study=study, number=1, prolific_study_id="W1")
    gone = Participant.objects.create(study=study, external_id="PID-GONE")
    kept = Participant.objects.create(study=study, external_id="PID-KEPT")
    Submission.objects.create(
        wave=wave, submission_id="s1", prolific_pid="PID-GONE", participant=gone, status="AWAITING REVIEW"
    )
    Submission.objects.create(wave=wave, submission_id="s2", prolific_pid="PID-GONE", status="RETURNED")  # never linked
    Submission.objects.create(
        wave=wave, submission_id="s3", prolific_pid="PID-KEPT", participant=kept, status="APPROVED"
    )
    erase_participant(gone, via="test")
    assert list(Submission.objects.values_list("submission_id", flat=True)) == ["s3"]
    assert not Submission.objects.filter(prolific_pid="PID-GONE").exists()
