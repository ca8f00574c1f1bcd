"""A worker's personal data: deleted everywhere, pseudonymised after the study's retention period, and the raw ID
shown to the study's owner only (docs/privacy.md).

Workers are named by :attr:`studies.models.Participant.pseudonym` in every export and report; the raw Prolific ID
(``Participant.external_id``) stays in the database only to recognise a returning worker. Three operations change
that, each leaving a :class:`studies.models.PrivacyEvent` that names the worker by pseudonym only:

* :func:`erase_participant` (``manage.py delete_participant``, the quality page's button): the participant row and
  everything under it (episodes with their memory states, sessions, messages and their composition signals, ratings,
  attention answers, memory snapshots, LLM-call records, persona probes, answers to the study's questions and
  comprehension tries), the admin's log entries about them, and what the apps above chat keep of them
  (``studies.signals.participant_erasing``): the annotation items made from their snapshots and sessions with their
  labels, the pairwise judgements that showed their episodes with their votes, the automatic judges' scores and
  blinding flags of their sessions, their Prolific submissions. :func:`footprint` counts all of it (the apps answer
  ``participant_footprint``), for the summary and the audit record.
* :func:`sweep_retention` (Celery beat, ``manage.py sweep_retention``): past ``Study.retention_days`` after a
  worker's last visit, their raw IDs are dropped (:func:`pseudonymise`) and, when the study says so, their
  transcripts deleted too (:func:`delete_transcripts`; ratings stay); the apps above chat drop the raw IDs of the
  study's other people last seen before then (``studies.signals.retention_sweeping``: pairwise's judges).
* :func:`reveal_raw_id`: the owner asks for one worker's raw ID.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from chat.models import (
    AttentionResponse,
    ChatSession,
    Episode,
    LLMCallRecord,
    MemorySnapshot,
    Message,
    ProbeResult,
    Rating,
    SideBySideVote,
)
from studies import questions
from studies.audit import PrivacyEvent
from studies.models import Participant, Study
from studies.signals import (
    participant_erasing,
    participant_footprint,
    participant_pseudonymising,
    retention_sweeping,
    transcripts_deleting,
)


def footprint(participant: Participant) -> dict[str, int]:
    """How many rows of each kind hold this worker's data: what a deletion removes, chat's rows and those the apps
    above it delete with them (their answers to ``participant_footprint``: annotation items and labels, pairwise
    judgements and votes, judge scores, blinding flags, Prolific submissions)."""
    sessions = ChatSession.objects.filter(episode__participant=participant)
    counts = {
        "episodes": Episode.objects.filter(participant=participant).count(),
        "sessions": sessions.count(),
        "messages": Message.objects.filter(session__in=sessions).count(),
        "ratings": Rating.objects.filter(session__in=sessions).count(),
        "attention_responses": AttentionResponse.objects.filter(session__in=sessions).count(),
        "memory_snapshots": MemorySnapshot.objects.filter(session__in=sessions).count(),
        "llm_calls": LLMCallRecord.objects.filter(session__in=sessions).count(),
        "probes": ProbeResult.objects.filter(session__in=sessions).count(),
        "answers": participant.answers.count(),
        "comprehension_attempts": participant.comprehension_attempts.count(),
    }
    participants = Participant.objects.filter(pk=participant.pk)
    for _, answer in participant_footprint.send(Participant, participants=participants):
        rows: dict[str, int] = answer if isinstance(answer, dict) else {}
        for kind, n in rows.items():
            counts[kind] = counts.get(kind, 0) + int(n)
    return counts


def summary(counts: dict[str, int]) -> str:
    """``3 episodes, 6 sessions, …, 2 pairwise votes``: a deletion's counts in words."""
    return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items())


def _forget_admin_log(participant: Participant) -> int:
    """The admin's log entries about this worker's rows (their text may quote a message or an ID)."""
    sessions = ChatSession.objects.filter(episode__participant=participant)
    objects: list[tuple[type[Any], Any]] = [
        (Participant, [participant.pk]),
        (Episode, Episode.objects.filter(participant=participant).values_list("pk", flat=True)),
        (ChatSession, sessions.values_list("pk", flat=True)),
        (Message, Message.objects.filter(session__in=sessions).values_list("pk", flat=True)),
        (MemorySnapshot, MemorySnapshot.objects.filter(session__in=sessions).values_list("pk", flat=True)),
    ]
    q = Q(pk__in=[])
    for model, pks in objects:
        q |= Q(content_type=ContentType.objects.get_for_model(model), object_id__in=[str(pk) for pk in pks])
    deleted, _ = LogEntry.objects.filter(q).delete()
    return deleted


def erase_participant(participant: Participant, *, via: str, by: Any = None, reason: str = "") -> PrivacyEvent:
    """Delete the worker everywhere (see the module's docstring) in one transaction; the audit record remains."""
    with transaction.atomic():
        participant = Participant.objects.select_for_update().select_related("study").get(pk=participant.pk)
        counts = footprint(participant)
        counts["admin_log_entries"] = _forget_admin_log(participant)
        study, pseudonym = participant.study, participant.pseudonym
        participant_erasing.send(Participant, participants=Participant.objects.filter(pk=participant.pk))
        participant.delete()  # cascades; annotation deletes the items made from the snapshots (annotation.privacy)
        return PrivacyEvent.objects.create(
            study=study,
            study_slug=study.slug,
            pseudonym=pseudonym,
            action=PrivacyEvent.Action.DELETED,
            by=by if getattr(by, "pk", None) else None,
            via=via,
            reason=reason[:500],
            counts=counts,
        )


def pseudonymise(participant: Participant) -> None:
    """Drop the worker's raw IDs (Prolific PID, study and session ids, invite id): from now on the pseudonym is all
    there is (the admin's log entries about them go too: an older one may quote the raw ID). A worker who opens the
    study link again afterwards is a new participant. Apps above chat blank their copies of the raw IDs
    (``studies.signals.participant_pseudonymising``: prolific's submissions)."""
    _forget_admin_log(participant)
    participant_pseudonymising.send(Participant, participants=Participant.objects.filter(pk=participant.pk))
    Participant.objects.filter(pk=participant.pk).update(
        external_id=f"erased:{participant.pseudonym}",
        prolific_study_id="",
        prolific_session_id="",
        pseudonymised_at=timezone.now(),
    )


def delete_transcripts(participant: Participant) -> dict[str, int]:
    """Delete what the worker wrote and what was made of it (messages, memory states and snapshots, LLM-call
    records, and through the snapshots the annotation items; the text of their free-text answers to the study's
    questions, of the bot's answers to memory probes and of their side-by-side vote reasons; the apps above chat
    blank what they copied, e.g. an automatic judge's raw output, on ``transcripts_deleting``); sessions, ratings,
    probe scores, attention answers and the options they chose stay."""
    sessions = ChatSession.objects.filter(episode__participant=participant)
    transcripts_deleting.send(Participant, participants=Participant.objects.filter(pk=participant.pk))
    counts = {
        "llm_calls": LLMCallRecord.objects.filter(session__in=sessions).delete()[0],
        "memory_snapshots": MemorySnapshot.objects.filter(session__in=sessions).delete()[0],
        "messages": Message.objects.filter(session__in=sessions).delete()[0],
    }
    counts["free_text_answers"] = questions.delete_free_text(Participant.objects.filter(pk=participant.pk))
    # the bot's answers to the memory probes (they repeat what the worker told it; the scores stay, as the ratings)
    # and the worker's reasons for their side-by-side votes (the winner stays)
    counts["probe_answers"] = ProbeResult.objects.filter(session__in=sessions).exclude(answer="").update(answer="")
    counts["vote_reasons"] = SideBySideVote.objects.filter(session__in=sessions).exclude(reason="").update(reason="")
    counts["memory_states"] = Episode.objects.filter(participant=participant).update(
        memory_state={},
        state_version=F("state_version") + 1,  # a stale writer's compare-and-set fails (chat.state)
    )
    return counts


@dataclass
class RetentionResult:
    pseudonymised: int = 0
    transcripts_deleted: int = 0
    #: what the apps above chat pseudonymised of people who are not participants, by kind (``pairwise judges``)
    others: dict[str, int] = field(default_factory=dict)


def sweep_retention(now: dt.datetime | None = None) -> RetentionResult:
    """Apply every study's retention period to the workers last seen longer ago than it (idempotent: each worker
    once), then to the other people of the study the apps above chat keep raw IDs of (``retention_sweeping``:
    pairwise's judges). Each worker in its own transaction, so a long sweep never holds the database."""
    now = now or timezone.now()
    result = RetentionResult()
    for study in Study.objects.filter(retention_days__isnull=False):
        before = now - dt.timedelta(days=study.retention_days or 0)
        due = study.participants.filter(pseudonymised_at__isnull=True, last_seen_at__lt=before)
        for participant in due.iterator():
            with transaction.atomic():
                counts: dict[str, int] = {}
                action = PrivacyEvent.Action.PSEUDONYMISED
                if study.retention_action == "delete_transcripts":
                    counts = delete_transcripts(participant)
                    action = PrivacyEvent.Action.TRANSCRIPTS_DELETED
                    result.transcripts_deleted += 1
                pseudonymise(participant)
                result.pseudonymised += 1
                PrivacyEvent.objects.create(
                    study=study,
                    study_slug=study.slug,
                    pseudonym=participant.pseudonym,
                    action=action,
                    via="retention sweep",
                    reason=f"{study.retention_days} days after the last visit",
                    counts=counts,
                )
        for _, answer in retention_sweeping.send(Study, study=study, before=before):
            swept: dict[str, int] = answer if isinstance(answer, dict) else {}
            for kind, n in swept.items():
                result.others[kind] = result.others.get(kind, 0) + int(n)
    return result


def reveal_raw_id(participant: Participant, user: Any) -> str:
    """The worker's raw ID for the study's owner (anyone else: PermissionDenied); the look is recorded."""
    if not participant.study.is_owner(user):
        raise PermissionDenied("Only the study's owner sees raw worker IDs.")
    PrivacyEvent.objects.create(
        study=participant.study,
        study_slug=participant.study.slug,
        pseudonym=participant.pseudonym,
        action=PrivacyEvent.Action.REVEALED,
        by=user,
        via="quality page",
    )
    if participant.pseudonymised_at is not None:
        return ""
    return participant.raw_id


def find_participant(study: Study, who: str) -> Participant | None:
    """A worker of ``study`` by pseudonym, raw Prolific ID, or stored ID (``prolific:…``, ``invite:…``)."""
    who = who.strip()
    return (
        study.participants.filter(
            Q(pseudonym=who.upper())
            | Q(external_id=who)
            | Q(external_id=f"prolific:{who}")
            | Q(external_id=f"invite:{who}")
        )
        .order_by("pk")
        .first()
    )
