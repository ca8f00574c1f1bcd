"""Signals of the chat app, for the apps above it.

``session_ended``: sent with ``session`` (a :class:`~chat.models.ChatSession`) and ``ended_by`` inside the transaction
that closes the session's chat for good, so its bot turns are final: the worker's end and the time limit
(chat.sessions.end_session: ``ended_by`` is the session's ``EndedBy``) and a session still chatting when its episode
is abandoned (the abandonment sweep, chat.timing.sweep_abandoned, and a returned Prolific submission: ``ended_by``
``"abandoned"``; the session keeps its status). An app above chat that reads a session's turns once it is over
submits its job of the runtime here (judges/blinding.py: the blinding scan), which then runs after the commit.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.dispatch import Signal

session_ended = Signal()

#: ``ended_by`` of a session whose episode was abandoned while it was chatting
ABANDONED = "abandoned"


def abandoned_chats_ended(episode_ids: Iterable[int]) -> int:
    """Send :data:`session_ended` for every session still chatting in these episodes, just marked abandoned
    (call inside the transaction that marks them); the number of sessions."""
    from chat.models import ChatSession

    chatting = ChatSession.objects.filter(
        episode_id__in=list(episode_ids), status=ChatSession.Status.CHATTING
    ).select_related("episode__participant")
    n = 0
    for session in chatting:
        session_ended.send(sender=ChatSession, session=session, ended_by=ABANDONED)
        n += 1
    return n
