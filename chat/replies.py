"""Whether a streamed reply stopped at the token cap (the cut itself: :func:`memory.hygiene.end_at_sentence`).

A reply that hit ``LLM_MAX_TOKENS`` stops wherever the cap fell ("...and I'll"). When the backend
says so (a stream with ``finish_reason == "length"``), or, for backends that do not report a finish
reason, when the stream produced at least ``max_tokens`` pieces (streamed pieces are tokens for
llama.cpp and the OpenAI-compatible servers we know), the reply is cut back to its last complete
sentence. A reply without any complete sentence is kept, ending in "…", so the worker sees a reply
that trails off rather than nothing.
"""

from __future__ import annotations

from collections.abc import Iterator


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
