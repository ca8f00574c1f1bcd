"""The error every chat workflow raises for what the worker should be told (the workflows' own kinds,
such as :class:`chat.sessions.ReplyPending`, are subclasses that live with them)."""

from __future__ import annotations


class ChatError(Exception):
    """A request the worker can fix or should be told about (shown verbatim, never a server error)."""
