"""What of a model's output reaches the worker, and when.

A reply is cleaned of a leading speaker label and of the user's turn a small model may go on to write
(:func:`clean_reply`); an empty or wordless reply is a transient failure (:func:`check_reply`). While it
streams, the last words are held back until the leak check has seen what follows them
(:func:`shown_prefix`); a reply that recites its prompt raises :class:`PromptLeakError`.

The token cap (the cut itself: :func:`memory.hygiene.end_at_sentence`): a reply that hit
``LLM_MAX_TOKENS`` stops wherever the cap fell ("...and I'll"). When the backend says so (a stream with
``finish_reason == "length"``), or, for backends that do not report a finish reason, when the stream
produced at least ``max_tokens`` pieces (streamed pieces are tokens for llama.cpp and the
OpenAI-compatible servers we know), the reply is cut back to its last complete sentence. A reply
without any complete sentence is kept, ending in "…", so the worker sees a reply that trails off
rather than nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from chat.models import PROMPT_LEAK_ERROR
from memory.hygiene import LEAK_MIN_WORDS, PromptLeak
from memory.llm import LLMTransientError

_WORD = re.compile(r"\w")


# Small models sometimes label their reply ("Bot: ...") or go on to write the user's next turn.
_OWN_LABEL = re.compile(r"^\s*(?:bot|assistant|chatbot|ai)\s*:\s*", re.IGNORECASE)
_USER_TURN = re.compile(r"(?:^|\n)\s*(?:user|human|you)\s*:", re.IGNORECASE)


def clean_reply(text: str) -> str:
    """The reply as the worker should see it: without a leading speaker label, and cut where the
    model starts writing the user's side of the dialogue."""
    text = _OWN_LABEL.sub("", text.strip(), count=1)
    cut = _USER_TURN.search(text)
    return (text[: cut.start()] if cut else text).strip()


def check_reply(text: str) -> str:
    """The cleaned reply; an empty or wordless one is a transient failure (the attempt is retried)."""
    text = clean_reply(text)
    if not text or not _WORD.search(text):
        raise LLMTransientError(f"the model returned an empty or unusable reply ({text[:40]!r})")
    return text


#: ``Message.error`` of a reply failed because the model recited its prompt twice (the worker sees
#: ``Message.failure_text``, never the reply).
LEAK_ERROR = PROMPT_LEAK_ERROR

_TOKEN = re.compile(r"\S+")


def shown_prefix(text: str, *, hold_back: int = LEAK_MIN_WORDS) -> int:
    """How much of a reply being streamed may be shown yet: everything but its last ``hold_back``
    whitespace-separated pieces. A run of prompt text is caught once it is LEAK_MIN_WORDS words long,
    so holding back that many pieces means no word of a leak reaches the worker before it is caught."""
    ends = [m.end() for m in _TOKEN.finditer(text)]
    return ends[-hold_back - 1] if len(ends) > hold_back else 0


class PromptLeakError(Exception):
    """The reply recites the prompt (system prompt, memory header, few-shot examples or a data tag)."""

    def __init__(self, leak: PromptLeak) -> None:
        super().__init__(f"{LEAK_ERROR}: {leak.source} text in the reply ({leak.words} words: {leak.text[:120]!r})")
        self.leak = leak


def hit_token_cap(stream: Iterator[str] | object, pieces: int, max_tokens: int) -> bool:
    """Whether a finished stream stopped at the token cap: the backend's finish reason when it
    reports one, else whether it produced ``max_tokens`` pieces."""
    return finish_reason(stream, pieces, max_tokens) == "length"


def finish_reason(stream: Iterator[str] | object, pieces: int, max_tokens: int) -> str | None:
    """The stream's finish reason, with ``"length"`` inferred from the piece count for backends that
    report none (what :func:`memory.hygiene.end_at_sentence` expects)."""
    reported = getattr(stream, "finish_reason", None)
    if reported is not None:
        return str(reported)
    return "length" if pieces >= max_tokens else None
