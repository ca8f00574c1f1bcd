"""Limits that keep one participant from hurting a study (issue 11): messages per minute, user turns
per session and characters stored over the whole study, all per participant and set per study
(``Study.max_messages_per_minute``, ``Study.max_turns_per_session``, ``Study.max_stored_chars``). Checked inside :func:`chat.turns.post_user_message`, under the
session's row lock, before anything is stored; the worker is told which limit they hit."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, QuerySet, Subquery, Sum
from django.db.models.functions import Length
from django.utils import timezone

from chat.models import Message
from studies.models import Study


class LimitReached(Exception):
    """A message refused by a limit; the text is for the worker."""


def check_can_post(study: Study, *, turns: int, recent: int, stored: int, new_chars: int = 0) -> None:
    """Raise :class:`LimitReached` if the participant may not send another message of ``new_chars``
    characters now. ``turns``: their user messages in this session; ``recent``: their user messages
    (all sessions) in the last minute (:func:`window_start`); ``stored``: the characters of all their
    user messages. The caller counts them under the session's row lock (one query with the transcript,
    see ``chat.turns.post_user_message``)."""
    if turns >= study.max_turns_per_session:
        raise LimitReached(
            f"This session has reached its limit of {study.max_turns_per_session} messages. "
            "Please end the session to continue."
        )
    if recent >= study.max_messages_per_minute:
        raise LimitReached(
            f"You are sending messages very quickly (the limit is {study.max_messages_per_minute} a minute). "
            "Please wait a moment, then send your message again."
        )
    if stored + new_chars > study.max_stored_chars:
        raise LimitReached(
            f"You have reached this study's limit of {study.max_stored_chars:,} characters of messages. "
            "Please end the session; thank you for your messages."
        )


def window_start(now: datetime | None = None) -> datetime:
    """The start of the messages-per-minute window."""
    return (now or timezone.now()) - timedelta(minutes=1)


def other_sessions(session_ref: Any, participant_ref: Any) -> QuerySet[Message]:
    """The participant's user messages outside the session (expressions, for a subquery). Side B's copies of a
    live side-by-side episode's messages (chat/sidebyside.py) are not counted: each message counts once."""
    return (
        Message.objects.filter(session__episode__participant_id=participant_ref, speaker=Message.Speaker.USER)
        .exclude(session_id=session_ref)
        .exclude(session__episode__side="b")
    )


def recent_elsewhere(session_ref: Any, participant_ref: Any, since: datetime) -> Subquery:
    """Subquery: the participant's user messages in other sessions since ``since``."""
    rows = other_sessions(session_ref, participant_ref).filter(created_at__gte=since).order_by()
    return Subquery(rows.values("speaker").annotate(n=Count("pk")).values("n")[:1])


def stored_elsewhere(session_ref: Any, participant_ref: Any) -> Subquery:
    """Subquery: the characters of the participant's user messages in other sessions."""
    rows = other_sessions(session_ref, participant_ref).order_by()
    return Subquery(rows.values("speaker").annotate(n=Sum(Length("text"))).values("n")[:1])
