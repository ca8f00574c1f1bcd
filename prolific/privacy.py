"""A deleted worker leaves no Prolific submission behind (studies.signals.participant_erasing; docs/privacy.md):
a submission keeps the worker's raw Prolific ID, so the submissions of the erased participants are deleted
with them (by their link, and by their Prolific ID within the study's waves, for a submission read before
the worker arrived)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from prolific.models import Submission
from studies.signals import participant_erasing


def delete_submissions_of(sender: Any, participants: Any, **kwargs: Any) -> None:
    rows = list(participants.values_list("pk", "study_id", "external_id"))
    if not rows:
        return
    match = Q(participant__in=[pk for pk, _, _ in rows])
    for _, study_id, external_id in rows:
        if external_id:
            match |= Q(wave__study_id=study_id, prolific_pid=external_id)
    Submission.objects.filter(match).delete()


def connect() -> None:
    participant_erasing.connect(delete_submissions_of, dispatch_uid="prolific.privacy")
