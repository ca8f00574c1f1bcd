"""The HTML the socket sends: the partials of ``chat/session.html``, written out in Python.

The page renders the partials of ``chat/session.html`` (so a reload looks like the live page); the
socket sends the same HTML built here, because rendering them through the template engine was about a
millisecond each and a chat turn sends five (issue 12, turn cost). ``chat/tests/test_fragments.py``
renders the template's partials and checks that these functions produce the same bytes for every
state of a message and of the controls: change both together. Every value is escaped as the template
escapes it (``conditional_escape``). Over the socket every top-level element is an out-of-band swap
(htmx ws extension); chat.js replaces a message element that arrives again with the same id."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils.html import conditional_escape as esc

from chat.models import Message

PAGE = "chat/session.html"

_TYPING = '<span class="typing" aria-label="The chatbot is typing"><i></i><i></i><i></i></span>'


def _message(m: Message, retrying: bool, max_attempts: int | None) -> str:
    """The ``message`` partial of the page."""
    seq, status = int(m.seq), esc(m.status)
    client = f' data-client-id="{esc(m.client_id)}"' if m.client_id else ""
    who = "You" if m.speaker == "user" else "Chatbot"
    text = esc(m.text) if m.status != "failed" else ""
    tail = ""
    if m.status == "pending":
        tail = _TYPING
        if retrying:
            tail += (
                '<span class="retrying" role="status">The chatbot is having trouble answering. Retrying (attempt '
                f"{m.attempts + 1} of {max_attempts})…</span>"
            )
    elif m.status == "failed":
        tail = (
            f'<span class="failed" role="alert">{esc(m.failure_text)}</span> '
            f'<button type="button" class="secondary small" data-retry="{seq}">Retry</button>'
        )
    return (
        f'<div class="msg {esc(m.speaker)} {status}" id="msg-{seq}" data-seq="{seq}" data-status="{status}"{client}>\n'
        f'  <div class="bubble"><span class="who">{who}</span><span class="text" id="msg-{seq}-text">{text}</span>'
        f"{tail}</div>\n</div>"
    )


def message(msg: Message, *, retrying: bool = False, max_attempts: int | None = None) -> str:
    """A message, appended to the transcript; ``retrying`` shows the attempt counter of a pending reply."""
    return messages([msg], retrying=retrying, max_attempts=max_attempts)


def messages(msgs: Iterable[Message], *, retrying: bool = False, max_attempts: int | None = None) -> str:
    """Messages appended to the transcript, in order (the ``messages-oob`` partial)."""
    return "".join(f'<div hx-swap-oob="beforeend:#messages">{_message(m, retrying, max_attempts)}</div>' for m in msgs)


def token(seq: int, piece: str) -> str:
    """One streamed piece of a reply, appended to its (escaped) text (the ``token-oob`` partial)."""
    return f'<div hx-swap-oob="beforeend:#msg-{int(seq)}-text"><span>{esc(piece)}</span></div>'


def error(text: str, *, refused: str = "") -> str:
    """The error line under the transcript (an empty text clears it; the ``error`` partial, out of band).
    ``refused``: the client id of a message the server did not take; the page puts its text back in the box."""
    mark = f' data-refused="{esc(refused)}"' if refused else ""
    return f'<div id="chat-error" class="chat-error" role="alert" hx-swap-oob="true"{mark}>{esc(text)}</div>'


def clear_error() -> str:
    return error("")


def controls(turns: int, min_turns: int, *, pending: bool = False, failed: int = 0) -> str:
    """The turn counter and the "End session" button (enabled once the minimum is met and no reply
    is being written; chat.js keeps it disabled while a reply is pending on the page): the
    ``controls-oob`` partial. ``turns`` counts the worker's turns the bot *answered* (the minimum counts
    only those); ``failed`` is the number of the bot's failed messages, which the worker is told do not count."""
    if turns < min_turns:
        plural = "" if min_turns == 1 else "s"
        if failed:
            info = (
                f"Send at least {int(min_turns)} message{plural} that the chatbot answers ({int(turns)} answered so "
                "far; a reply that failed does not count: press Retry under it, or write again), then end the session."
            )
        else:
            info = (
                f"Send at least {int(min_turns)} message{plural} ({int(turns)} answered so far), then end the session."
            )
    else:
        info = "You can end the session whenever you like."
    met = "1" if turns >= min_turns else "0"
    disabled = ' disabled aria-disabled="true"' if turns < min_turns or pending else ""
    return (
        f'<span id="turn-info" class="turns muted" hx-swap-oob="true">{info}</span>'
        f'<button type="submit" class="secondary" id="end-session" data-min-met="{met}" hx-swap-oob="true"'
        f"{disabled}>End session</button>"
    )
