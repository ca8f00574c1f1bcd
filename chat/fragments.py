"""The HTML the socket sends: partials of ``chat/session.html`` (the page renders the same partials,
so a reload looks like the live page). Over the socket every top-level element is an out-of-band swap
(htmx ws extension); chat.js replaces a message element that arrives again with the same id."""

from __future__ import annotations

from collections.abc import Iterable

from django.template.loader import render_to_string

from chat.models import Message

PAGE = "chat/session.html"


def message(msg: Message, *, retrying: bool = False, max_attempts: int | None = None) -> str:
    """A message, appended to the transcript; ``retrying`` shows the attempt counter of a pending reply."""
    return messages([msg], retrying=retrying, max_attempts=max_attempts)


def messages(msgs: Iterable[Message], *, retrying: bool = False, max_attempts: int | None = None) -> str:
    ctx = {"messages_list": list(msgs), "retrying": retrying, "max_attempts": max_attempts}
    return render_to_string(f"{PAGE}#messages-oob", ctx)


def token(seq: int, piece: str) -> str:
    """One streamed piece of a reply, appended to its (escaped) text."""
    return render_to_string(f"{PAGE}#token-oob", {"seq": seq, "piece": piece})


def error(text: str) -> str:
    """The error line under the transcript (an empty text clears it)."""
    return render_to_string(f"{PAGE}#error", {"error": text, "oob": True})


def clear_error() -> str:
    return error("")


def controls(turns: int, min_turns: int, *, pending: bool = False) -> str:
    """The turn counter and the "End session" button (enabled once the minimum is met and no reply
    is being written; chat.js keeps it disabled while a reply is pending on the page)."""
    ctx = {"turns": turns, "min_turns": min_turns, "pending": pending, "oob": True}
    return render_to_string(f"{PAGE}#controls-oob", ctx)
