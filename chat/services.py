"""The live chat study's workflows, shared by the worker views, the websocket consumer and the tasks.

A chat turn flows like this::

    browser --ws--> ChatConsumer.receive --> post_user_message()   (user row + bot placeholder, committed)
                                         --> ack (the user's message, with its seq) back to the browser
            on_commit --> enqueue_reply() --> generate_reply()      (Celery task, or a thread when embedded)
                          tokens --> jobs.broadcast() --> channel group --> every socket of the session
                          final reply committed to the DB, then broadcast; after_turn() of the arm

Nothing is ever only in a socket: a browser that reconnects sends the last seq it saw and gets every
later message from the database (:func:`messages_after`), including a reply generated while it was away.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import BooleanField, Count, ExpressionWrapper, Max, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from chat import fragments, leases, limits, records, replies, sqlcache, state
from chat.authenticity import Signals, clean_signals, store_signals
from chat.jobs import broadcast, dispatch, job_mode, retry_delays
from chat.models import (
    PROMPT_LEAK_ERROR,
    REPLY_TOO_SLOW,
    AttentionResponse,
    ChatSession,
    Episode,
    LLMCallRecord,
    MemorySnapshot,
    Message,
    Rating,
)
from memory.base import MemorySystem, Prompt, Turn
from memory.embed import Embedder, make_embedder
from memory.hygiene import LEAK_MIN_WORDS, LeakCheck, PromptLeak, end_at_sentence
from memory.llm import LLM, LLMError, LLMTransientError, RecordingLLM, make_llm
from memory.registry import build_system
from studies.models import Arm, Participant, Study

log = logging.getLogger(__name__)
A = TypeVar("A", bound=Arm)


class ChatError(Exception):
    """A request the worker can fix or should be told about (shown verbatim, never a server error)."""


def reply_deadline_seconds() -> float:
    """The overall time a reply may take, retries included (``settings.CHAT_REPLY_DEADLINE_SECONDS``)."""
    return float(settings.CHAT_REPLY_DEADLINE_SECONDS)


# ------------------------------------------------------------------------------------------- arms


def build_llm(arm: Arm) -> LLM:
    """The arm's LLM: ``arm.llm_backend``/``llm_model``, else the site default (the one patch point
    tests use to script replies and failures)."""
    backend = arm.llm_backend or settings.LLM_BACKEND
    model = arm.llm_model or settings.LLM_MODEL
    return make_llm(backend, model, **endpoint_options(backend))


def endpoint_options(backend: str) -> dict[str, Any]:
    """The site's OpenAI-compatible endpoint, for the backends that call one."""
    if backend != "openai":
        return {}
    return {
        "api_key": settings.OPENAI_API_KEY,
        "base_url": settings.OPENAI_BASE_URL,
        # each read is bounded by the timeout: never longer than a whole reply may take
        "timeout": min(float(settings.LLM_TIMEOUT_SECONDS), reply_deadline_seconds()),
    }


_EMBEDDERS: dict[str, Embedder] = {}
_EMBEDDER_LOCK = threading.Lock()


def get_embedder() -> Embedder:
    """The site's embedder (``settings.EMBEDDER``, ``EMBEDDING_MODEL``; the openai one on the site's
    endpoint and key), one per process: wordllama loads its weights once."""
    backend, model = settings.EMBEDDER, settings.EMBEDDING_MODEL
    options = endpoint_options(backend)
    key = f"{backend}:{model}:{options.get('base_url', '')}"
    with _EMBEDDER_LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = make_embedder(backend, model, **options)
        return _EMBEDDERS[key]


def build_arm(arm: Arm) -> tuple[MemorySystem, RecordingLLM]:
    """The arm's memory system, built on a recording wrapper of its LLM."""
    llm = RecordingLLM(build_llm(arm))
    system = build_system(arm.memory_system, llm=llm, embedder=get_embedder(), **(arm.params or {}))
    return system, llm


# ------------------------------------------------------------------------------------- assignment


class NoArmAvailable(ChatError):
    pass


def assign_episode(participant: Participant) -> Episode:
    """Start the participant's next episode with an arm drawn at random among the least-used arms.

    Balanced over active + completed episodes of the study; an arm the participant already had is
    never drawn again. The study row is locked while counting, so two workers starting at the same
    moment see each other's episodes (on PostgreSQL; SQLite serialises writers anyway).
    Raises :class:`NoArmAvailable` when the participant has used every active arm.
    """
    with transaction.atomic():
        study = Study.objects.select_for_update().get(pk=participant.study_id)
        current = participant.episodes.filter(status=Episode.Status.ACTIVE).first()
        if current:
            return current
        used = set(participant.episodes.values_list("arm_id", flat=True))
        arms = list(
            study.arms.filter(active=True)
            .exclude(pk__in=used)
            .annotate(
                n=Count(
                    "episodes",
                    filter=Q(episodes__status__in=[Episode.Status.ACTIVE, Episode.Status.COMPLETED]),
                )
            )
        )
        arms = _qc_draw(participant, study, arms)
        if not arms:
            raise NoArmAvailable("There is no further conversation for you in this study.")
        least = min(a.n for a in arms)
        arm = random.choice([a for a in arms if a.n == least])
        system, _ = build_arm(arm)
        index = (participant.episodes.aggregate(m=Max("index"))["m"] or 0) + 1
        episode = Episode.objects.create(
            participant=participant, arm=arm, index=index, memory_state=system.initial_state()
        )
        ChatSession.objects.create(
            episode=episode, index=1, status=ChatSession.Status.READY, simulated_start=study.session_start(1)
        )
    return episode


def _qc_draw(participant: Participant, study: Study, arms: list[A]) -> list[A]:
    """The candidates once the quality-control arm is placed: every worker meets it in exactly one whole
    episode, at a uniformly random position among their episodes (docs/worker-quality.md, "QC arm").

    While the worker has not had it, it is drawn with probability 1 / (episodes still to do), and it is
    the only candidate for their last episode; otherwise it is never a candidate. A study with one
    episode per worker cannot run the QC test (studies.forms.qc_design_problem), so there the QC arm
    is never drawn."""
    qc = [a for a in arms if a.is_qc]
    if not qc:
        return arms
    others = [a for a in arms if not a.is_qc]
    remaining = int(study.episodes_per_worker) - participant.episodes.count()
    if study.episodes_per_worker < 2 or remaining < 1:
        return others
    if remaining == 1 or not others or random.random() < 1 / remaining:
        return qc[:1]
    return others


def episodes_left(participant: Participant) -> bool:
    """Whether the participant still has an episode to do (a further arm exists and the quota of
    episodes per worker is not reached)."""
    study = participant.study
    done = participant.episodes.count()
    if done >= study.episodes_per_worker:
        return False
    used = participant.episodes.values_list("arm_id", flat=True)
    return study.arms.filter(active=True).exclude(pk__in=used).exists()


def current_session(participant: Participant) -> ChatSession | None:
    """The first session of the participant's active episode that is not rated yet."""
    episode = participant.episodes.filter(status=Episode.Status.ACTIVE).order_by("index").first()
    if episode is None:
        return None
    return episode.sessions.exclude(status=ChatSession.Status.DONE).order_by("index").first()


class StudyClosed(ChatError):
    pass


def next_session(participant: Participant) -> ChatSession | None:
    """Where the participant is: the current session, or the first of a new episode (a fresh arm)
    when the last one is over; ``None`` when nothing is left for them. Raises :class:`StudyClosed`
    when a new episode would be needed while the study is a draft again."""
    session = current_session(participant)
    if session is not None:
        return session
    if participant.completed_at or not episodes_left(participant):
        return None
    if participant.study.status == Study.Status.DRAFT:
        raise StudyClosed("This study is not taking participants at the moment.")
    try:
        assign_episode(participant)
    except NoArmAvailable:
        return None
    return current_session(participant)


def finish_participant(participant: Participant) -> bool:
    """Record that the participant has finished the study (idempotent); ``False`` while they still
    have a session to do."""
    if participant.completed_at is not None:
        return True
    if current_session(participant) is not None or episodes_left(participant):
        return False
    participant.completed_at = timezone.now()
    participant.save(update_fields=["completed_at"])
    return True


# ------------------------------------------------------------------------------------ the session


def session_clock(session: ChatSession) -> datetime:
    """The bot's clock: the session's simulated start plus the real time spent chatting."""
    if session.started_at is None:
        return session.simulated_start
    return session.simulated_start + (timezone.now() - session.started_at)


class ReplyPending(ChatError):
    """The session cannot end while the bot's reply is being written."""


class RateFirst(ChatError):
    """A later session cannot open before the earlier ones of its episode are rated."""

    def __init__(self, unrated: ChatSession) -> None:
        super().__init__(_rate_first(unrated))
        self.unrated = unrated


def _rate_first(unrated: ChatSession) -> str:
    return _rate_first_index(unrated.index)


def _rate_first_index(index: int) -> str:
    return f"Please rate session {index} before you continue."


def unrated_earlier(session: ChatSession) -> ChatSession | None:
    """The first earlier session of the episode that is not rated yet (``None`` when all are)."""
    return (
        ChatSession.objects.filter(episode_id=session.episode_id, index__lt=session.index)
        .exclude(status=ChatSession.Status.DONE)
        .order_by("index")
        .first()
    )


def start_session(session: ChatSession) -> ChatSession:
    """Mark a ready session as chatting (idempotent). Raises :class:`RateFirst` while an earlier
    session of the episode is not rated. The bot's opening message is enqueued when it starts."""
    unrated = unrated_earlier(session)
    if unrated is not None:
        raise RateFirst(unrated)
    if session.status == ChatSession.Status.READY:
        with transaction.atomic():
            started = ChatSession.objects.filter(pk=session.pk, status=ChatSession.Status.READY).update(
                status=ChatSession.Status.CHATTING, started_at=timezone.now()
            )
            if started:
                add_opener(session)
        session.refresh_from_db()
    return session


def opens_with_bot(session: ChatSession) -> bool:
    """Whether the bot writes this session's first message: every session after the first, when
    the study says so (Keep Me Updated's protocol: the bot brings up what it remembers)."""
    return session.index > 1 and session.episode.participant.study.bot_opens_sessions


def add_opener(session: ChatSession) -> Message | None:
    """The pending placeholder of the bot's opening message (seq 1, replying to nothing), enqueued
    after commit; None when the worker writes first or the session has messages already."""
    if not opens_with_bot(session) or session.messages.exists():
        return None
    bot = Message.objects.create(session=session, seq=1, speaker=Message.Speaker.BOT, status=Message.Status.PENDING)
    transaction.on_commit(lambda: enqueue_reply(bot.pk))
    return bot


def user_turns(session: ChatSession) -> int:
    return session.messages.filter(speaker=Message.Speaker.USER).count()


def turn_counts(session: ChatSession) -> tuple[int, bool]:
    """The worker's messages in the session, and whether a reply is pending (one query)."""
    counts = session.messages.aggregate(
        users=Count("pk", filter=Q(speaker=Message.Speaker.USER)),
        pending=Count("pk", filter=Q(speaker=Message.Speaker.BOT, status=Message.Status.PENDING)),
    )
    return int(counts["users"]), counts["pending"] > 0


def reply_pending(session: ChatSession) -> bool:
    """Whether the bot is still writing a reply in this session."""
    return session.messages.filter(speaker=Message.Speaker.BOT, status=Message.Status.PENDING).exists()


def turns_of(session: ChatSession, *, upto_seq: int | None = None) -> list[Turn]:
    """The session as the memory systems see it: user messages and completed bot replies, in order."""
    qs = session.messages.filter(Q(speaker=Message.Speaker.USER) | Q(status=Message.Status.COMPLETE))
    if upto_seq is not None:
        qs = qs.filter(seq__lte=upto_seq)
    at = session.simulated_start
    rows = qs.order_by("seq").values_list("speaker", "text")
    return [Turn("user" if speaker == Message.Speaker.USER else "bot", text, at) for speaker, text in rows]


def stale_reply_seconds() -> float:
    """How long a reply without a deadline (stored before deadlines existed) may stay pending before
    we assume its job died: every attempt timing out, plus the backoff, plus a margin."""
    delays = retry_delays()
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


def messages_after(session: ChatSession, last_seq: int) -> list[Message]:
    """Every message of the session after ``last_seq`` (what a reconnecting browser missed)."""
    return list(session.messages.filter(seq__gt=last_seq).order_by("seq"))


def _lock_query() -> sqlcache.CachedQuery:
    """The session row locked (on PostgreSQL ``OF`` the session only) with everything the checks of a new
    message need: its episode, arm, participant and study, the first earlier session not yet rated, and
    the participant's user messages in other sessions (limits). The episode's memory state is deferred:
    the reply takes it from chat.state's cache by ``state_version`` (it can be large)."""

    def build(session_id: int, since: datetime) -> QuerySet[ChatSession]:
        query = (
            ChatSession.objects.select_for_update(of=("self",))
            .select_related("episode__participant__study", "episode__arm")
            .annotate(
                unrated_index=Subquery(
                    ChatSession.objects.filter(episode_id=OuterRef("episode_id"), index__lt=OuterRef("index"))
                    .exclude(status=ChatSession.Status.DONE)
                    .order_by("index")
                    .values("index")[:1]
                ),
                recent_elsewhere=limits.recent_elsewhere(OuterRef("pk"), OuterRef("episode__participant_id"), since),
                stored_elsewhere=limits.stored_elsewhere(OuterRef("pk"), OuterRef("episode__participant_id")),
            )
            .filter(pk=session_id)
            .defer("episode__memory_state")
        )
        return query

    return sqlcache.CachedQuery(build, session_id=int, since=datetime)


_LOCK = _lock_query()

# (pk, seq, speaker, status, client_id, text, sent since the minute's start) of a session's messages
_SESSION_MESSAGES = sqlcache.CachedQuery(
    lambda session_id, since: (
        Message.objects.filter(session_id=session_id)
        .annotate(recent=ExpressionWrapper(Q(created_at__gte=since), output_field=BooleanField()))
        .order_by("seq")
        .values_list("pk", "seq", "speaker", "status", "client_id", "text", "recent")
    ),
    session_id=int,
    since=datetime,
)


@dataclass(frozen=True)
class _Checks:
    """What the locked read of a new message computes besides the rows (see :func:`_lock_query`)."""

    unrated_index: int | None  # the first earlier session of the episode not yet rated
    recent_elsewhere: int | None  # the participant's user messages in other sessions in the last minute
    stored_elsewhere: int | None  # and their characters, in all other sessions


def _lock_session(session_id: int, since: datetime) -> tuple[ChatSession, _Checks]:
    """The session row locked, loaded by :func:`_lock_query` (compiled once per process)."""
    found = _LOCK.objects(session_id=session_id, since=since)
    if not found:
        raise ChatSession.DoesNotExist(f"no chat session {session_id}")
    session: ChatSession = found[0]
    values = session.__dict__
    return session, _Checks(values["unrated_index"], values["recent_elsewhere"], values["stored_elsewhere"])


def post_user_message(
    session: ChatSession | int,
    client_id: str,
    text: str,
    *,
    signals: Signals | None = None,
    raw_signals: object = None,
) -> tuple[Message, bool]:
    """Store the worker's message and a placeholder for the bot's reply, then enqueue the reply.

    Returns ``(message, created)``. A resend with the same ``client_id`` returns the stored message
    with ``created=False`` and stores nothing. Raises :class:`ChatError` for an empty or over-long
    message, a message while a reply is still being written, or a session that is not chatting.
    ``signals`` (how the message was composed, already cleaned by ``chat.authenticity.clean_signals``),
    or ``raw_signals`` as the browser sent them (cleaned here against the study's message limit), are
    stored with a new message as a related row; they never make a message fail.

    After the commit, the new message and the pending placeholder are pushed to every socket of the
    session (the sender's acknowledgement, and the worker's other tabs) before the reply is enqueued,
    so that no frame of the reply can overtake them.

    What it costs (issue 12): the session row locked together with everything the checks need (one
    query), the session's messages read once (one query: duplicate, pending reply, limits, next seq,
    and the transcript the reply is composed from), two inserts (the message, the placeholder) and
    the signals row when there are signals. In the local job modes the placeholder is inserted
    already claimed by this process's job, which gets the loaded rows with it (no reload).
    """
    session_id = session if isinstance(session, int) else session.pk
    client_id = (client_id or "").strip()
    if not client_id or len(client_id) > 64:
        raise ChatError("Your message could not be sent (missing message id). Please reload the page.")
    text = (text or "").strip()
    local = job_mode() != "celery"
    now = timezone.now()
    since = limits.window_start(now)
    with transaction.atomic():
        # the reply takes the state from chat.state's cache by state_version (read only on a miss)
        locked, checks = _lock_session(session_id, since)
        participant = locked.episode.participant
        participant.touch(now)
        # (pk, seq, speaker, status, client_id, text, sent in the last minute): read after the lock, so exact
        rows = _SESSION_MESSAGES.rows(session_id=session_id, since=since)
        existing = next((r[0] for r in rows if r[4] == client_id), None)
        if existing is not None:
            return Message.objects.get(pk=existing), False
        study = participant.study
        if not text:
            raise ChatError("Your message is empty.")
        if len(text) > study.max_message_chars:
            raise ChatError(
                f"Your message is too long ({len(text)} characters; the limit is {study.max_message_chars})."
            )
        if checks.unrated_index is not None:
            raise ChatError(_rate_first_index(checks.unrated_index))
        if locked.status == ChatSession.Status.READY:
            if opens_with_bot(locked):  # the session page starts it, with the bot's first message
                raise ChatError("Please wait for the chatbot's first message (reload the page if it does not come).")
            locked.status, locked.started_at = ChatSession.Status.CHATTING, now
            locked.save(update_fields=["status", "started_at"])
        if locked.status != ChatSession.Status.CHATTING:
            raise ChatError("This session has ended; no more messages can be sent.")
        if locked.time_is_up():  # the session's time limit (chat.timing): no new messages, rating next
            raise ChatError("The time for this session is up; please go on to the rating.")
        if any(r[2] == Message.Speaker.BOT and r[3] == Message.Status.PENDING for r in rows):
            fail_stale_replies(locked)  # only when a reply is pending: it may be one whose job died
            if reply_pending(locked):
                raise ChatError("Please wait for the reply before sending another message.")
        mine = [r for r in rows if r[2] == Message.Speaker.USER]
        try:
            limits.check_can_post(
                study,
                turns=len(mine),
                recent=int(checks.recent_elsewhere or 0) + sum(1 for r in mine if r[6]),
                stored=int(checks.stored_elsewhere or 0) + sum(len(r[5]) for r in mine),
                new_chars=len(text),
            )
        except limits.LimitReached as exc:
            raise ChatError(str(exc)) from exc
        seq = (rows[-1][1] if rows else 0) + 1
        user = sqlcache.insert(
            Message(
                session=locked, seq=seq, client_id=client_id, speaker=Message.Speaker.USER, text=text, created_at=now
            )
        )
        bot = Message(
            session=locked, seq=seq + 1, speaker=Message.Speaker.BOT, status=Message.Status.PENDING, reply_to=user,
            deadline_at=now + timedelta(seconds=reply_deadline_seconds()), due_at=now, created_at=now,
            # claimed at birth by this process's job (chat.leases: a job that never runs lets it lapse)
            attempts=1 if local else 0, lease_until=leases.later(leases.lease_seconds()) if local else None,
        )  # fmt: skip
        sqlcache.insert(bot)
        if signals is None and raw_signals is not None:
            signals = clean_signals(raw_signals, max_chars=int(study.max_message_chars))
        if signals is not None:  # authenticity signals (issue 9): a separate row, see chat.authenticity
            store_signals(user, signals)
        at = locked.simulated_start
        turns = [
            Turn("user" if r[2] == Message.Speaker.USER else "bot", r[5], at)
            for r in rows
            if r[2] == Message.Speaker.USER or r[3] == Message.Status.COMPLETE
        ]
        turns.append(Turn("user", text, at))
        ack = fragments.clear_error() + fragments.messages([user, bot])
        ack += fragments.controls(len(mine) + 1, study.min_user_turns, pending=True)
        transaction.on_commit(lambda: broadcast(session_id, ack))
        if local:
            transaction.on_commit(lambda: _hand_over(_Prepared(bot, turns, len(mine) + 1)))
        transaction.on_commit(lambda: enqueue_reply(bot.pk))
    return user, True


@dataclass
class _Prepared:
    """A reply placeholder claimed when it was inserted, with the rows its job needs: handed to the job
    of this process (:func:`generate_reply`) so that it neither claims nor reads them again."""

    msg: Message  # .session.episode (.arm, .participant.study) loaded, .memory_state deferred (chat.state)
    turns: list[Turn]  # the session up to the user message it answers, as the arm sees it
    user_turns: int  # the worker's messages in the session, this one included


_PREPARED: dict[int, _Prepared] = {}
_PREPARED_LOCK = threading.Lock()


def _hand_over(prepared: _Prepared) -> None:
    now = timezone.now()
    with _PREPARED_LOCK:
        # Never picked up (the pool was shut down): the lease has lapsed anyway. The dict keeps insertion
        # order and every hand-over gets the same lease length, so the lapsed ones are at its front: the
        # sweep stops at the first live one instead of scanning every reply in flight at each turn.
        while _PREPARED:
            pk, oldest = next(iter(_PREPARED.items()))
            if (oldest.msg.lease_until or now) > now:
                break
            del _PREPARED[pk]
        _PREPARED[prepared.msg.pk] = prepared


def _take_prepared(message_id: int) -> _Prepared | None:
    """The hand-over of a reply claimed at its insertion, if this process has it and the claim still
    holds (a job that waited in the queue past its lease claims again, like any other)."""
    with _PREPARED_LOCK:
        prepared = _PREPARED.pop(message_id, None)
    if prepared is None or prepared.msg.lease_until is None or timezone.now() >= prepared.msg.lease_until:
        return None
    return prepared


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
        msg.deadline_at, msg.due_at, msg.lease_until = now + timedelta(seconds=reply_deadline_seconds()), now, None
        msg.save(update_fields=["status", "attempts", "error", "deadline_at", "due_at", "lease_until"])
        transaction.on_commit(lambda: enqueue_reply(msg.pk))
    return msg


def draw_gap(study: Study, session: ChatSession) -> float:
    """The simulated days between ``session`` and the next one, drawn from the study's range. Seeded by
    the study, the episode and the session, so a replayed end (or a test) draws the same gap."""
    return study.draw_gap(random.Random(f"gap:{study.pk}:{session.episode_id}:{session.index}"))


def end_session(session: ChatSession, *, ended_by: str = ChatSession.EndedBy.WORKER) -> ChatSession:
    """End a chatting session once the minimum number of user turns is met (idempotent).

    Raises :class:`ReplyPending` while the bot's reply is still being written, unless the session's
    time limit has passed: ``ended_by=TIME_LIMIT`` (``chat.timing.end_if_time_up``) waives the minimum
    and fails a reply still pending, which is then not part of the session the memory sees.
    Creates the next session (``preparing``) and enqueues the memory update after commit.
    """
    with transaction.atomic():
        locked = (
            ChatSession.objects.select_for_update().select_related("episode__participant__study").get(pk=session.pk)
        )
        if locked.status in (ChatSession.Status.RATING, ChatSession.Status.DONE):
            return locked
        study = locked.episode.participant.study
        timed_out = ended_by == ChatSession.EndedBy.TIME_LIMIT and locked.time_is_up()
        if locked.status != ChatSession.Status.CHATTING or (
            user_turns(locked) < study.min_user_turns and not timed_out
        ):
            raise ChatError(f"Please send at least {study.min_user_turns} messages before ending the session.")
        # The reply being written is part of the session the worker rates and the memory sees.
        fail_stale_replies(locked)
        if reply_pending(locked) and not timed_out:
            raise ReplyPending("Please wait for the chatbot's reply before ending the session.")
        locked.status, locked.ended_at = ChatSession.Status.RATING, timezone.now()
        locked.ended_by = ChatSession.EndedBy.TIME_LIMIT if timed_out else ChatSession.EndedBy.WORKER
        locked.save(update_fields=["status", "ended_at", "ended_by"])
        if timed_out:
            locked.messages.filter(status=Message.Status.PENDING).update(
                status=Message.Status.FAILED, error="The session ended before the reply was written."
            )
        MemorySnapshot.objects.get_or_create(session=locked)
        if locked.index < study.sessions_per_episode:
            gap = draw_gap(study, locked)
            ChatSession.objects.get_or_create(
                episode=locked.episode,
                index=locked.index + 1,
                defaults={
                    "status": ChatSession.Status.PREPARING,
                    "simulated_start": locked.simulated_start + timedelta(days=gap),
                    "gap_days": gap,
                },
            )
        transaction.on_commit(lambda: enqueue_memory_update(locked.pk))
    return locked


# -------------------------------------------------------------------------------------- ratings


def submit_ratings(session: ChatSession, values: dict[int, int], attention: dict[int, int] | None = None) -> bool:
    """Store the ratings of an ended session; ``False`` when it was rated already (idempotent).

    ``attention`` holds the answers to the session's attention checks by check id; each is stored with
    whether it passed (never as a rating). Completes the episode after its last session, and the
    participant after their last episode."""
    with transaction.atomic():
        locked = (
            ChatSession.objects.select_for_update().select_related("episode__participant__study").get(pk=session.pk)
        )
        if locked.status == ChatSession.Status.DONE:
            return False
        if locked.status != ChatSession.Status.RATING:
            raise ChatError("This session has not ended yet; please finish the conversation first.")
        for metric_id, value in values.items():
            Rating.objects.update_or_create(session=locked, metric_id=metric_id, defaults={"value": value})
        checks = {c.pk: c for c in locked.episode.participant.study.attention_checks.all()}
        for check_id, value in (attention or {}).items():
            AttentionResponse.objects.update_or_create(
                session=locked, item_id=check_id, defaults={"value": value, "passed": checks[check_id].passes(value)}
            )
        now = timezone.now()
        locked.status, locked.rated_at = ChatSession.Status.DONE, now
        locked.save(update_fields=["status", "rated_at"])
        episode = locked.episode
        study = episode.participant.study
        if locked.index >= study.sessions_per_episode:
            episode.status, episode.completed_at = Episode.Status.COMPLETED, now
            episode.save(update_fields=["status", "completed_at"])
            participant = episode.participant
            if not episodes_left(participant):
                participant.completed_at = now
                participant.save(update_fields=["completed_at"])
    return True


# -------------------------------------------------------------------------------- reply generation

REPLY_TASK = "chat.tasks.generate_reply_task"
MEMORY_UPDATE_TASK = "chat.tasks.update_memory"


def enqueue_reply(message_id: int, *, countdown: float = 0) -> None:
    """Have the reply of a pending placeholder written (a Celery task, or :func:`generate_reply` here),
    after ``countdown`` seconds. A broker that is down is logged, not raised: the reply is enqueued
    again once it is overdue (:func:`recover_replies`). A placeholder claimed when it was inserted, for
    the job of this process (:func:`post_user_message`), gets its claim back if the job cannot start."""
    try:
        dispatch(REPLY_TASK, message_id, local=generate_reply, countdown=countdown)
    except Exception:  # kombu's errors when Redis is down; nothing is lost, the row is the truth
        log.warning("could not enqueue reply %s; it will be re-enqueued when overdue", message_id, exc_info=True)
        if (prepared := _take_prepared(message_id)) is not None:
            with contextlib.suppress(DatabaseError):
                Message.objects.filter(
                    pk=message_id, status=Message.Status.PENDING, attempts=prepared.msg.attempts
                ).update(lease_until=None, attempts=prepared.msg.attempts - 1)


def enqueue_memory_update(session_id: int) -> None:
    """Have an ended session's memory update run (a Celery task, or here with the task's retries)."""
    try:
        dispatch(MEMORY_UPDATE_TASK, session_id, local=update_memory_with_retries)
    except Exception:  # broker down: the waiting page re-enqueues it (recover_stale_update)
        log.warning("could not enqueue the memory update of session %s", session_id, exc_info=True)


_WORD = re.compile(r"\w")


# Small models sometimes label their reply ("Bot: ...") or go on to write the user's next turn.
_OWN_LABEL = re.compile(r"^\s*(?:bot|assistant|chatbot|ai)\s*:\s*", re.IGNORECASE)
_USER_TURN = re.compile(r"(?:^|\n)\s*(?:user|human|you)\s*:", re.IGNORECASE)


def clean_reply(text: str) -> str:
    """The reply as the worker should see it: without a leading speaker label, and cut where the
    model starts writing the user's side of the dialogue."""
    text = _OWN_LABEL.sub("", text.strip(), count=1)
    cut = _USER_TURN.search(text)
    return (text[: cut.start()] if cut else text).strip()


def _check_reply(text: str) -> str:
    text = clean_reply(text)
    if not text or not _WORD.search(text):
        raise LLMTransientError(f"the model returned an empty or unusable reply ({text[:40]!r})")
    return text


#: ``Message.error`` of a reply failed because the model recited its prompt twice (the worker sees
#: ``Message.failure_text``, never the reply).
LEAK_ERROR = PROMPT_LEAK_ERROR

_TOKEN = re.compile(r"\S+")


def shown_prefix(text: str, *, hold_back: int = LEAK_MIN_WORDS) -> int:
    """How much of a reply being streamed may be shown yet: everything but its last ``hold_back``
    whitespace-separated pieces. A run of prompt text is caught once it is LEAK_MIN_WORDS words long,
    so holding back that many pieces means no word of a leak reaches the worker before it is caught."""
    ends = [m.end() for m in _TOKEN.finditer(text)]
    return ends[-hold_back - 1] if len(ends) > hold_back else 0


class PromptLeakError(Exception):
    """The reply recites the prompt (system prompt, memory header, few-shot examples or a data tag)."""

    def __init__(self, leak: PromptLeak) -> None:
        super().__init__(f"{LEAK_ERROR}: {leak.source} text in the reply ({leak.words} words: {leak.text[:120]!r})")
        self.leak = leak


def store_llm_calls(session_id: int, message_id: int | None, calls: list[dict[str, Any]]) -> None:
    """Store recorded LLM calls (``RecordingLLM.drain()`` dicts) as :class:`LLMCallRecord` rows; a reply's
    earlier turns are stored once, in the transcript, not again with every call (chat/records.py)."""
    rows = [
        LLMCallRecord(
            session_id=session_id,
            message_id=message_id,
            purpose=c.get("purpose") or "",
            model=c.get("model") or "",
            messages=records.compact_messages(c.get("messages") or [], c.get("purpose") or ""),
            reply=c.get("reply") or "",
            latency_ms=c.get("latency_ms") or 0,
            prompt_tokens=c.get("prompt_tokens"),
            completion_tokens=c.get("completion_tokens"),
            error=c.get("error") or "",
        )
        for c in calls
    ]
    if len(rows) == 1:
        sqlcache.insert(rows[0])  # one statement (bulk_create wraps even one row in a transaction)
    elif rows:
        LLMCallRecord.objects.bulk_create(rows)


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
    :class:`LLMCallRecord`. After a reply, the arm's ``after_turn`` runs (compare-and-set write).
    Database errors propagate, for the Celery task to retry.

    Blinding: a reply that recites its prompt (:class:`memory.hygiene.LeakCheck`) is caught while
    it streams (the last LEAK_MIN_WORDS words are held back until checked, so no leaked word is shown),
    and regenerated once within the same attempt (same lease, same deadline); a second leak fails the
    reply with ``error = "prompt leak: ..."`` and the Retry button. The leaked text stays only in the
    researcher's LLM call record.

    The bot's opening message of a session (a placeholder replying to nothing, see :func:`add_opener`)
    is written from ``compose_opening``; no ``after_turn`` follows it.
    """
    prepared = _take_prepared(message_id)
    if prepared is not None:  # claimed when it was inserted, by this process (post_user_message)
        msg = prepared.msg
        held = sqlcache.Row(Message, msg.pk, status=Message.Status.PENDING, attempts=msg.attempts)
        try:
            _reply_attempt(msg, held, turns=prepared.turns, user_turns=prepared.user_turns)
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
    msg: Message, held: leases.Held, *, turns: list[Turn] | None = None, user_turns: int | None = None
) -> None:
    """The claimed attempt ``msg.attempts`` of a reply (``held``: the row while we hold it); ``turns``
    (the session up to the message it answers) and ``user_turns`` (the worker's messages), when the
    caller has them already."""
    session = msg.session
    attempt = msg.attempts
    deadline = msg.deadline_at or msg.created_at + timedelta(seconds=reply_deadline_seconds())
    if timezone.now() >= deadline:
        _fail_reply(msg, held, REPLY_TOO_SLOW)
        return
    episode = session.episode
    try:
        system, llm = build_arm(episode.arm)
    except DatabaseError:
        raise
    except Exception as exc:  # a misconfigured arm (unknown backend, missing model): retrying cannot help
        log.exception("reply %s: the arm of session %s could not be built", msg.pk, session.pk)
        _fail_reply(msg, held, f"{type(exc).__name__}: {exc}")
        return
    delays = retry_delays()
    max_attempts = len(delays) + 1
    # the parsed state of this version from the process cache (read and parsed only on a miss)
    start_state = state.for_reply(episode.pk, episode.state_version)
    memory = start_state[0]
    now = session_clock(session)
    opener = msg.reply_to_id is None  # the bot's first message of a session (see add_opener)
    prompt = None
    try:
        with leases.heartbeat(held) as beat:
            if turns is None:
                turns = turns_of(session, upto_seq=msg.seq - 1)
            prompt = system.compose_opening(memory, now) if opener else system.compose(memory, turns, now)
            chat = [t.text for t in turns]
            for leaks in (1, 2):
                try:
                    text = _stream_reply(msg, llm, prompt, chat=chat, deadline=deadline, beat=beat)
                    break
                except PromptLeakError as exc:
                    if llm.calls:
                        llm.calls[-1].error = str(exc)
                    store_llm_calls(session.pk, msg.pk, llm.drain())
                    log.warning("reply %s of session %s: %s", msg.pk, session.pk, exc)
                    if leaks == 2:
                        _fail_reply(msg, held, str(exc))
                        return
                    # Regenerate once; the bubble is reset (nothing of the leak was shown).
                    broadcast(session.pk, fragments.message(msg))
    except _Superseded:
        store_llm_calls(session.pk, msg.pk, llm.drain())
        return
    except LLMError as exc:
        if llm.calls and not llm.calls[-1].error:
            llm.calls[-1].error = str(exc)  # the stream "succeeded" but its output was unusable
        store_llm_calls(session.pk, msg.pk, llm.drain())
        delay = delays[attempt - 1] if attempt < max_attempts else None
        retry_at = timezone.now() + timedelta(seconds=delay or 0)
        if isinstance(exc, LLMTransientError) and delay is not None and retry_at < deadline:
            if held.update(error=str(exc)[:500], lease_until=None, due_at=retry_at):
                msg.error = str(exc)
                broadcast(session.pk, fragments.message(msg, retrying=True, max_attempts=max_attempts))
                enqueue_reply(msg.pk, countdown=delay)
            return
        _fail_reply(msg, held, REPLY_TOO_SLOW if timezone.now() >= deadline else str(exc))
        return
    except DatabaseError:
        raise  # generate_reply releases the reply; the task retries
    except Exception as exc:  # a bug in an arm or a backend: fail visibly instead of staying pending
        log.exception("reply %s of session %s failed", msg.pk, session.pk)
        store_llm_calls(session.pk, msg.pk, llm.drain())
        _fail_reply(msg, held, f"{type(exc).__name__}: {exc}")
        return
    done = {"status": Message.Status.COMPLETE, "text": text, "error": "", "lease_until": None}
    memory_used = prompt.memory if prompt else []
    with transaction.atomic():  # one write transaction, not two (SQLite has one writer at a time)
        store_llm_calls(session.pk, msg.pk, llm.drain())
        updated = held.update(memory_used=memory_used, **done)  # compare-and-set on (pending, this attempt)
    if not updated:  # taken over meanwhile: show what the row holds
        msg.refresh_from_db()
        broadcast(session.pk, fragments.message(msg))
        return
    for field, value in done.items():
        setattr(msg, field, value)
    msg.memory_used = memory_used
    broadcast(session.pk, fragments.message(msg) + _controls(session, user_turns))
    if not opener:  # an opener follows no exchange to learn from
        after = [*(turns or []), Turn("bot", text, session.simulated_start)]
        _after_turn(session, episode, system, llm, msg, now, start_state, after)


def _stream_reply(
    msg: Message,
    llm: RecordingLLM,
    prompt: Prompt,
    *,
    chat: list[str],
    deadline: datetime,
    beat: leases.Heartbeat,
) -> str:
    """Stream one reply to the session's sockets and return its cleaned text.

    Pieces are pushed as they come, coalesced to one frame per ``CHAT_TOKEN_FLUSH_SECONDS`` (the
    first one at once), minus a held-back tail that is checked for prompt text first
    (:class:`PromptLeakError`, the stream closed); what is still held back at the end arrives with
    the final message. An arm may give its reply itself (``prompt.reply``, the quality-control arm):
    it is sent as is, with no LLM call and no leak check.
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
    for piece in stream:
        if beat.lost:
            raise _Superseded()
        if timezone.now() >= deadline:  # a trickling stream: every read in time, the whole reply not
            stop()
            raise LLMError(REPLY_TOO_SLOW)
        pieces.append(piece)
        if time.monotonic() - last_flush >= flush_every:
            so_far = "".join(pieces)
            if fixed is None and (leak := leak_check().find(so_far)) is not None:
                stop()
                raise PromptLeakError(leak)
            safe = shown_prefix(so_far) if fixed is None else len(so_far)
            if safe > shown:
                broadcast(msg.session_id, fragments.token(msg.seq, so_far[shown:safe]))
                shown = safe
            last_flush = time.monotonic()
    text = _check_reply("".join(pieces))
    if fixed is not None:
        return text
    leak = leak_check().find(text)
    if leak is not None:
        raise PromptLeakError(leak)
    return end_at_sentence(text, replies.finish_reason(stream, len(pieces), max_tokens))


def _fail_reply(msg: Message, held: leases.Held, error: str) -> None:
    """The reply's final failure: the worker gets the Retry button (and why, for a missed deadline)."""
    if held.update(status=Message.Status.FAILED, error=error[:500], lease_until=None):
        msg.refresh_from_db()
        broadcast(msg.session_id, fragments.message(msg) + _controls(msg.session, None))


def _controls(session: ChatSession, user_turns: int | None) -> str:
    """The turn counter and End button once a reply is written (``user_turns`` counted when not given:
    a retried or recovered reply, or one written by a Celery worker)."""
    pending = False
    if user_turns is None:
        user_turns, pending = turn_counts(session)
    return fragments.controls(user_turns, session.episode.participant.study.min_user_turns, pending=pending)


def _after_turn(
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
        store_llm_calls(session.pk, msg.pk, llm.drain())
        return
    store_llm_calls(session.pk, msg.pk, llm.drain())
    trace = applied.update.trace or {}
    recorded = {k: trace[k] for k in ("fallbacks", "rejected") if trace.get(k)}
    if recorded:
        # Rejected memory writes and fallbacks are evidence about the arm: kept with the reply they followed.
        Message.objects.filter(pk=msg.pk).update(memory_trace=recorded)
        log.info("after_turn of session %s: %s", session.pk, {k: len(v) for k, v in recorded.items()})
    episode.memory_state, episode.state_version = applied.update.state, applied.version


# ------------------------------------------------------------------------------ memory update

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
                    system, llm = build_arm(episode.arm)
                update = system.end_session(current, turns, now)
                new_state, trace = update.state, dict(update.trace or {})
                error = ""
            except Exception as exc:  # any failure of the arm: LLM errors, bad output, bugs
                calls += llm.drain() if llm else []
                store_llm_calls(session.pk, None, calls)
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
                store_llm_calls(session.pk, None, [] if error else trace["llm_calls"])
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
    delays = retry_delays()
    for delay in delays[: MEMORY_ATTEMPTS - 1]:
        try:
            return update_memory(session_id, final=False)
        except MemoryUpdateFailed:
            time.sleep(delay)
    return update_memory(session_id, final=True)
