"""Personal data in the pairwise comparisons (docs/privacy.md).

A deleted worker's episodes leave the pairwise comparisons: the judgements that showed them (and their votes) are
deleted with them (studies.signals.participant_erasing). A judgement points at its episodes with PROTECT, so without
this a worker whose episodes were judged could not be deleted.

The judges who come from a comparison's Prolific link are crowdworkers too: the study's retention sweep
(studies.signals.retention_sweeping) drops their Prolific IDs once they were last seen longer ago than the study's
retention period, as it does its workers' (:func:`pseudonymise_judges`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from pairwise.models import Judge, Judgement, Vote
from studies.audit import PrivacyEvent
from studies.models import Study
from studies.signals import participant_erasing, participant_footprint, retention_sweeping


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


def judges_due(study: Study, before: dt.datetime) -> Any:
    """The judges of ``study``'s comparisons who still have a Prolific ID and were last seen before ``before``: they
    arrived, consented, finished, were shown and answered every pair before then (annotators are logged-in users: no
    ID)."""
    return (
        Judge.objects.filter(comparison__study=study, pseudonymised_at__isnull=True, created_at__lt=before)
        .exclude(external_id="")
        .exclude(consented_at__gte=before)
        .exclude(completed_at__gte=before)
        .exclude(judgements__shown_at__gte=before)
        .exclude(judgements__submitted_at__gte=before)
    )


def pseudonymise_judges(sender: Any, study: Study, before: dt.datetime, **kwargs: Any) -> dict[str, int]:
    """Drop the Prolific IDs (PID, study and session ids) of the judges due (:func:`judges_due`), each in its own
    transaction with an audit record naming the judge as the exports do; their judgements and votes stay. A judge who
    opens the comparison's link again afterwards is a new judge."""
    done = 0
    for judge in judges_due(study, before).order_by("pk").iterator():
        with transaction.atomic():
            # still due as it is written (not as read at the start of the sweep): a judge who came back meanwhile
            # (a pair shown or answered, the comparison finished) keeps the ID
            still_due = judges_due(study, before).filter(pk=judge.pk)
            if not still_due.update(
                # unique in the comparison, and no Prolific ID a link can carry ("/" is not in
                # services.PROLIFIC_ID): nobody can claim the judge's row with it
                external_id=f"erased/j{judge.pk}",
                prolific_study_id="",
                prolific_session_id="",
                pseudonymised_at=timezone.now(),
            ):
                continue
            PrivacyEvent.objects.create(
                study=study,
                study_slug=study.slug,
                pseudonym=judge.pseudonym,
                action=PrivacyEvent.Action.PSEUDONYMISED,
                via="retention sweep",
                reason=f"{study.retention_days} days after the judge's last visit",
            )
        done += 1
    return {"pairwise judges": done} if done else {}


def connect() -> None:
    participant_erasing.connect(delete_judgements_of, dispatch_uid="pairwise.privacy")
    participant_footprint.connect(count_judgements_of, dispatch_uid="pairwise.privacy.footprint")
    retention_sweeping.connect(pseudonymise_judges, dispatch_uid="pairwise.privacy.retention")
