"""A deleted worker's sessions take the automatic judges' scores of them and their blinding flags along (a cascade from
the session, docs/privacy.md); this counts them for the deletion's summary and audit record
(``studies.signals.participant_footprint``, chat.privacy.footprint)."""

from __future__ import annotations

from typing import Any

from judges.models import BlindingBreach, JudgeScore
from studies.signals import participant_footprint


def count_scores_of(sender: Any, participants: Any, **kwargs: Any) -> dict[str, int]:
    of_them = {"session__episode__participant__in": participants}
    return {
        "judge_scores": JudgeScore.objects.filter(**of_them).count(),
        "blinding_flags": BlindingBreach.objects.filter(**of_them).count(),
    }


def connect() -> None:
    participant_footprint.connect(count_scores_of, dispatch_uid="judges.privacy.footprint")
