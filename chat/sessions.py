"""A session's course: opened (with the bot's first message when the study says so), ended once the
worker has written enough (the next session prepared behind a simulated gap, the memory update
enqueued), and the order of sessions within an episode (an earlier one is rated before a later opens).
"""

from __future__ import annotations

import random
from datetime import timedelta

from django.db import transaction

from chat import memory_updates, pii, replies, signals
from chat.errors import ChatError
from chat.models import ChatSession, MemorySnapshot, Message
from chat.transcript import TurnCounts, reply_pending, turn_counts
from infra import clock
from studies.models import Study


class ReplyPending(ChatError):
    """The session cannot end while the bot's reply is being written."""


class RateFirst(ChatError):
    """A later session cannot open before the earlier ones of its episode are rated."""

    def __init__(self, unrated: ChatSession) -> None:
        super().__init__(rate_first_text(unrated.index))
        self.unrated = unrated


def rate_first_text(index: int) -> str:
    """What the worker is told while session ``index`` of their episode is not rated yet."""
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
                status=ChatSession.Status.CHATTING, started_at=clock.now()
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
    replies.submit_reply(bot, session.episode.participant.study_id)
    return bot


def draw_gap(study: Study, session: ChatSession) -> float:
    """The simulated days between ``session`` and the next one, drawn from the study's range. Seeded by
    the study, the episode and the session, so a replayed end (or a test) draws the same gap."""
    return study.draw_gap(random.Random(f"gap:{study.pk}:{session.episode_id}:{session.index}"))


def is_silent(counts: TurnCounts, min_turns: int) -> bool:
    """Whether an ended session is *silent*: fewer of the worker's turns answered than the study's minimum,
    with replies that failed. Its ratings judge a chatbot that hardly spoke, not its memory: they are kept,
    flagged (``ChatSession.silent``), and excluded from every report by default."""
    return counts.answered < min_turns and counts.failed > 0


def not_enough_text(counts: TurnCounts, min_turns: int) -> str:
    """Why the worker cannot end the session yet (the minimum counts the turns the bot answered)."""
    failed = "; a reply that failed does not count: press Retry under it, or write again" if counts.failed else ""
    plural = "" if min_turns == 1 else "s"
    return (
        f"Please send at least {min_turns} message{plural} that the chatbot answers before ending the session "
        f"({counts.answered} answered so far{failed})."
    )


def end_session(session: ChatSession, *, ended_by: str = ChatSession.EndedBy.WORKER) -> ChatSession:
    """End a chatting session once the minimum number of answered user turns is met (idempotent): a turn
    counts when the bot's reply to it completed; a failed reply (the reply deadline, an LLM error) does not.

    Raises :class:`ReplyPending` while the bot's reply is still being written, unless the session's
    time limit has passed: ``ended_by=TIME_LIMIT`` (``chat.timing.end_if_time_up``) waives the minimum
    and fails a reply still pending, which is then not part of the session the memory sees. A session
    that ends that way with too few answered turns and failed replies is flagged ``silent`` (:func:`is_silent`).
    Creates the next session (``preparing``) and enqueues the memory update after commit; sends
    ``chat.signals.session_ended`` in the same transaction.
    """
    with transaction.atomic():
        locked = (
            ChatSession.objects.select_for_update().select_related("episode__participant__study").get(pk=session.pk)
        )
        if locked.status in (ChatSession.Status.RATING, ChatSession.Status.DONE):
            return locked
        study = locked.episode.participant.study
        timed_out = ended_by == ChatSession.EndedBy.TIME_LIMIT and locked.time_is_up()
        if locked.status != ChatSession.Status.CHATTING:
            raise ChatError("This session is not open for chatting.")
        # The reply being written is part of the session the worker rates and the memory sees.
        replies.fail_stale_replies(locked)
        if reply_pending(locked) and not timed_out:
            raise ReplyPending("Please wait for the chatbot's reply before ending the session.")
        if not timed_out and (counts := turn_counts(locked)).answered < study.min_user_turns:
            raise ChatError(not_enough_text(counts, study.min_user_turns))
        locked.status, locked.ended_at = ChatSession.Status.RATING, clock.now()
        locked.ended_by = ChatSession.EndedBy.TIME_LIMIT if timed_out else ChatSession.EndedBy.WORKER
        locked.save(update_fields=["status", "ended_at", "ended_by"])
        if timed_out:
            locked.messages.filter(status=Message.Status.PENDING).update(
                status=Message.Status.FAILED, error="The session ended before the reply was written."
            )
            if is_silent(turn_counts(locked), study.min_user_turns):
                locked.silent = True
                locked.save(update_fields=["silent"])
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
        memory_updates.submit_memory_update(locked)
        pii.submit_scan(locked)  # the study's personal-data flagging, if on (off the reply path)
        # apps above chat read the ended session's turns (judges: the blinding scan), as jobs after the commit
        signals.session_ended.send(sender=ChatSession, session=locked, ended_by=locked.ended_by)
    return locked
