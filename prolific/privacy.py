"""A deleted worker leaves no Prolific submission behind (studies.signals.participant_erasing; docs/privacy.md):
a submission keeps the worker's raw Prolific ID, so the submissions of the erased participants are deleted
with them (by their link, and by their Prolific ID within the study's waves, for a submission read before
the worker arrived)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from prolific.models import Submission
from studies.signals import participant_erasing, participant_footprint


def _submissions_of(participants: Any) -> Any:
    rows = list(participants.values_list("pk", "study_id", "external_id"))
    if not rows:
        return Submission.objects.none()
    match = Q(participant__in=[pk for pk, _, _ in rows])
    for _, study_id, external_id in rows:
        if external_id:
            match |= Q(wave__study_id=study_id, prolific_pid=external_id)
    return Submission.objects.filter(match)


def delete_submissions_of(sender: Any, participants: Any, **kwargs: Any) -> None:
    _submissions_of(participants).delete()


def count_submissions_of(sender: Any, participants: Any, **kwargs: Any) -> dict[str, int]:
    return {"prolific_submissions": _submissions_of(participants).count()}


def connect() -> None:
    participant_erasing.connect(delete_submissions_of, dispatch_uid="prolific.privacy")
    participant_footprint.connect(count_submissions_of, dispatch_uid="prolific.privacy.footprint")
