"""The blinding-breach scan of a study: every bot turn of every session through analysis.blinding.

The study's arm names and memory-system keys are what the scanner looks for besides vendor names,
memory-tool words, JSON and prompt fragments. A session with a breach is non-blind: the scan sets
``ChatSession.non_blind``, so the study's analysis (dashboard, exports, the human-automatic table) leaves its
ratings out by default as a row filter and counts it per arm, and the judges page lists it with the turn's text.
The scan is idempotent (a breach is stored once per message, kind and term) and cheap (regular expressions).

It runs by itself on every session once its chat is over (the worker's end, the time limit, an abandoned
episode's open session: ``chat.signals.session_ended``, connected in judges' AppConfig): :func:`submit_scan`
queues a job of kind ``judges.blinding_scan`` (lane ``long``: no worker waits for it, so it never delays a memory
update; a database error is retried after the memory updates' waits) that scans that session's bot turns
(:func:`scan_session`). The researcher's scan of the whole
study (:func:`scan_study`, the judges page) stays: it catches sessions ended before the automatic scan existed.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from analysis.blinding import Scanner
from chat.models import ChatSession, Message
from judges.models import BlindingBreach
from memory.registry import MEMORY_SYSTEMS
from runtime import jobs, kinds
from runtime.jobs import Attempt
from runtime.models import Job
from studies.models import Participant, Study


def arm_names(study: Study) -> list[str]:
    names: set[str] = set()
    for arm in study.arms.all():
        names.add(arm.name)
        names.add(arm.memory_system)
    # the distinctive names of every registered system (a worker may know them), not their labels
    # ("Without memory", "Memory update" are ordinary words in a chat)
    names |= {k for k in MEMORY_SYSTEMS if k not in ("none", "qc", "tim")}
    return sorted(names | set(SYSTEM_NAMES))


SYSTEM_NAMES = ("memgpt", "letta", "a-mem", "ld-agent", "think-in-memory", "llm-rsum", "mem0")


def scan_study(study: Study) -> int:
    """Scan every bot turn of the study; returns the number of breaches stored now (new ones)."""
    sessions = ChatSession.objects.filter(episode__participant__study=study)
    return _scan(study, sessions)


def scan_session(session_id: int) -> dict[str, Any]:
    """Scan the bot turns of one session (idempotent: a second scan stores nothing and changes no flag);
    ``{"breaches": new ones stored now, "non_blind": the session's flag}``."""
    session = ChatSession.objects.select_related("episode__participant__study").filter(pk=session_id).first()
    if session is None:  # deleted meanwhile (a worker's erasure): nothing to scan
        return {"breaches": 0, "non_blind": False}
    found = _scan(session.episode.participant.study, ChatSession.objects.filter(pk=session_id))
    flag = ChatSession.objects.filter(pk=session_id).values_list("non_blind", flat=True).first()
    return {"breaches": found, "non_blind": bool(flag)}


def _scan(study: Study, sessions: QuerySet[ChatSession]) -> int:
    """Scan the bot turns of ``sessions`` (of ``study``), store their new breaches and set their ``non_blind``
    flag to whether they hold one; the number of breaches stored now."""
    scanner = Scanner(arm_names(study))
    messages = Message.objects.filter(session__in=sessions, speaker="bot").exclude(text="")
    new = []
    for message_id, session_id, text in messages.values_list("id", "session_id", "text").iterator():
        for breach in scanner.scan(text):
            new.append(
                BlindingBreach(
                    session_id=session_id, message_id=message_id, kind=breach.kind, term=breach.term,
                    excerpt=breach.excerpt,
                )
            )  # fmt: skip
    breaches = BlindingBreach.objects.filter(session__in=sessions)
    with transaction.atomic():
        before = breaches.count()
        BlindingBreach.objects.bulk_create(new, ignore_conflicts=True)
        found = breaches.count() - before
        # the flag the analysis filters on: exactly the sessions with a stored breach
        flagged = breaches.values("session_id")
        sessions.filter(pk__in=flagged, non_blind=False).update(non_blind=True)
        sessions.filter(non_blind=True).exclude(pk__in=flagged).update(non_blind=False)
    return found


def submit_scan(sender: object, *, session: ChatSession, **kwargs: Any) -> Job | None:
    """``chat.signals.session_ended``'s receiver: queue the scan of the session (inside the transaction that
    ended it; one live job per session, so a second end or signal gets the first). Not for a researcher's
    preview (never data: deleted when the preview ends)."""
    participant = session.episode.participant
    if participant.source == Participant.Source.PREVIEW:
        return None
    study_id = participant.study_id
    return jobs.submit(
        SCAN, session.pk, scope=f"study:{study_id}",
        label=f"blinding scan of session {session.index} of episode {session.episode_id}",
    )  # fmt: skip


def scan_policy() -> kinds.RetryPolicy:
    """The scan's retries: a database error is tried again after the memory updates' waits
    (``CHAT_MEMORY_RETRY_DELAYS``); anything else (a bug) fails the job at once, listed on the study page's
    jobs, and the researcher's scan of the study (the judges page) covers the session."""
    delays = tuple(float(x) for x in settings.CHAT_MEMORY_RETRY_DELAYS)
    return kinds.RetryPolicy(max_attempts=len(delays) + 1, backoff=delays)


def run_scan(job: Job, attempt: Attempt, handed: Any = None) -> dict[str, Any]:
    attempt.check()
    return scan_session(int(job.target))


SCAN = kinds.declare("judges.blinding_scan", lane="long", run=run_scan, retry=scan_policy, label="blinding scan")


def non_blind_sessions(study: Study) -> set[int]:
    """The study's sessions marked non-blind by the last scan."""
    return set(
        ChatSession.objects.filter(episode__participant__study=study, non_blind=True).values_list("pk", flat=True)
    )


def non_blind_per_arm(study: Study) -> dict[str, int]:
    """Non-blind sessions per arm (arms without one left out)."""
    rows = ChatSession.objects.filter(episode__participant__study=study, non_blind=True).values_list(
        "episode__arm__name", flat=True
    )
    return dict(sorted(Counter(rows).items()))
