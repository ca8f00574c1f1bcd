"""The HTML the socket sends: the partials of ``chat/session.html``, rendered from the template only.

The page renders these partials inline (so a reload looks like the live page) and the socket sends the
same partials, by name. Rendering a partial through the template engine costs 15-30 times what writing
its HTML out costs (``bench/bench_fragments.py``), and a chat turn sends one per streamed piece of the
reply, so each partial is rendered through the engine once per *shape* and kept as a stencil: the
values that only appear in the HTML (a message's text, its sequence number, a turn count) are rendered
as markers and later filled in, escaped as the template escapes them (``conditional_escape``); the
values the template branches on (a message's speaker and status, whether a reply is retrying, whether
the minimum of turns is met) pick the stencil. The HTML is written only in the template; change it
there. ``chat/tests/test_fragments.py`` checks the stencils against the engine's own rendering in every
state. Over the socket every top-level element is an out-of-band swap (htmx ws extension); chat.js
replaces a message element that arrives again with the same id.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Hashable, Iterable
from types import SimpleNamespace
from typing import Any

from django.template.loader import get_template
from django.utils.html import conditional_escape

from chat.models import Message

PAGE = "chat/session.html"

_MARK = "\x1f{}\x1f"
_SPLIT = re.compile("\x1f(\\d+)\x1f")


class _Int(int):
    """An int that compares as its value but renders as marker ``slot`` (the template may test it)."""

    slot: int

    def __new__(cls, value: int, slot: int) -> _Int:
        obj = super().__new__(cls, value)
        obj.slot = slot
        return obj

    def __str__(self) -> str:
        return _MARK.format(self.slot)

    __repr__ = __str__


def _str(slot: int) -> str:
    return _MARK.format(slot)


class _Stencil:
    """A partial rendered once per shape (``key``), with markers where the values go."""

    def __init__(self, partial: str) -> None:
        self.partial = partial
        self._shapes: dict[Hashable, tuple[str, list[tuple[int, str]]]] = {}
        self._lock = threading.Lock()

    def fill(self, key: Hashable, probe: Callable[[], dict[str, Any]], values: list[str]) -> str:
        """The partial in shape ``key`` with ``values`` (escaped already) in its marker slots; ``probe``
        gives the context to render the shape with the first time it is asked for."""
        shape = self._shapes.get(key)
        if shape is None:
            html = get_template(f"{PAGE}#{self.partial}").render(probe())
            parts = _SPLIT.split(html)
            shape = (parts[0], [(int(parts[i]), parts[i + 1]) for i in range(1, len(parts), 2)])
            with self._lock:
                self._shapes[key] = shape
        head, rest = shape
        return head + "".join(values[slot] + tail for slot, tail in rest)


def _esc(value: Any) -> str:
    return str(conditional_escape(value))


_MESSAGE = _Stencil("messages-oob")
_TOKEN = _Stencil("token-oob")
_ERROR = _Stencil("error")
_CONTROLS = _Stencil("controls-oob")


def _message(m: Message, retrying: bool, attempt: int | None, max_attempts: int | None) -> str:
    """One message in the ``messages-oob`` partial (slots: seq, client id, text, failure, attempts)."""
    failed = m.status == Message.Status.FAILED
    key = (m.speaker, m.status, bool(m.client_id), retrying, max_attempts is not None)

    def probe() -> dict[str, Any]:
        shown = SimpleNamespace(
            speaker=m.speaker, status=m.status, seq=_Int(int(m.seq), 0), client_id=_str(1) if m.client_id else "",
            text=_str(2), failure_text=_str(3),
        )  # fmt: skip
        return {
            "messages_list": [shown],
            "retrying": retrying,
            "attempt": _str(4),
            "max_attempts": _str(5) if max_attempts is not None else None,
        }

    values = [
        str(int(m.seq)), _esc(m.client_id or ""), _esc(m.text), _esc(m.failure_text) if failed else "",
        _esc(attempt), _esc(max_attempts) if max_attempts is not None else "",
    ]  # fmt: skip
    return _MESSAGE.fill(key, probe, values)


def message(
    msg: Message, *, retrying: bool = False, attempt: int | None = None, max_attempts: int | None = None
) -> str:
    """A message, appended to the transcript; ``retrying`` shows the attempt counter of a pending reply
    (the ``attempt`` about to start, of ``max_attempts``)."""
    return _message(msg, retrying, attempt, max_attempts)


def messages(
    msgs: Iterable[Message], *, retrying: bool = False, attempt: int | None = None, max_attempts: int | None = None
) -> str:
    """Messages appended to the transcript, in order (the ``messages-oob`` partial)."""
    return "".join(_message(m, retrying, attempt, max_attempts) for m in msgs)


def token(seq: int, piece: str) -> str:
    """One streamed piece of a reply, appended to its (escaped) text (the ``token-oob`` partial)."""
    return _TOKEN.fill((), lambda: {"seq": _Int(int(seq), 0), "piece": _str(1)}, [str(int(seq)), _esc(piece)])


def error(text: str, *, refused: str = "") -> str:
    """The error line under the transcript (an empty text clears it; the ``error`` partial, out of band).
    ``refused``: the client id of a message the server did not take; the page puts its text back in the box."""
    if refused:
        return _ERROR.fill(
            "refused", lambda: {"error": _str(0), "oob": True, "refused": _str(1)}, [_esc(text), _esc(refused)]
        )
    return _ERROR.fill((), lambda: {"error": _str(0), "oob": True}, [_esc(text)])


def clear_error() -> str:
    return error("")


def controls(turns: int, min_turns: int, *, pending: bool = False, failed: int = 0) -> str:
    """The turn counter and the "End session" button (enabled once the minimum is met and no reply
    is being written; chat.js keeps it disabled while a reply is pending on the page): the
    ``controls-oob`` partial. ``turns`` counts the worker's turns the bot *answered* (the minimum counts
    only those); ``failed`` is the number of the bot's failed messages, which the worker is told do not count."""
    turns, min_turns, failed = int(turns), int(min_turns), int(failed)
    key = (turns < min_turns, min_turns == 1, pending, bool(failed))

    def probe() -> dict[str, Any]:
        return {"turns": _Int(turns, 0), "min_turns": _Int(min_turns, 1), "pending": pending, "failed": failed,
                "oob": True}  # fmt: skip

    return _CONTROLS.fill(key, probe, [str(turns), str(min_turns)])
