"""What a finished reply looks like to the worker: ending at a sentence, not at the token cap.

A reply that hit ``LLM_MAX_TOKENS`` stops wherever the cap fell ("...and I'll"). When the backend
says so (a stream with ``finish_reason == "length"``), or, for backends that do not report a finish
reason, when the stream produced at least ``max_tokens`` pieces (streamed pieces are tokens for
llama.cpp and the OpenAI-compatible servers we know), the reply is cut back to its last complete
sentence. A reply without any complete sentence is kept, ending in "…", so the worker sees a reply
that trails off rather than nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# A sentence ends at . ! ? or … , optionally followed by closing quotes/brackets, then space or the end.
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s|$)")
_TRAILING_JUNK = " ,;:-–—"


def hit_token_cap(stream: Iterator[str] | object, pieces: int, max_tokens: int) -> bool:
    """Whether a finished stream stopped at the token cap: the backend's finish reason when it
    reports one, else whether it produced ``max_tokens`` pieces."""
    reason = getattr(stream, "finish_reason", None)
    if reason is not None:
        return bool(reason == "length")
    return pieces >= max_tokens


def end_at_sentence(text: str) -> str:
    """``text`` up to and including its last complete sentence; with none, the text followed by "…"."""
    text = text.rstrip()
    ends = list(_SENTENCE_END.finditer(text))
    if ends:
        return text[: ends[-1].end()].rstrip()
    stripped = text.rstrip(_TRAILING_JUNK)
    return f"{stripped}…" if stripped else stripped
