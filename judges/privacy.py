"""A deleted worker's sessions take the automatic judges' scores of them and their blinding flags along (a cascade from
the session, docs/privacy.md); this counts them for the deletion's summary and audit record
(``studies.signals.participant_footprint``, chat.privacy.footprint). When only their transcripts are deleted (a
study's retention sweep), the judges' raw outputs, which may quote the conversation, are blanked; the scores stay."""

from __future__ import annotations

from typing import Any

from judges.models import BlindingBreach, JudgeScore, ProbeJudgement
from studies.signals import participant_footprint, transcripts_deleting


def count_scores_of(sender: Any, participants: Any, **kwargs: Any) -> dict[str, int]:
    of_them = {"session__episode__participant__in": participants}
    return {
        "judge_scores": JudgeScore.objects.filter(**of_them).count(),
        "blinding_flags": BlindingBreach.objects.filter(**of_them).count(),
    }


def blank_raw_outputs(sender: Any, participants: Any, **kwargs: Any) -> None:
    JudgeScore.objects.filter(session__episode__participant__in=participants).exclude(raw="").update(raw="")
    ProbeJudgement.objects.filter(probe__session__episode__participant__in=participants).exclude(raw="").update(raw="")


def connect() -> None:
    participant_footprint.connect(count_scores_of, dispatch_uid="judges.privacy.footprint")
    transcripts_deleting.connect(blank_raw_outputs, dispatch_uid="judges.privacy.transcripts")
