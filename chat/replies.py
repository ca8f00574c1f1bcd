"""The bot's reply: a job of the runtime (kind ``chat.reply``, lane ``reply``), streamed to the session's
sockets, retried, failed visibly.

A reply is a pending placeholder :class:`Message` stored with the worker's message
(:func:`chat.turns.post_user_message`) or as a session's opener (:func:`chat.sessions.add_opener`), and
its job is submitted in the same transaction (:func:`submit_reply`). One attempt (:func:`generate_reply`)
streams the arm's reply token by token (:func:`runtime.push.broadcast`), holds back what the leak check
has not seen yet (chat/replytext.py), stores the reply with its LLM call records and runs the arm's
per-turn memory update (:func:`chat.memory_updates.after_turn`). Transient failures are retried by the
runtime with the kind's policy (:data:`REPLY`: ``CHAT_RETRY_DELAYS`` within ``CHAT_REPLY_DEADLINE_SECONDS``);
a failure for good turns the placeholder into a failed message with the Retry button, in the same
commit (:func:`_failed`). A reply whose job is gone is taken back by the runtime's sweeper
(:func:`recover_replies` asks for it); the worker can retry a failed one (:func:`retry_reply`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from chat import arms, budget, fragments, memory_updates, pacing, records, replytext, state
from chat.errors import ChatError
from chat.models import REPLY_TOO_SLOW, ChatSession, Message
from chat.replytext import PromptLeakError
from chat.transcript import SESSION_MESSAGES, exchange_before, session_clock, turn_counts
from infra import clock as dbclock
from infra import sqlcache
from memory.base import Prompt, Turn
from memory.hygiene import LeakCheck, end_at_sentence
from memory.llm import LLMError, LLMTransientError, time_limit
from memory.llmwrap import RecordingLLM
from runtime import jobs, kinds, push, sweeper
from runtime.jobs import Attempt, DeadlineExceeded
from runtime.models import DEADLINE_ERROR, Job

log = logging.getLogger(__name__)

#: The clock of a stream's speed checks (monotonic: a step of the wall clock neither cuts nor stretches one).
clock = time.monotonic
#: A reply that found the LLM call ceiling reached (chat/budget.py) goes back to the queue at least this long.
CEILING_RETRY_SECONDS = 5.0


def reply_deadline_seconds() -> float:
    """The overall time a reply may take, retries included (``settings.CHAT_REPLY_DEADLINE_SECONDS``)."""
    return float(settings.CHAT_REPLY_DEADLINE_SECONDS)


def reply_policy() -> kinds.RetryPolicy:
    """A reply's retries: after each transient failure (of the LLM or the embedder: an outage, a 429, a
    stall, a stream too slow) the next wait of ``CHAT_RETRY_DELAYS`` (the last repeats, each with
    ``CHAT_RETRY_JITTER``; an endpoint's ``Retry-After`` is the least wait), as often as the reply's
    deadline allows (``CHAT_REPLY_DEADLINE_SECONDS`` after it was asked for; ``CHAT_RETRY_MAX_ATTEMPTS``
    limits the attempts too when set): an outage shorter than the deadline costs no Retry click."""
    delays = tuple(float(x) for x in settings.CHAT_RETRY_DELAYS)
    most = int(getattr(settings, "CHAT_RETRY_MAX_ATTEMPTS", 0) or 0)  # 0: the deadline is the only limit
    return kinds.RetryPolicy(
        max_attempts=most or None, backoff=delays, jitter=float(settings.CHAT_RETRY_JITTER),
        deadline=reply_deadline_seconds(), transient=(LLMTransientError, budget.CallLimitReached),
    )  # fmt: skip


@dataclass(frozen=True)
class StreamLimits:
    """What one attempt's stream may take before it gives its slot back (cut, and retried by the policy):
    ``stall`` seconds without a piece (each read, the first token's included), fewer than ``min_rate``
    pieces a second once ``grace`` seconds have passed since its first piece, ``attempt`` seconds in all.
    ``max_tokens`` pieces (and ``max_tokens * CHARS_PER_TOKEN`` characters) are the most that is kept."""

    stall: float
    grace: float
    min_rate: float
    attempt: float
    max_tokens: int

    @classmethod
    def from_settings(cls) -> StreamLimits:
        return cls(
            stall=float(settings.CHAT_STALL_SECONDS), grace=float(settings.CHAT_STREAM_GRACE_SECONDS),
            min_rate=float(settings.CHAT_MIN_TOKENS_PER_SECOND), attempt=float(settings.CHAT_ATTEMPT_SECONDS),
            max_tokens=int(settings.LLM_MAX_TOKENS),
        )  # fmt: skip


#: An endpoint that ignores ``max_tokens`` is cut here too: a token is rarely longer than this many characters.
CHARS_PER_TOKEN = 8


class StreamTooSlow(LLMTransientError):
    """The stream stalled, trickled below the least rate, or ran past the attempt's bound: the attempt is
    cut (its slot goes to the next reply) and retried after the policy's wait."""


@dataclass
class Prepared:
    """What the chat turn that stored a reply's placeholder hands to this process's run of its job
    (runtime/handover.py), so that the run neither claims nor reads them again."""

    msg: Message  # .session.episode (.arm, .participant.study) loaded, .memory_state deferred (chat.state)
    turns: list[Turn]  # the session up to the user message it answers, as the arm sees it
    answered: int  # the worker's turns the bot answered before this one (what the session's minimum counts)
    failed: int  # the bot's failed messages in the session


def submit_reply(msg: Message, study_id: int, *, hand: Prepared | None = None, fresh: bool = True) -> Job:
    """Submit the job that writes the reply of placeholder ``msg`` (inside the transaction that stored it;
    it runs after the commit). ``hand``: what the caller read, for this process's run."""
    return jobs.submit(
        REPLY, msg.pk, scope=f"study:{study_id}", label=f"reply {msg.seq} in chat session {msg.session_id}",
        hand=hand, fresh=fresh, now=dbclock.now(), deadline=reply_deadline_seconds(),  # the policy's, not built
    )  # fmt: skip


def reply_jobs(messages: list[int]) -> Any:
    """The reply jobs of these placeholders."""
    return Job.objects.filter(kind=REPLY.name, target__in=[str(pk) for pk in messages])


def recover_replies(session: ChatSession) -> int:
    """Take back the session's pending replies whose job is gone (the runtime's sweeper: a lapsed lease,
    a job never started a grace after it was due): sent again within their deadline, failed with the
    Retry button past it. Safe to call often: each compare-and-set takes a lost job back once."""
    pending = list(
        session.messages.filter(status=Message.Status.PENDING, speaker=Message.Speaker.BOT).values_list("pk", flat=True)
    )
    if not pending:
        return 0
    return len(sweeper.sweep(reply_jobs(pending)))


def fail_stale_replies(session: ChatSession) -> int:
    """What :func:`recover_replies` does, for the checks that refuse a message or an end while a reply is
    pending: a reply whose job died past its deadline must not keep the session waiting."""
    return recover_replies(session)


def retry_reply(session: ChatSession, seq: int) -> Message:
    """Manual retry of a failed reply: back to pending, with a new job (a fresh attempt budget and deadline)."""
    with transaction.atomic():
        ChatSession.objects.select_for_update().get(pk=session.pk)
        msg = session.messages.filter(seq=seq, speaker=Message.Speaker.BOT).first()
        if msg is None:
            raise ChatError("There is no such reply to retry.")
        if msg.status != Message.Status.FAILED:
            return msg
        if session.status != ChatSession.Status.CHATTING:
            raise ChatError("This session has ended.")
        msg.status, msg.error = Message.Status.PENDING, ""
        msg.requested_at = timezone.now()  # the reply's pacing and latency count from the Retry button
        msg.save(update_fields=["status", "error", "requested_at"])
        study_id = session.episode.participant.study_id
        jobs.submit(REPLY, msg.pk, scope=f"study:{study_id}", label=f"reply {msg.seq} in chat session {session.pk}")
    return msg


class ReplyFailed(Exception):
    """The reply cannot be written on this attempt and retrying cannot help (a misconfigured arm, a bug)."""


def generate_reply(job: Job, attempt: Attempt, handed: Prepared | None) -> None:
    """One attempt at the bot reply of a pending placeholder (the run of a ``chat.reply`` job), streaming
    tokens to the sockets.

    The runtime has claimed the job (a duplicate delivery does nothing) and keeps its lease while it
    streams. A transient LLM failure (timeout, 429, 5xx, a stream that breaks off, empty or garbage
    output) raises, and the runtime retries it after the policy's wait (:func:`reply_policy`; the
    browser sees a "retrying" state meanwhile); past the deadline, when the attempts are spent, or on a
    non-transient error, the placeholder becomes ``failed`` and the browser shows a Retry button. A reply
    cut at the token cap ends at its last complete sentence. Every LLM call is stored as an
    :class:`~chat.models.LLMCallRecord`. After a reply, the arm's ``after_turn`` runs (compare-and-set write).

    Blinding: a reply that recites its prompt (:class:`memory.hygiene.LeakCheck`) is caught while it
    streams (the last LEAK_MIN_WORDS words are held back until checked, so no leaked word is shown), and
    regenerated once within the same attempt (same lease, same deadline); a second leak fails the reply
    with ``error = "prompt leak: ..."`` and the Retry button. The leaked text stays only in the
    researcher's LLM call record.

    The bot's opening message of a session (a placeholder replying to nothing, see
    :func:`chat.sessions.add_opener`) is written from ``compose_opening``; no ``after_turn`` follows it.
    """
    if handed is not None:  # stored by this process's chat turn, with what it read
        _reply_attempt(handed.msg, attempt, turns=handed.turns, counted=(handed.answered, handed.failed))
        return
    found = _REPLY_MESSAGE.objects(message_id=int(job.target))
    if not found:
        raise Message.DoesNotExist(f"no message {job.target}")
    msg: Message = found[0]
    if msg.status != Message.Status.PENDING or msg.session.status != ChatSession.Status.CHATTING:
        return  # nothing to write any more (the session ended, the reply was written)
    rows = SESSION_MESSAGES.rows(session_id=msg.session_id)
    turns, answered, failed = exchange_before(rows, msg.seq, msg.session.simulated_start)
    # a retried earlier reply (the worker went on after it failed): the counts it pushes are the whole
    # session's, counted when it is written (the turns after it, another reply pending)
    later = bool(rows) and rows[-1][1] > msg.seq
    _reply_attempt(msg, attempt, turns=turns, counted=None if later else (answered, failed))


#: A reply's placeholder with what its attempt needs (a job run without a hand-over: a Celery worker, a retry,
#: a job taken back), compiled once per process like the chat turn's statements (infra/sqlcache.py).
_REPLY_MESSAGE = sqlcache.CachedQuery(
    lambda message_id: (
        Message.objects.select_related("session__episode__arm", "session__episode__participant__study")
        .defer("session__episode__memory_state")  # from chat.state's cache by state_version
        .filter(pk=message_id)
    ),
    message_id=int,
)


def _reply_attempt(msg: Message, attempt: Attempt, *, turns: list[Turn], counted: tuple[int, int] | None) -> None:
    """The claimed attempt at a reply: ``turns`` is the session up to the message it answers, ``counted`` the
    worker's turns the bot answered before this one and the bot's failed messages (``None``: counted again
    when the reply is written)."""
    session = msg.session
    episode = session.episode
    try:
        system, llm = arms.build_arm(episode.arm, study=episode.participant.study)
    except DatabaseError:
        raise
    except Exception as exc:  # a misconfigured arm (unknown backend, missing model): retrying cannot help
        log.exception("reply %s: the arm of session %s could not be built", msg.pk, session.pk)
        raise ReplyFailed(f"{type(exc).__name__}: {exc}") from exc
    # the parsed state of this version from the process cache (read and parsed only on a miss)
    start_state = state.for_reply(episode.pk, episode.state_version)
    memory = start_state[0]
    now = session_clock(session)
    opener = msg.reply_to_id is None  # the bot's first message of a session (see add_opener)
    prompt = None
    limits = StreamLimits.from_settings()
    ends = clock() + limits.attempt  # this attempt's bound, on the monotonic clock

    def read_limit() -> float:
        # every request of this attempt (retrieval's embeddings, the reply's stream): each read at most
        # the stall bound, never past the attempt's bound or the reply's deadline
        deadline = attempt.remaining()
        return min(limits.stall, ends - clock(), deadline if deadline is not None else limits.stall)

    # blinding by timing: the reply is shown no sooner than the study's common schedule (chat/pacing.py)
    pacer = pacing.Pacer(pacing.schedule_for(episode.participant.study, msg.requested_at), msg.requested_at)
    try:
        with time_limit(read_limit):
            prompt = system.compose_opening(memory, now) if opener else system.compose(memory, turns, now)
        chat = [t.text for t in turns]
        for leaks in (1, 2):
            try:
                with time_limit(read_limit):
                    text = _stream_reply(
                        msg, llm, prompt, chat=chat, attempt=attempt, pacer=pacer, limits=limits, ends=ends
                    )
                break
            except PromptLeakError as exc:
                if llm.calls:
                    llm.calls[-1].error = str(exc)
                records.store_llm_calls(session.pk, msg.pk, llm.drain())
                log.warning("reply %s of session %s: %s", msg.pk, session.pk, exc)
                if leaks == 2:
                    raise
                # Regenerate once; the bubble is reset (nothing of the leak was shown).
                push.broadcast(session.pk, fragments.message(msg))
    except (LLMError, DeadlineExceeded) as exc:
        if llm.calls and (not llm.calls[-1].error or isinstance(exc, StreamTooSlow)):
            llm.calls[-1].error = str(exc)  # the stream "succeeded" (or was closed) but was unusable
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        raise
    except budget.CallLimitReached as exc:
        # The LLM call ceiling (chat/budget.py): no call was made. The reply goes back to the queue for a
        # slot (a transient error of the reply's policy, waiting at least CEILING_RETRY_SECONDS), until its
        # deadline.
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        left = attempt.remaining()
        if left is not None and left <= CEILING_RETRY_SECONDS:  # no slot before the deadline: the reply was too slow
            raise DeadlineExceeded(DEADLINE_ERROR) from exc
        log.info("reply %s waits for the LLM call limit: %s", msg.pk, exc)
        exc.retry_after = CEILING_RETRY_SECONDS
        raise
    except PromptLeakError:
        raise
    except jobs.JobLost:
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        raise
    except Exception as exc:  # a bug in an arm or a backend: fail visibly instead of staying pending
        if isinstance(exc, DatabaseError):
            raise
        log.exception("reply %s of session %s failed", msg.pk, session.pk)
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        raise ReplyFailed(f"{type(exc).__name__}: {exc}") from exc
    done = {"status": Message.Status.COMPLETE, "text": text, "error": "", **pacer.latencies()}
    memory_used = prompt.memory if prompt else []
    with transaction.atomic():  # one write transaction, not two (SQLite has one writer at a time)
        records.store_llm_calls(session.pk, msg.pk, llm.drain())
        mine = attempt.complete()  # compare-and-set on this attempt's claim of the job
        if mine:
            sqlcache.update_where(
                Message, msg.pk, {"status": Message.Status.PENDING}, {"memory_used": memory_used, **done}
            )
    if not mine:  # taken over meanwhile: show what the row holds
        msg.refresh_from_db()
        push.broadcast(session.pk, fragments.message(msg))
        return
    for field, value in done.items():
        setattr(msg, field, value)
    msg.memory_used = memory_used
    if counted is not None and not opener:
        counted = (counted[0] + 1, counted[1])  # this reply answers the worker's turn
    push.broadcast(session.pk, fragments.message(msg) + _controls(session, counted))
    if not opener:  # an opener follows no exchange to learn from
        after = [*turns, Turn("bot", text, session.simulated_start)]
        memory_updates.after_turn(session, episode, system, llm, msg, now, start_state, after)


def _stream_reply(
    msg: Message,
    llm: RecordingLLM,
    prompt: Prompt,
    *,
    chat: list[str],
    attempt: Attempt,
    pacer: pacing.Pacer,
    limits: StreamLimits | None = None,
    ends: float | None = None,
) -> str:
    """Stream one reply to the session's sockets and return its cleaned text.

    Pieces are pushed as they come, coalesced to one frame per ``CHAT_TOKEN_FLUSH_SECONDS`` (the
    first one at once), minus a held-back tail that is checked for prompt text first
    (:class:`PromptLeakError`, the stream closed); what is still held back at the end arrives with
    the final message. An arm may give its reply itself (``prompt.reply``, the quality-control arm):
    it is sent as is, with no LLM call and no leak check. ``pacer`` holds the text back to the study's
    schedule (chat/pacing.py): once the model is done, the rest is released at the schedule's speed before
    this returns, so the final message never arrives earlier than the schedule allows.

    A stream of an endpoint that stalls, trickles or runs past the attempt's bound (``limits``, ``ends`` on
    the monotonic clock) raises :class:`StreamTooSlow` (the in-process model's speed is this machine's: not
    checked). At ``max_tokens`` pieces, or that many tokens' worth of characters (an endpoint that ignores
    ``max_tokens``), the stream is closed and the reply cut back to its last complete sentence: no more
    than the cap is shown or stored.
    """
    limits = limits or StreamLimits.from_settings()
    max_tokens = limits.max_tokens
    max_chars = max_tokens * CHARS_PER_TOKEN
    ends = ends if ends is not None else clock() + limits.attempt
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

    # the speed checks are for an endpoint (another try may be faster, and the slot is wanted): not for a reply
    # the arm gives itself, nor for the in-process model, whose speed is this machine's
    checked = fixed is None and not getattr(getattr(llm, "inner", llm), "in_process", False)
    pieces: list[str] = []
    chars = 0
    capped = False
    shown = 0
    last_flush = 0.0
    first: float | None = None
    pacer.begin()
    for piece in stream:
        attempt.check()  # raises JobLost once another run took the reply over
        if attempt.expired():  # a trickling stream: every read in time, the whole reply not
            stop()
            raise DeadlineExceeded(REPLY_TOO_SLOW)
        now = clock()
        first = now if first is None else first
        if checked and (slow := _too_slow(len(pieces), now - first, now, ends, limits)):
            stop()
            raise StreamTooSlow(slow)
        pacer.piece()
        pieces.append(piece)
        chars += len(piece)
        if fixed is None and (len(pieces) >= max_tokens or chars >= max_chars):
            capped = True  # the cap holds whatever the endpoint does with max_tokens
            stop()
            break
        if time.monotonic() - last_flush >= flush_every:
            so_far = "".join(pieces)
            if fixed is None and (leak := leak_check().find(so_far)) is not None:
                stop()
                raise PromptLeakError(leak)
            safe = pacer.release(replytext.shown_prefix(so_far) if fixed is None else len(so_far))
            if safe > shown:
                push.broadcast(msg.session_id, fragments.token(msg.seq, so_far[shown:safe]))
                shown = safe
            last_flush = time.monotonic()
    pacer.done()
    streamed = "".join(pieces)[:shown]
    text = replytext.check_reply("".join(pieces)[: max_chars if fixed is None else None])
    if fixed is None:
        leak = leak_check().find(text)
        if leak is not None:
            raise PromptLeakError(leak)
        reason = "length" if capped else replytext.finish_reason(stream, len(pieces), max_tokens)
        text = end_at_sentence(text, reason)
    # The rest at the schedule's speed; a final text that is not the shown text continued (cleaned, cut at a
    # sentence) replaces the bubble when the schedule has reached its end.
    on_page = shown if text.startswith(streamed) else len(text)
    if not pacer.drain(
        text,
        on_page,
        lambda part: push.broadcast(msg.session_id, fragments.token(msg.seq, part)),
        lost=lambda: attempt.beat.lost,
        step=flush_every,
    ):
        raise jobs.JobLost(f"reply {msg.pk} was taken over while its rest was shown")
    return text


def _too_slow(pieces: int, streaming: float, now: float, ends: float, limits: StreamLimits) -> str:
    """Why the stream should give its slot back now ("" when it should not): past the attempt's bound, or
    fewer than ``min_rate`` pieces a second once ``grace`` seconds have passed since its first piece.
    A stream that stops sending is caught by the read timeout (``stall``, memory.llm.time_limit)."""
    if now >= ends:
        return f"the reply took longer than {limits.attempt:.0f} s on this attempt"
    if limits.min_rate > 0 and streaming >= limits.grace and pieces / streaming < limits.min_rate:
        return f"the reply streamed too slowly ({pieces / streaming:.1f} tokens/s, the least is {limits.min_rate:g})"
    return ""


def _retrying(job: Job, error: BaseException, wait: float) -> None:
    """A failed attempt will be retried: the bubble says so, with the attempt counter."""
    msg = Message.objects.filter(pk=int(job.target), status=Message.Status.PENDING).first()
    if msg is not None:
        html = fragments.message(msg, retrying=True, attempt=job.attempts + 1, max_attempts=reply_policy().max_attempts)
        push.broadcast(msg.session_id, html)


def _failed(job: Job, error: str) -> None:
    """The reply's job failed for good (inside its transaction): the placeholder becomes a failed
    message, and after the commit the worker gets the Retry button (and why, for a missed deadline)."""
    past = error == DEADLINE_ERROR or (job.deadline_at is not None and dbclock.now() >= job.deadline_at)
    text = REPLY_TOO_SLOW if past else error
    if not Message.objects.filter(pk=int(job.target), status=Message.Status.PENDING).update(
        status=Message.Status.FAILED, error=text[:500]
    ):
        return
    msg = Message.objects.select_related("session__episode__participant__study").get(pk=int(job.target))
    html = fragments.message(msg) + _controls(msg.session, None)
    transaction.on_commit(lambda: push.broadcast(msg.session_id, html))


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


REPLY = kinds.declare(
    "chat.reply", lane="reply", run=generate_reply, retry=reply_policy, label="bot reply",
    on_retry=_retrying, on_failure=_failed,
)  # fmt: skip
