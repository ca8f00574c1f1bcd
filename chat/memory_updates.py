"""The arm's memory updates: after each reply (``after_turn``) and at the end of a session
(``end_session``, a job of its own on the "memory" lane), both written with compare-and-set
(chat/state.py), every LLM call recorded.

An ended session's update is enqueued after its commit (:func:`enqueue_memory_update`), claims its
:class:`MemorySnapshot` (a lease) before any LLM call, runs once however often it is delivered, and on
final failure keeps the previous state and makes the next session ready anyway
(:func:`update_memory`). A waiting page re-enqueues an update whose job is gone
(:func:`recover_stale_update`).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from chat import arms, jobs, leases, records, state
from chat.models import ChatSession, Episode, MemorySnapshot, Message
from chat.transcript import turns_of
from memory.base import MemorySystem, Turn
from memory.llm import RecordingLLM

log = logging.getLogger(__name__)

MEMORY_UPDATE_TASK = "chat.tasks.update_memory"


def enqueue_memory_update(session_id: int) -> None:
    """Have an ended session's memory update run (a Celery task, or here with the task's retries)."""
    try:
        jobs.dispatch(MEMORY_UPDATE_TASK, session_id, local=update_memory_with_retries)
    except Exception:  # broker down: the waiting page re-enqueues it (recover_stale_update)
        log.warning("could not enqueue the memory update of session %s", session_id, exc_info=True)


MEMORY_ATTEMPTS = 4  # the first run and three retries


class MemoryUpdateFailed(Exception):
    """A memory update attempt failed and should be retried after ``countdown`` seconds."""

    def __init__(self, message: str, countdown: float = 5) -> None:
        super().__init__(message)
        self.countdown = countdown


def update_memory(session_id: int, *, final: bool | None = None) -> MemorySnapshot:
    """The arm's end-of-session memory update for an ended session (idempotent).

    Runs ``end_session`` on the simulated clock, stores :class:`MemorySnapshot` (state and trace,
    with ``trace["llm_calls"]``), writes the state to the episode with compare-and-set (recomputed
    from the newer state if a late per-turn update wrote in between) and makes the next session
    ready. The job claims the snapshot (a lease) before any LLM call, so a duplicate delivery makes
    no LLM call. A second run after success changes nothing. On failure: if ``final`` (by default,
    when the attempts are spent), the error is recorded, the previous state is kept and the next
    session is made ready anyway (the worker is never stuck); otherwise :class:`MemoryUpdateFailed`
    is raised so the caller retries.
    """
    session = (
        ChatSession.objects.select_related("episode__arm", "episode__participant__study")
        .defer("episode__memory_state")  # from chat.state's cache by state_version
        .get(pk=session_id)
    )
    snapshot, _ = MemorySnapshot.objects.get_or_create(session=session)
    if snapshot.status == MemorySnapshot.Status.DONE:
        return snapshot
    pending = MemorySnapshot.objects.filter(pk=snapshot.pk, status=MemorySnapshot.Status.PENDING)
    if not leases.claim(pending):
        return snapshot  # another job holds it (a duplicate delivery), or it is finished
    snapshot.refresh_from_db()
    if final is None:
        final = snapshot.attempts + 1 >= MEMORY_ATTEMPTS
    episode = session.episode
    now = session.simulated_start
    if session.started_at and session.ended_at:
        now += session.ended_at - session.started_at  # the bot's clock when the session ended
    llm: RecordingLLM | None = None
    turns = turns_of(session)
    calls: list[dict[str, Any]] = []  # of every round: a round lost to a concurrent write made calls too
    with leases.heartbeat(pending):
        current, version = state.for_reply(episode.pk, episode.state_version)
        before = current
        for _round in range(state.MAX_ROUNDS):
            try:
                if llm is None:
                    system, llm = arms.build_arm(episode.arm, study=episode.participant.study, memory=True)
                update = system.end_session(current, turns, now)
                new_state, trace = update.state, dict(update.trace or {})
                error = ""
            except Exception as exc:  # any failure of the arm: LLM errors, bad output, bugs
                calls += llm.drain() if llm else []
                records.store_llm_calls(session.pk, None, calls)
                pending.update(
                    attempts=snapshot.attempts + 1, error=f"{type(exc).__name__}: {exc}"[:2000], lease_until=None
                )
                if not final:
                    raise MemoryUpdateFailed(str(exc), countdown=min(60, 5 * 2**snapshot.attempts)) from exc
                new_state, trace, error = before, {"llm_calls": calls}, f"{type(exc).__name__}: {exc}"
                log.warning("memory update of session %s failed; keeping the previous state: %s", session_id, exc)
            else:
                calls += llm.drain()
                trace["llm_calls"] = calls
            with transaction.atomic():
                snap = MemorySnapshot.objects.select_for_update().get(pk=snapshot.pk)
                if snap.status == MemorySnapshot.Status.DONE:
                    return snap
                if not error and not state.write(episode.pk, new_state, version):
                    # A late per-turn update wrote in between: compute again from its state.
                    current, version = state.read(episode.pk)
                    continue
                records.store_llm_calls(session.pk, None, [] if error else trace["llm_calls"])
                snap.state, snap.trace, snap.finished_at = new_state, trace, timezone.now()
                snap.attempts += 1 if not error else 0
                snap.status = MemorySnapshot.Status.FAILED if error else MemorySnapshot.Status.DONE
                snap.error = error[:2000]
                snap.lease_until = None
                snap.save()
                ChatSession.objects.filter(
                    episode=episode, index=session.index + 1, status=ChatSession.Status.PREPARING
                ).update(status=ChatSession.Status.READY)
                return snap
    pending.update(lease_until=None)
    raise MemoryUpdateFailed("the memory state kept changing during the update", countdown=1)


def recover_stale_update(next_session: ChatSession) -> bool:
    """Re-enqueue the memory update a waiting session depends on if its job is gone: its lease lapsed
    (the worker died), or it was never started ``CHAT_STALE_UPDATE_SECONDS`` after it was due (a lost
    broker message). Safe because the update is claimed and idempotent."""
    if next_session.status != ChatSession.Status.PREPARING:
        return False
    now = timezone.now()
    cutoff = now - timedelta(seconds=float(getattr(settings, "CHAT_STALE_UPDATE_SECONDS", 60)))
    lost = Q(lease_until__lt=now) | Q(lease_until__isnull=True, created_at__lt=cutoff)
    stale = MemorySnapshot.objects.filter(
        lost, session__episode=next_session.episode_id, session__index=next_session.index - 1,
        status=MemorySnapshot.Status.PENDING,
    )  # fmt: skip
    snapshot = stale.first()
    if snapshot is None:
        return False
    # one re-enqueue per period (created_at is the "due" time of the unclaimed job)
    MemorySnapshot.objects.filter(pk=snapshot.pk).update(created_at=now, lease_until=None)
    enqueue_memory_update(snapshot.session_id)
    return True


def update_memory_with_retries(session_id: int) -> MemorySnapshot:
    """Embedded mode: the retries the Celery task does, in the job thread."""
    delays = jobs.retry_delays()
    for delay in delays[: MEMORY_ATTEMPTS - 1]:
        try:
            return update_memory(session_id, final=False)
        except MemoryUpdateFailed:
            time.sleep(delay)
    return update_memory(session_id, final=True)


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
