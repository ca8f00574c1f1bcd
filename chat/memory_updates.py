"""The arm's memory updates: after each reply (``after_turn``) and at the end of a session
(``end_session``, a job of the runtime: kind ``chat.memory_update``, lane ``memory``), both written with
compare-and-set (chat/state.py), every LLM call recorded.

An ended session's update is submitted in the transaction that ends it (:func:`submit_memory_update`),
runs once however often it is delivered (the runtime's claim), and is retried by the runtime with the
kind's policy (:func:`memory_policy`: ``CHAT_MEMORY_RETRY_DELAYS`` for up to ``CHAT_MEMORY_RETRY_SECONDS``,
the same in every deployment); a retry reuses the LLM calls an earlier attempt finished
(:class:`memory.llmwrap.ReusingLLM`), so an embedding outage does not repeat them. When its time is spent, the
previous state is kept and the update waits for a person (:func:`_failed`): the next session does not start on
a memory that lacks this session. The study page lists it (:func:`waiting_for_decision`) with two buttons for
its owner and editors: retry now (:func:`retry_now`: a new job with a new retry time) or skip this session's
update (:func:`skip_update`: the next session starts on the memory before it, and the snapshot says so, with
who decided and when). The worker's waiting page says what is happening (:func:`wait_reason`). A waiting page
asks the runtime's sweeper to take back an update whose job is gone (:func:`recover_stale_update`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from chat import arms, probing, records, state
from chat.errors import ChatError
from chat.models import ChatSession, Episode, MemorySnapshot, Message
from chat.transcript import turns_of
from memory.base import MemorySystem, Turn
from memory.llmwrap import RecordingLLM
from runtime import jobs, kinds, sweeper
from runtime.jobs import Attempt
from runtime.models import Job

log = logging.getLogger(__name__)


def memory_policy() -> kinds.RetryPolicy:
    """An end-of-session update's retries: any failure of the arm (LLM or embedding errors, bad output, a
    bug) is tried again after the next wait of ``CHAT_MEMORY_RETRY_DELAYS`` (5, 10, 20, 30 s, the last
    repeating, with jitter; an endpoint's ``Retry-After`` is the least wait) until
    ``CHAT_MEMORY_RETRY_SECONDS`` (15 min) after the session ended. Meanwhile the next session waits (it is
    not started on a memory that lacks this one) and the study page lists the update as waiting to retry;
    after it, as waiting for a decision (:func:`_failed`). ``CHAT_MEMORY_RETRY_MAX_ATTEMPTS`` (tests) limits
    the attempts too."""
    delays = tuple(float(x) for x in settings.CHAT_MEMORY_RETRY_DELAYS)
    most = int(getattr(settings, "CHAT_MEMORY_RETRY_MAX_ATTEMPTS", 0) or 0)
    return kinds.RetryPolicy(
        max_attempts=most or None, backoff=delays, jitter=0.3 if any(delays) else 0.0,
        deadline=float(settings.CHAT_MEMORY_RETRY_SECONDS), transient=(Exception,),
    )  # fmt: skip


def submit_memory_update(session: ChatSession) -> Job:
    """Submit the memory update of an ended session (inside the transaction that ends it)."""
    study_id = session.episode.participant.study_id
    return jobs.submit(
        MEMORY_UPDATE, session.pk, scope=f"study:{study_id}",
        label=f"memory update after session {session.index} of episode {session.episode_id}",
    )  # fmt: skip


class StateKeptChanging(Exception):
    """Every round of the update lost its compare-and-set: tried again by the runtime."""


def update_memory(job: Job, attempt: Attempt, handed: Any = None) -> None:
    """One attempt at the arm's end-of-session memory update of an ended session (idempotent).

    Runs ``end_session`` on the simulated clock, stores :class:`MemorySnapshot` (state and trace, with
    ``trace["llm_calls"]``), writes the state to the episode with compare-and-set (recomputed from the
    newer state if a late per-turn update wrote in between) and makes the next session ready, in one
    transaction with the job's completion. A failed attempt records its calls and error on the snapshot
    and raises: the runtime retries it, and when the attempts are spent keeps the previous state
    (:func:`_failed`). A second run after success changes nothing.
    """
    session_id = int(job.target)
    session = (
        ChatSession.objects.select_related("episode__arm", "episode__participant__study")
        .defer("episode__memory_state")  # from chat.state's cache by state_version
        .get(pk=session_id)
    )
    snapshot, _ = MemorySnapshot.objects.get_or_create(session=session)
    if snapshot.status == MemorySnapshot.Status.DONE:
        return
    episode = session.episode
    now = session.simulated_start
    if session.started_at and session.ended_at:
        now += session.ended_at - session.started_at  # the bot's clock when the session ended
    llm: RecordingLLM | None = None
    turns = turns_of(session)
    calls: list[dict[str, Any]] = []  # of every round: a round lost to a concurrent write made calls too
    current, version = state.for_reply(episode.pk, episode.state_version)
    # the calls an earlier attempt finished (its embedding, or a later call, failed): answered again from
    # the record instead of the model, so a retry repeats only what failed
    earlier = list((snapshot.trace or {}).get("llm_calls") or []) if snapshot.attempts else []
    for _round in range(state.MAX_ROUNDS):
        attempt.check()
        try:
            if llm is None:
                study = episode.participant.study
                system, llm = arms.build_arm(episode.arm, study=study, memory=True, reuse=earlier or None)
            update = system.end_session(current, turns, now)
            new_state, trace = update.state, dict(update.trace or {})
        except Exception as exc:  # any failure of the arm: LLM errors, bad output, bugs
            calls += llm.drain() if llm else []
            with transaction.atomic():
                records.store_llm_calls(session.pk, None, calls)
                MemorySnapshot.objects.filter(pk=snapshot.pk, status=MemorySnapshot.Status.PENDING).update(
                    attempts=attempt.number, error=f"{type(exc).__name__}: {exc}"[:2000], trace={"llm_calls": calls}
                )
            raise
        calls += llm.drain()
        trace["llm_calls"] = calls
        with transaction.atomic():
            snap = MemorySnapshot.objects.select_for_update().get(pk=snapshot.pk)
            if snap.status == MemorySnapshot.Status.DONE:
                return
            if not state.write(episode.pk, new_state, version):
                # A late per-turn update wrote in between: compute again from its state.
                current, version = state.read(episode.pk)
                continue
            if not attempt.complete():  # taken back meanwhile: this run writes nothing (rolled back)
                transaction.set_rollback(True)
                raise jobs.JobLost(f"memory update of session {session_id} was taken back")
            records.store_llm_calls(session.pk, None, trace["llm_calls"])
            snap.state, snap.trace, snap.finished_at = new_state, trace, timezone.now()
            snap.attempts = attempt.number
            snap.status, snap.error = MemorySnapshot.Status.DONE, ""
            snap.save()
            _next_session_ready(session)
            probing.submit_probes(session)  # what the bot remembered of a persona card (none without one)
            return
    raise StateKeptChanging("the memory state kept changing during the update")


def _next_session_ready(session: ChatSession) -> None:
    ChatSession.objects.filter(
        episode_id=session.episode_id, index=session.index + 1, status=ChatSession.Status.PREPARING
    ).update(status=ChatSession.Status.READY)


def _failed(job: Job, error: str) -> None:
    """The update's retry time is spent (inside the job's failing transaction): the previous state is kept
    as the snapshot's, with the error, and the update waits for a researcher's decision (the study page's
    retry and skip buttons). The next session stays waiting: it does not start silently on a memory that
    lacks this session."""
    session = ChatSession.objects.select_related("episode").get(pk=int(job.target))
    snap, _ = MemorySnapshot.objects.get_or_create(session=session)
    if snap.status in (MemorySnapshot.Status.DONE, MemorySnapshot.Status.SKIPPED):
        return
    current, _version = state.read(session.episode_id)
    snap.state, snap.status, snap.finished_at = current, MemorySnapshot.Status.FAILED, timezone.now()
    snap.error = (snap.error or error)[:2000]
    snap.trace = snap.trace or {"llm_calls": []}
    snap.save()
    log.warning("memory update of session %s failed; waiting for a researcher's decision: %s", session.pk, snap.error)


def _next_started() -> Exists:
    """A snapshot's next session has started (an update that failed before decisions existed let it go on)."""
    return Exists(
        ChatSession.objects.filter(
            episode_id=OuterRef("session__episode_id"), index=OuterRef("session__index") + 1
        ).exclude(status=ChatSession.Status.PREPARING)
    )


def waiting_for_decision(study_id: int) -> list[MemorySnapshot]:
    """The study's memory updates whose retry time ran out and whose next session waits, oldest first (the
    study page's list)."""
    return list(
        MemorySnapshot.objects.filter(
            status=MemorySnapshot.Status.FAILED, session__episode__participant__study_id=study_id
        )
        .exclude(_next_started())
        .select_related("session__episode__participant", "session__episode__arm")
        .defer("state", "trace")
        .order_by("finished_at", "id")
    )


class NotWaiting(ChatError):
    """A decision on a memory update that is not waiting for one (already retried, skipped or done)."""


def _decide(study_id: int, snapshot_id: int, user: Any, action: str) -> MemorySnapshot:
    """Lock the failed update's snapshot of this study and record the decision (who and when) on it."""
    snap = (
        MemorySnapshot.objects.select_for_update()
        .filter(session__episode__participant__study_id=study_id)
        .select_related("session__episode")
        .get(pk=snapshot_id)
    )
    if snap.status != MemorySnapshot.Status.FAILED:
        raise NotWaiting(
            f"This memory update is not waiting for a decision (it is {snap.get_status_display().lower()})."
        )
    if MemorySnapshot.objects.filter(pk=snap.pk).filter(_next_started()).exists():
        raise NotWaiting("This memory update is not waiting for a decision: the next session has started.")
    decision = {"action": action, "by": user.get_username(), "user_id": user.pk, "at": timezone.now().isoformat()}
    snap.decisions = [*(snap.decisions or []), decision]
    return snap


def retry_now(study_id: int, snapshot_id: int, user: Any) -> Job:
    """A researcher's "retry now": the update runs again as a new job with the kind's whole retry time
    (reusing the LLM calls earlier attempts finished); the next session keeps waiting for it."""
    with transaction.atomic():
        snap = _decide(study_id, snapshot_id, user, "retry")
        snap.status, snap.finished_at = MemorySnapshot.Status.PENDING, None
        snap.save(update_fields=["status", "finished_at", "decisions"])
        job = submit_memory_update(snap.session)
    log.info("memory update of session %s: retried by %s", snap.session_id, user.get_username())
    return job


def skip_update(study_id: int, snapshot_id: int, user: Any) -> MemorySnapshot:
    """A researcher's "skip this session's memory update": the snapshot keeps the memory before the session
    (status skipped, with who decided and when) and the next session starts on it."""
    with transaction.atomic():
        snap = _decide(study_id, snapshot_id, user, "skip")
        snap.status, snap.finished_at = MemorySnapshot.Status.SKIPPED, timezone.now()
        snap.save(update_fields=["status", "finished_at", "decisions"])
        _next_session_ready(snap.session)
        probing.submit_probes(snap.session)  # the memory the next session starts on is probed too
    log.warning("memory update of session %s: skipped by %s", snap.session_id, user.get_username())
    return snap


def wait_reason(next_session: ChatSession) -> str:
    """Why a worker's next session is not ready yet, for the waiting page: "" (the update is running as
    usual), "retrying" (an attempt failed: the model's service is not answering and it is tried again) or
    "decision" (its retry time ran out: the study team decides)."""
    if next_session.status != ChatSession.Status.PREPARING:
        return ""
    snap = (
        MemorySnapshot.objects.filter(
            session__episode_id=next_session.episode_id, session__index=next_session.index - 1
        )
        .only("status", "error", "attempts")
        .first()
    )
    if snap is None:
        return ""
    if snap.status == MemorySnapshot.Status.FAILED:
        return "decision"
    return "retrying" if snap.status == MemorySnapshot.Status.PENDING and snap.error else ""


def recover_stale_update(next_session: ChatSession) -> bool:
    """Have the runtime's sweeper take back the memory update a waiting session depends on, if its job is
    gone (its lease lapsed: the worker died; or never started a grace after it was due: a lost broker
    message). Safe because the update is claimed and idempotent."""
    if next_session.status != ChatSession.Status.PREPARING:
        return False
    previous = ChatSession.objects.filter(episode_id=next_session.episode_id, index=next_session.index - 1).first()
    if previous is None:
        return False
    return bool(sweeper.sweep(Job.objects.of(MEMORY_UPDATE.name, previous.pk)))


def after_turn(
    session: ChatSession,
    episode: Episode,
    system: MemorySystem,
    llm: RecordingLLM,
    msg: Message,
    now: datetime,
    start_state: tuple[dict[str, Any], int],
    turns: list[Turn],
) -> None:
    """The arm's per-turn update, written with compare-and-set: if the state changed since the reply
    read it (the end-of-session update ran meanwhile), the update is computed again from the new
    state. A failure is recorded and the previous state kept. ``turns``: the session up to and
    including the reply."""
    try:
        applied = state.apply(episode.pk, lambda current: system.after_turn(current, turns, now), start=start_state)
    except Exception as exc:
        log.warning("after_turn failed for session %s: %s", session.pk, exc)
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        return
    records.store_llm_calls(session.pk, msg.pk, llm.drain())
    trace = applied.update.trace or {}
    recorded = {k: trace[k] for k in ("fallbacks", "rejected") if trace.get(k)}
    if recorded:
        # Rejected memory writes and fallbacks are evidence about the arm: kept with the reply they followed.
        Message.objects.filter(pk=msg.pk).update(memory_trace=recorded)
        log.info("after_turn of session %s: %s", session.pk, {k: len(v) for k, v in recorded.items()})
    episode.memory_state, episode.state_version = applied.update.state, applied.version


MEMORY_UPDATE = kinds.declare(
    "chat.memory_update", lane="memory", run=update_memory, retry=memory_policy, label="memory update",
    on_failure=_failed,
)  # fmt: skip
