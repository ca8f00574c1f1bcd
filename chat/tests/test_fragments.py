"""The socket's fragments are written out in Python (chat/fragments.py) for speed; the page renders the
partials of chat/session.html. They must stay the same HTML, byte for byte, in every state."""

from __future__ import annotations

from typing import Any

import pytest
from django.template.loader import render_to_string

from chat import fragments
from chat.models import PROMPT_LEAK_ERROR, REPLY_TOO_SLOW, Message

TRICKY = "<b>a & b</b> \"quoted\" 'single' ü…"


def _template(partial: str, **ctx: Any) -> str:
    return render_to_string(f"{fragments.PAGE}#{partial}", ctx)


def _messages() -> list[Message]:
    out = []
    for speaker in ("user", "bot"):
        for status, error in (("complete", ""), ("pending", ""), ("failed", ""), ("failed", REPLY_TOO_SLOW),
                              ("failed", f"{PROMPT_LEAK_ERROR}: x")):  # fmt: skip
            for client_id in (None, "", "c-1<&>"):
                out.append(Message(seq=7, speaker=speaker, status=status, error=error, text=TRICKY,
                                   client_id=client_id))  # fmt: skip
    out.append(Message(seq=3, speaker=Message.Speaker.BOT, status=Message.Status.PENDING, text=""))
    return out


@pytest.mark.parametrize("retrying", [False, True])
@pytest.mark.parametrize("max_attempts", [None, 4])
def test_every_message_state_is_the_html_the_page_template_renders(retrying: bool, max_attempts: int | None) -> None:
    msgs = _messages()
    extra = {"retrying": retrying, "attempt": 3, "max_attempts": max_attempts}
    for m in msgs:
        expected = _template("messages-oob", messages_list=[m], **extra)
        assert fragments.message(m, **extra) == expected
    assert fragments.messages(msgs, **extra) == _template("messages-oob", messages_list=msgs, **extra)


def test_a_streamed_token_is_the_html_the_page_template_renders() -> None:
    for piece in ("word", " and", TRICKY, ""):
        assert fragments.token(12, piece) == _template("token-oob", seq=12, piece=piece)


def test_the_error_line_is_the_html_the_page_template_renders() -> None:
    for text in ("", "Your message is too long.", TRICKY):
        assert fragments.error(text) == _template("error", error=text, oob=True)
    assert fragments.clear_error() == _template("error", error="", oob=True)
    for refused in ("c-1", TRICKY):  # a message the server did not take: the page puts it back in the box
        assert fragments.error("Busy.", refused=refused) == _template("error", error="Busy.", oob=True, refused=refused)


def test_the_controls_are_the_html_the_page_template_renders() -> None:
    for min_turns in (0, 1, 3):
        for turns in (0, 1, 2, 3, 4):
            for pending in (False, True):
                for failed in (0, 2):
                    expected = _template(
                        "controls-oob", turns=turns, min_turns=min_turns, pending=pending, failed=failed, oob=True
                    )
                    assert fragments.controls(turns, min_turns, pending=pending, failed=failed) == expected
