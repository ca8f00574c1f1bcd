"""The bot's reply: written by a job, streamed to the session's sockets, retried, failed visibly.

A reply is a pending placeholder :class:`Message` stored with the worker's message
(:func:`chat.turns.post_user_message`) or as a session's opener (:func:`chat.sessions.add_opener`),
and written by :func:`generate_reply` in a job (:func:`enqueue_reply`): a Celery task, or a thread
of the web process when embedded. The job claims the row (a lease, chat/leases.py), streams the arm's
reply token by token (:func:`chat.jobs.broadcast`), holds back what the leak check has not seen yet
(chat/replytext.py), stores the reply with its LLM call records and runs the arm's per-turn memory
update (:func:`chat.memory_updates.after_turn`). Transient failures are retried with back-off until
the reply's deadline; a reply whose job is gone is re-enqueued (:func:`recover_replies`) or, past its
deadline, failed (:func:`fail_stale_replies`); the worker can retry a failed one (:func:`retry_reply`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from chat import (
    arms,
    budget,
    fragments,
    handover,
    jobs,
    leases,
    memory_updates,
    pacing,
    records,
    replytext,
    sqlcache,
    state,
)
from chat.errors import ChatError
from chat.models import REPLY_TOO_SLOW, ChatSession, Message
from chat.replytext import PromptLeakError
from chat.transcript import session_clock, turn_counts, turns_of
from memory.base import Prompt, Turn
from memory.hygiene import LeakCheck, end_at_sentence
from memory.llm import LLMError, LLMTransientError, RecordingLLM

log = logging.getLogger(__name__)

REPLY_TASK = "chat.tasks.generate_reply_task"
CEILING_RETRY_SECONDS = 5.0  # a reply that found the LLM call ceiling reached goes back to the queue this long


def enqueue_reply(message_id: int, *, countdown: float = 0) -> None:
    """Have the reply of a pending placeholder written (a Celery task, or :func:`generate_reply` here),
    after ``countdown`` seconds. A broker that is down is logged, not raised: the reply is enqueued
    again once it is overdue (:func:`recover_replies`). A placeholder claimed when it was inserted, for
    the job of this process (:func:`chat.turns.post_user_message`), gets its claim back if the job cannot start."""
    try:
        jobs.dispatch(REPLY_TASK, message_id, local=generate_reply, countdown=countdown)
    except Exception:  # kombu's errors when Redis is down; nothing is lost, the row is the truth
        log.warning("could not enqueue reply %s; it will be re-enqueued when overdue", message_id, exc_info=True)
        if (prepared := handover.take(message_id)) is not None:
            with contextlib.suppress(DatabaseError):
                Message.objects.filter(
                    pk=message_id, status=Message.Status.PENDING, attempts=prepared.msg.attempts
                ).update(lease_until=None, attempts=prepared.msg.attempts - 1)


def stale_reply_seconds() -> float:
    """How long a reply without a deadline (stored before deadlines existed) may stay pending before
    we assume its job died: every attempt timing out, plus the backoff, plus a margin."""
    delays = jobs.retry_delays()
    return (len(delays) + 1) * float(settings.LLM_TIMEOUT_SECONDS) + sum(delays) + 30


def fail_stale_replies(session: ChatSession) -> int:
    """Turn replies past their deadline into failed ones, so the worker gets a Retry button, not a
    wait forever. A live job fails its reply itself at the deadline; this catches the dead ones."""
    now = timezone.now()
    past = Q(deadline_at__lt=now - timedelta(seconds=leases.lease_seconds())) | Q(
        deadline_at__isnull=True, created_at__lt=now - timedelta(seconds=stale_reply_seconds())
    )
    return session.messages.filter(past, status=Message.Status.PENDING).update(
        status=Message.Status.FAILED, error=REPLY_TOO_SLOW, lease_until=None
    )


def recover_replies(session: ChatSession) -> int:
    """Enqueue again the pending replies whose job is gone (a lapsed lease: the worker or server died;
    or never started although due: a lost broker message, a failed enqueue). Safe to call often:
    each one is re-enqueued once per lease, and the job's claim keeps a reply from running twice."""
    fail_stale_replies(session)
    lost = leases.lost(due_field="due_at")
    ids = list(session.messages.filter(lost, status=Message.Status.PENDING).values_list("pk", flat=True))
    count = 0
    for pk in ids:
        if Message.objects.filter(lost, pk=pk, status=Message.Status.PENDING).update(
            lease_until=None, due_at=timezone.now()
        ):
            log.info("re-enqueueing reply %s of session %s: its job is gone", pk, session.pk)
            enqueue_reply(pk)
            count += 1
    return count


def retry_reply(session: ChatSession, seq: int) -> Message:
    """Manual retry of a failed reply: back to pending with a fresh attempt budget, then enqueued."""
    with transaction.atomic():
        ChatSession.objects.select_for_update().get(pk=session.pk)
        msg = session.messages.filter(seq=seq, speaker=Message.Speaker.BOT).first()
        if msg is None:
            raise ChatError("There is no such reply to retry.")
        if msg.status != Message.Status.FAILED:
            return msg
        if session.status != ChatSession.Status.CHATTING:
            raise ChatError("This session has ended.")
        now = timezone.now()
        msg.status, msg.attempts, msg.error = Message.Status.PENDING, 0, ""
        msg.deadline_at, msg.due_at, msg.lease_until = now + timedelta(seconds=jobs.reply_deadline_seconds()), now, None
        msg.requested_at = now  # the reply's pacing and latency count from the Retry button
        msg.save(update_fields=["status", "attempts", "error", "deadline_at", "due_at", "lease_until", "requested_at"])
        transaction.on_commit(lambda: enqueue_reply(msg.pk))
    return msg


class _Superseded(Exception):
    """Another job took this reply over (our lease lapsed): stop and write nothing."""


def generate_reply(message_id: int) -> None:
    """Write one attempt of the bot reply of a pending placeholder, streaming tokens to the sockets.

    The job claims the reply (a lease, chat/leases.py) before any LLM call, so a duplicate delivery
    does nothing, and a heartbeat keeps the claim while it streams. Transient LLM failures (timeout,
    429, 5xx, a stream that breaks off, empty or garbage output) are retried after the back-off of
    ``settings.CHAT_RETRY_DELAYS`` by enqueueing the job again with a countdown (no worker waits);
    the browser sees a "retrying" state meanwhile. The reply has an overall deadline
    (``settings.CHAT_REPLY_DEADLINE_SECONDS``): past it, or when the attempts are spent, or on a
    non-transient error, the placeholder becomes ``failed`` and the browser shows a Retry button.
    A reply cut at the token cap ends at its last complete sentence. Every LLM call is stored as an
    :class:`~chat.models.LLMCallRecord`. After a reply, the arm's ``after_turn`` runs (compare-and-set write).
    Database errors propagate, for the Celery task to retry.

    Blinding: a reply that recites its prompt (:class:`memory.hygiene.LeakCheck`) is caught while
    it streams (the last LEAK_MIN_WORDS words are held back until checked, so no leaked word is shown),
    and regenerated once within the same attempt (same lease, same deadline); a second leak fails the
    reply with ``error = "prompt leak: ..."`` and the Retry button. The leaked text stays only in the
    researcher's LLM call record.

    The bot's opening message of a session (a placeholder replying to nothing, see :func:`chat.sessions.add_opener`)
    is written from ``compose_opening``; no ``after_turn`` follows it.
    """
    prepared = handover.take(message_id)
    if prepared is not None:  # claimed when it was inserted, by this process (post_user_message)
        msg = prepared.msg
        held = sqlcache.Row(Message, msg.pk, status=Message.Status.PENDING, attempts=msg.attempts)
        try:
            _reply_attempt(msg, held, turns=prepared.turns, counted=(prepared.answered, prepared.failed))
        except DatabaseError:
            with contextlib.suppress(DatabaseError):
                held.update(lease_until=None)
            raise
        return
    msg = (
        Message.objects.select_related("session__episode__arm", "session__episode__participant__study")
        .defer("session__episode__memory_state")  # from chat.state's cache by state_version
        .get(pk=message_id)
    )
    session = msg.session
    if msg.status != Message.Status.PENDING or session.status != ChatSession.Status.CHATTING:
        return
    attempt = msg.attempts + 1
    if not leases.claim(
        Message.objects.filter(pk=msg.pk, status=Message.Status.PENDING, attempts=msg.attempts), attempts=attempt
    ):
        return  # another job is writing it (a duplicate delivery), or it moved on
    msg.attempts = attempt
    held = sqlcache.Row(Message, msg.pk, status=Message.Status.PENDING, attempts=attempt)
    try:
        _reply_attempt(msg, held)
    except DatabaseError:
        with contextlib.suppress(DatabaseError):  # the database may still be down: then the lease lapses
            held.update(lease_until=None)
        raise


def _reply_attempt(
    msg: Message, held: leases.Held, *, turns: list[Turn] | None = None, counted: tuple[int, int] | None = None
) -> None:
    """The claimed attempt ``msg.attempts`` of a reply (``held``: the row while we hold it); ``turns``
    (the session up to the message it answers) and ``counted`` (the worker's turns the bot answered
    before this one, and the bot's failed messages), when the caller has them already."""
    session = msg.session
    attempt = msg.attempts
    deadline = msg.deadline_at or msg.created_at + timedelta(seconds=jobs.reply_deadline_seconds())
    if timezone.now() >= deadline:
        _fail_reply(msg, held, REPLY_TOO_SLOW)
        return
    episode = session.episode
    try:
        system, llm = arms.build_arm(episode.arm, study=episode.participant.study)
    except DatabaseError:
        raise
    except Exception as exc:  # a misconfigured arm (unknown backend, missing model): retrying cannot help
        log.exception("reply %s: the arm of session %s could not be built", msg.pk, session.pk)
        _fail_reply(msg, held, f"{type(exc).__name__}: {exc}")
        return
    delays = jobs.retry_delays()
    max_attempts = len(delays) + 1
    # the parsed state of this version from the process cache (read and parsed only on a miss)
    start_state = state.for_reply(episode.pk, episode.state_version)
    memory = start_state[0]
    now = session_clock(session)
    opener = msg.reply_to_id is None  # the bot's first message of a session (see add_opener)
    prompt = None
    # blinding by timing: the reply is shown no sooner than the study's common schedule (chat/pacing.py)
    pacer = pacing.Pacer(pacing.schedule_for(episode.participant.study, msg.requested_at), msg.requested_at)
    try:
        with leases.heartbeat(held) as beat:
            if turns is None:
                turns = turns_of(session, upto_seq=msg.seq - 1)
            prompt = system.compose_opening(memory, now) if opener else system.compose(memory, turns, now)
            chat = [t.text for t in turns]
            for leaks in (1, 2):
                try:
                    text = _stream_reply(msg, llm, prompt, chat=chat, deadline=deadline, beat=beat, pacer=pacer)
                    break
                except PromptLeakError as exc:
                    if llm.calls:
                        llm.calls[-1].error = str(exc)
                    records.store_llm_calls(session.pk, msg.pk, llm.drain())
                    log.warning("reply %s of session %s: %s", msg.pk, session.pk, exc)
                    if leaks == 2:
                        _fail_reply(msg, held, str(exc))
                        return
                    # Regenerate once; the bubble is reset (nothing of the leak was shown).
                    jobs.broadcast(session.pk, fragments.message(msg))
    except _Superseded:
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        return
    except budget.CallLimitReached as exc:
        # The LLM call ceiling (chat/budget.py): no call was made. The attempt is given back and the reply
        # waits in the queue for a slot, until its deadline.
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        retry_at = timezone.now() + timedelta(seconds=CEILING_RETRY_SECONDS)
        if retry_at >= deadline:
            _fail_reply(msg, held, REPLY_TOO_SLOW)
        elif held.update(lease_until=None, due_at=retry_at, attempts=attempt - 1):
            log.info("reply %s waits for the LLM call limit: %s", msg.pk, exc)
            enqueue_reply(msg.pk, countdown=CEILING_RETRY_SECONDS)
        return
    except LLMError as exc:
        if llm.calls and not llm.calls[-1].error:
            llm.calls[-1].error = str(exc)  # the stream "succeeded" but its output was unusable
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        delay = delays[attempt - 1] if attempt < max_attempts else None
        retry_at = timezone.now() + timedelta(seconds=delay or 0)
        if isinstance(exc, LLMTransientError) and delay is not None and retry_at < deadline:
            if held.update(error=str(exc)[:500], lease_until=None, due_at=retry_at):
                msg.error = str(exc)
                jobs.broadcast(session.pk, fragments.message(msg, retrying=True, max_attempts=max_attempts))
                enqueue_reply(msg.pk, countdown=delay)
            return
        _fail_reply(msg, held, REPLY_TOO_SLOW if timezone.now() >= deadline else str(exc))
        return
    except DatabaseError:
        raise  # generate_reply releases the reply; the task retries
    except Exception as exc:  # a bug in an arm or a backend: fail visibly instead of staying pending
        log.exception("reply %s of session %s failed", msg.pk, session.pk)
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        _fail_reply(msg, held, f"{type(exc).__name__}: {exc}")
        return
    done = {"status": Message.Status.COMPLETE, "text": text, "error": "", "lease_until": None, **pacer.latencies()}
    memory_used = prompt.memory if prompt else []
    with transaction.atomic():  # one write transaction, not two (SQLite has one writer at a time)
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        updated = held.update(memory_used=memory_used, **done)  # compare-and-set on (pending, this attempt)
    if not updated:  # taken over meanwhile: show what the row holds
        msg.refresh_from_db()
        jobs.broadcast(session.pk, fragments.message(msg))
        return
    for field, value in done.items():
        setattr(msg, field, value)
    msg.memory_used = memory_used
    if counted is not None and not opener:
        counted = (counted[0] + 1, counted[1])  # this reply answers the worker's turn
    jobs.broadcast(session.pk, fragments.message(msg) + _controls(session, counted))
    if not opener:  # an opener follows no exchange to learn from
        after = [*(turns or []), Turn("bot", text, session.simulated_start)]
        memory_updates.after_turn(session, episode, system, llm, msg, now, start_state, after)


def _stream_reply(
    msg: Message,
    llm: RecordingLLM,
    prompt: Prompt,
    *,
    chat: list[str],
    deadline: datetime,
    beat: leases.Heartbeat,
    pacer: pacing.Pacer,
) -> str:
    """Stream one reply to the session's sockets and return its cleaned text.

    Pieces are pushed as they come, coalesced to one frame per ``CHAT_TOKEN_FLUSH_SECONDS`` (the
    first one at once), minus a held-back tail that is checked for prompt text first
    (:class:`PromptLeakError`, the stream closed); what is still held back at the end arrives with
    the final message. An arm may give its reply itself (``prompt.reply``, the quality-control arm):
    it is sent as is, with no LLM call and no leak check. ``pacer`` holds the text back to the study's
    schedule (chat/pacing.py): once the model is done, the rest is released at the schedule's speed before
    this returns, so the final message never arrives earlier than the schedule allows.
    """
    max_tokens = settings.LLM_MAX_TOKENS
    flush_every = float(getattr(settings, "CHAT_TOKEN_FLUSH_SECONDS", 0.05))
    fixed = prompt.reply
    stream: Iterator[str] = (
        iter([fixed]) if fixed is not None else llm.stream(prompt.as_dicts(), max_tokens=max_tokens, purpose="reply")
    )

    def stop() -> None:
        close = getattr(stream, "close", None)
        if close:
            close()  # stop the model writing the rest of a reply nobody will see

    prepared: list[LeakCheck] = []

    def leak_check() -> LeakCheck:  # prepared once per stream: the prompt and session are the costly part
        if not prepared:
            prepared.append(LeakCheck(prompt.messages, chat=chat))
        return prepared[0]

    pieces: list[str] = []
    shown = 0
    last_flush = 0.0
    pacer.begin()
    for piece in stream:
        if beat.lost:
            raise _Superseded()
        if timezone.now() >= deadline:  # a trickling stream: every read in time, the whole reply not
            stop()
            raise LLMError(REPLY_TOO_SLOW)
        pacer.piece()
        pieces.append(piece)
        if time.monotonic() - last_flush >= flush_every:
            so_far = "".join(pieces)
            if fixed is None and (leak := leak_check().find(so_far)) is not None:
                stop()
                raise PromptLeakError(leak)
            safe = pacer.release(replytext.shown_prefix(so_far) if fixed is None else len(so_far))
            if safe > shown:
                jobs.broadcast(msg.session_id, fragments.token(msg.seq, so_far[shown:safe]))
                shown = safe
            last_flush = time.monotonic()
    pacer.done()
    streamed = "".join(pieces)[:shown]
    text = replytext.check_reply("".join(pieces))
    if fixed is None:
        leak = leak_check().find(text)
        if leak is not None:
            raise PromptLeakError(leak)
        text = end_at_sentence(text, replytext.finish_reason(stream, len(pieces), max_tokens))
    # The rest at the schedule's speed; a final text that is not the shown text continued (cleaned, cut at a
    # sentence) replaces the bubble when the schedule has reached its end.
    on_page = shown if text.startswith(streamed) else len(text)
    if not pacer.drain(
        text,
        on_page,
        lambda part: jobs.broadcast(msg.session_id, fragments.token(msg.seq, part)),
        lost=lambda: beat.lost,
        step=flush_every,
    ):
        raise _Superseded()
    return text


def _fail_reply(msg: Message, held: leases.Held, error: str) -> None:
    """The reply's final failure: the worker gets the Retry button (and why, for a missed deadline)."""
    if held.update(status=Message.Status.FAILED, error=error[:500], lease_until=None):
        msg.refresh_from_db()
        jobs.broadcast(msg.session_id, fragments.message(msg) + _controls(msg.session, None))


def _controls(session: ChatSession, counted: tuple[int, int] | None) -> str:
    """The turn counter and End button once a reply is written or failed; ``counted`` (answered turns, failed
    messages) is counted here when not given: a failed, retried or recovered reply, or one written by a
    Celery worker."""
    pending = False
    if counted is None:
        counts = turn_counts(session)
        counted, pending = (counts.answered, counts.failed), counts.pending
    min_turns = session.episode.participant.study.min_user_turns
    return fragments.controls(counted[0], min_turns, pending=pending, failed=counted[1])
