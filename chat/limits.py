"""Limits that keep one participant from hurting a study (issue 11): messages per minute, user turns
per session and characters stored over the whole study, all per participant and set per study
(``Study.max_messages_per_minute``, ``Study.max_turns_per_session``, ``Study.max_stored_chars``). Checked inside :func:`chat.services.post_user_message`, under the
session's row lock, before anything is stored; the worker is told which limit they hit."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Sum
from django.db.models.functions import Length
from django.utils import timezone

from chat.models import ChatSession, Message
from studies.models import Study


class LimitReached(Exception):
    """A message refused by a limit; the text is for the worker."""


def check_can_post(session: ChatSession, study: Study, new_chars: int = 0) -> None:
    """Raise :class:`LimitReached` if the participant may not send another message of ``new_chars``
    characters now."""
    turns = session.messages.filter(speaker=Message.Speaker.USER).count()
    if turns >= study.max_turns_per_session:
        raise LimitReached(
            f"This session has reached its limit of {study.max_turns_per_session} messages. "
            "Please end the session to continue."
        )
    since = timezone.now() - timedelta(minutes=1)
    recent = Message.objects.filter(
        session__episode__participant_id=session.episode.participant_id,
        speaker=Message.Speaker.USER,
        created_at__gte=since,
    ).count()
    if recent >= study.max_messages_per_minute:
        raise LimitReached(
            f"You are sending messages very quickly (the limit is {study.max_messages_per_minute} a minute). "
            "Please wait a moment, then send your message again."
        )
    stored = (
        Message.objects.filter(
            session__episode__participant_id=session.episode.participant_id, speaker=Message.Speaker.USER
        ).aggregate(n=Sum(Length("text")))["n"]
        or 0
    )
    if stored + new_chars > study.max_stored_chars:
        raise LimitReached(
            f"You have reached this study's limit of {study.max_stored_chars:,} characters of messages. "
            "Please end the session; thank you for your messages."
        )
