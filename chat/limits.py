"""Limits that keep one participant from hurting a study (issue 11): messages per minute, user turns
per session and characters stored over the whole study, all per participant and set per study
(``Study.max_messages_per_minute``, ``Study.max_turns_per_session``, ``Study.max_stored_chars``). Checked inside :func:`chat.turns.post_user_message`, under the
session's row lock, before anything is stored; the worker is told which limit they hit.

The messages per minute are counted in a window of infra/ratelimit.py (:data:`MESSAGES_BY_PARTICIPANT`), on the
clock every process shares (Redis's, or the one process's monotonic clock), not from the messages' stored
times: those are each web process's wall clock, and a step of it refused an active worker (a step back: the
minute before held ten minutes of messages) or let a burst through (a step forward; issue 27)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from django.db.models import QuerySet, Sum
from django.db.models.functions import Length

from chat.models import Message
from infra import sqlcache
from infra.ratelimit import Window
from studies.models import Study

MESSAGES_BY_PARTICIPANT = Window("chat-participant-messages")  # all their sessions, in any minute


class LimitReached(Exception):
    """A message refused by a limit; the text is for the worker."""


def check_can_post(study: Study, *, turns: int, stored: int, new_chars: int = 0) -> None:
    """Raise :class:`LimitReached` if the participant may not send another message of ``new_chars``
    characters now. ``turns``: their user messages in this session; ``stored``: the characters of all their
    user messages. The caller counts them under the session's row lock (one query with the transcript,
    see ``chat.turns.post_user_message``). The messages per minute: :func:`take_minute_place`."""
    if turns >= study.max_turns_per_session:
        raise LimitReached(
            f"This session has reached its limit of {study.max_turns_per_session} messages. "
            "Please end the session to continue."
        )
    if stored + new_chars > study.max_stored_chars:
        raise LimitReached(
            f"You have reached this study's limit of {study.max_stored_chars:,} characters of messages. "
            "Please end the session; thank you for your messages."
        )


def take_minute_place(study: Study, participant_id: int) -> str:
    """Count the participant's message in their messages per minute (every session of theirs), or raise
    :class:`LimitReached` when the last minute already holds ``Study.max_messages_per_minute`` of them.
    Returns the ticket to give back (:data:`MESSAGES_BY_PARTICIPANT`'s ``give_back``) if a later check refuses
    the message."""
    ticket = MESSAGES_BY_PARTICIPANT.take(str(participant_id), int(study.max_messages_per_minute))
    if ticket is None:
        raise LimitReached(
            f"You are sending messages very quickly (the limit is {study.max_messages_per_minute} a minute). "
            "Please wait a moment, then send your message again."
        )
    return ticket


def other_sessions(session_ref: Any, participant_ref: Any) -> QuerySet[Message]:
    """The participant's user messages outside the session (expressions, for a subquery). Side B's copies of a
    live side-by-side episode's messages (chat/sidebyside.py) are not counted: each message counts once."""
    return (
        Message.objects.filter(session__episode__participant_id=participant_ref, speaker=Message.Speaker.USER)
        .exclude(session_id=session_ref)
        .exclude(session__episode__side="b")
    )


def _stored_elsewhere_rows(session_id: Any, participant_id: Any) -> QuerySet[Message]:
    rows = other_sessions(session_id, participant_id).order_by()
    return rows.values("speaker").annotate(n=Sum(Length("text"))).values_list("n")  # type: ignore[return-value]


_STORED_ELSEWHERE = sqlcache.CachedQuery(_stored_elsewhere_rows, session_id=int, participant_id=int)
_ELSEWHERE: OrderedDict[int, int] = OrderedDict()  # session id -> characters, the newest sessions last
_ELSEWHERE_LOCK = threading.Lock()
_ELSEWHERE_KEPT = 20_000


def stored_elsewhere(session_id: int, participant_id: int) -> int:
    """The characters of the participant's user messages in their other sessions (``max_stored_chars`` counts
    them with the session's own). Read once per session and process, then kept: while a session takes messages,
    none of the worker's other sessions does (the sessions of an episode are chatted in order, each rated before
    the next takes a message, and the episodes one after another; side B's copies of a side-by-side episode are
    not counted), so the figure cannot change under it. Read inside the chat turn's query it was a correlated
    subquery that cost SQLite more than the rest of that query (bench/bench_turn_cpu.py)."""
    found = _ELSEWHERE.get(session_id)
    if found is None:
        rows = _STORED_ELSEWHERE.rows(session_id=session_id, participant_id=participant_id)
        found = int(rows[0][0] or 0) if rows else 0
        with _ELSEWHERE_LOCK:
            _ELSEWHERE[session_id] = found
            while len(_ELSEWHERE) > _ELSEWHERE_KEPT:
                _ELSEWHERE.popitem(last=False)
    return found


def forget_stored_elsewhere() -> None:
    """Drop what :func:`stored_elsewhere` kept (tests; a worker's messages deleted)."""
    with _ELSEWHERE_LOCK:
        _ELSEWHERE.clear()
