"""HTML fragments pushed over the websocket (htmx ws extension: every top-level element is an
out-of-band swap). Views render the same message partial, so a reload looks like the live page."""

from __future__ import annotations

from django.template.loader import render_to_string
from django.utils.html import format_html

from chat.models import Message


def message(msg: Message, *, retrying: bool = False, max_attempts: int | None = None) -> str:
    """A message, appended to the transcript (chat.js replaces an element with the same id in place)."""
    inner = render_to_string("chat/_message.html", {"m": msg, "retrying": retrying, "max_attempts": max_attempts})
    return f'<div hx-swap-oob="beforeend:#messages">{inner}</div>'


def messages(msgs: list[Message]) -> str:
    return "".join(message(m) for m in msgs)


def token(seq: int, piece: str) -> str:
    """One streamed piece of a reply, appended to its (escaped) text."""
    return format_html('<div hx-swap-oob="beforeend:#msg-{}-text"><span>{}</span></div>', seq, piece)


def error(text: str) -> str:
    return format_html('<div id="chat-error" class="chat-error" role="alert" hx-swap-oob="true">{}</div>', text)


def clear_error() -> str:
    return '<div id="chat-error" class="chat-error" role="alert" hx-swap-oob="true"></div>'


def controls(turns: int, min_turns: int) -> str:
    """The turn counter and the "End session" button (enabled once the minimum is met)."""
    ctx = {"turns": turns, "min_turns": min_turns, "oob": True}
    return render_to_string("chat/_turn_info.html", ctx) + render_to_string("chat/_end_button.html", ctx)
