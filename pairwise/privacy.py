"""A deleted worker's episodes leave the pairwise comparisons: the judgements that showed them (and their votes)
are deleted with them (studies.signals.participant_erasing; docs/privacy.md). A judgement points at its episodes
with PROTECT, so without this a worker whose episodes were judged could not be deleted."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from pairwise.models import Judgement, Vote
from studies.signals import participant_erasing, participant_footprint


def _judgements_of(participants: Any) -> Any:
    pks = list(participants.values_list("pk", flat=True))
    return Judgement.objects.filter(Q(left__participant__in=pks) | Q(right__participant__in=pks))


def delete_judgements_of(sender: Any, participants: Any, **kwargs: Any) -> None:
    _judgements_of(participants).delete()  # their votes go with them (cascade)


def count_judgements_of(sender: Any, participants: Any, **kwargs: Any) -> dict[str, int]:
    judgements = _judgements_of(participants)
    return {
        "pairwise_judgements": judgements.count(),
        "pairwise_votes": Vote.objects.filter(judgement__in=judgements).count(),
    }


def connect() -> None:
    participant_erasing.connect(delete_judgements_of, dispatch_uid="pairwise.privacy")
    participant_footprint.connect(count_judgements_of, dispatch_uid="pairwise.privacy.footprint")
