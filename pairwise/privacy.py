"""A deleted worker's episodes leave the pairwise comparisons: the judgements that showed them (and their votes)
are deleted with them (studies.signals.participant_erasing; docs/privacy.md). A judgement points at its episodes
with PROTECT, so without this a worker whose episodes were judged could not be deleted."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from pairwise.models import Judgement
from studies.signals import participant_erasing


def delete_judgements_of(sender: Any, participants: Any, **kwargs: Any) -> None:
    pks = list(participants.values_list("pk", flat=True))
    Judgement.objects.filter(Q(left__participant__in=pks) | Q(right__participant__in=pks)).delete()


def connect() -> None:
    participant_erasing.connect(delete_judgements_of, dispatch_uid="pairwise.privacy")
