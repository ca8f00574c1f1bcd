"""What the pages, the socket and the arms read of a session: its messages (all after a seq, the
turns as an arm sees them), its counts (the worker's turns, a pending reply) and the bot's clock."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Count, Q
from django.utils import timezone

from chat.models import ChatSession, Message
from infra import sqlcache
from memory.base import Turn

#: (pk, seq, speaker, status, client_id, text) of a session's messages in order (compiled once per process): what
#: a chat turn reads after locking the session, and what a reply's job reads when no turn handed it over
SESSION_MESSAGES = sqlcache.CachedQuery(
    lambda session_id: (
        Message.objects.filter(session_id=session_id)
        .order_by("seq")
        .values_list("pk", "seq", "speaker", "status", "client_id", "text")
    ),
    session_id=int,
)


def exchange_before(rows: list[Any], seq: int, at: datetime) -> tuple[list[Turn], int, int]:
    """From :data:`SESSION_MESSAGES` rows: the turns an arm sees before message ``seq`` (the worker's messages
    and the bot's completed ones), the worker's turns the bot answered (its completed messages after seq 1,
    where only an opener can be) and the bot's failed messages."""
    turns, answered, failed = [], 0, 0
    for _pk, row_seq, speaker, status, _client, text in rows:
        if row_seq >= seq:
            break
        bot = speaker == Message.Speaker.BOT
        if not bot or status == Message.Status.COMPLETE:
            turns.append(Turn("bot" if bot else "user", text, at))
        if bot and status == Message.Status.COMPLETE and row_seq > 1:
            answered += 1
        elif bot and status == Message.Status.FAILED:
            failed += 1
    return turns, answered, failed


def session_clock(session: ChatSession) -> datetime:
    """The bot's clock: the session's simulated start plus the real time spent chatting."""
    if session.started_at is None:
        return session.simulated_start
    return session.simulated_start + (timezone.now() - session.started_at)


def user_turns(session: ChatSession) -> int:
    return session.messages.filter(speaker=Message.Speaker.USER).count()


class TurnCounts(NamedTuple):
    """A session's turns as its minimum counts them: the worker's messages (``sent``), those the bot answered
    (a reply that completed), the bot's failed messages (replies and opener: each one a Retry button), and
    whether a reply is being written."""

    sent: int
    answered: int
    failed: int
    pending: bool


# A reply is a bot message answering a worker's message; the bot's opener of a session answers nothing.
_BOT = Q(speaker=Message.Speaker.BOT)
_ANSWERED = _BOT & Q(status=Message.Status.COMPLETE, reply_to__isnull=False)


def turn_counts(session: ChatSession) -> TurnCounts:
    """The session's :class:`TurnCounts` (one query)."""
    counts = session.messages.aggregate(
        users=Count("pk", filter=Q(speaker=Message.Speaker.USER)),
        answered=Count("pk", filter=_ANSWERED),
        failed=Count("pk", filter=_BOT & Q(status=Message.Status.FAILED)),
        pending=Count("pk", filter=_BOT & Q(status=Message.Status.PENDING)),
    )
    return TurnCounts(int(counts["users"]), int(counts["answered"]), int(counts["failed"]), counts["pending"] > 0)


def answered_turns(session: ChatSession) -> int:
    """The worker's turns the bot answered: what the study's minimum of turns counts (a failed reply, from
    the reply deadline or an LLM error, does not)."""
    return session.messages.filter(_ANSWERED).count()


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


def messages_after(session: ChatSession, last_seq: int) -> list[Message]:
    """Every message of the session after ``last_seq`` (what a reconnecting browser missed)."""
    return list(session.messages.filter(seq__gt=last_seq).order_by("seq"))
