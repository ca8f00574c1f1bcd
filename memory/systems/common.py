"""Helpers shared by the arms: LLM calls with logged fallbacks, reply parsing, retrieval, time.

Every arm records each fallback it takes in ``trace["fallbacks"]`` (a list of
``{"where", "reason", "raw"}`` dicts) and logs it on the ``memory`` logger, so a researcher can see
when the model's reply did not parse and what the arm did instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memory.base import Turn
from memory.embed import Embedder
from memory.hygiene import echoes_prompt, strip_tags
from memory.llm import FINISH_LENGTH, LLM, LLMError, LLMTransientError

log = logging.getLogger("memory")

# Appended to every arm's reply instruction so that arms differ by memory, not by reply length
# (crowdworkers rate every arm in the same chat window). Off with the arm parameter short_replies=False.
SHORT_REPLIES = "Reply in one or two short sentences."


def fallback(trace: dict[str, Any], where: str, reason: str, raw: str = "") -> None:
    """Record (and log) that the arm fell back to its defined behaviour at ``where``."""
    trace.setdefault("fallbacks", []).append({"where": where, "reason": reason, "raw": raw})
    log.warning("memory fallback at %s: %s (reply: %.200r)", where, reason, raw)


def ask(
    llm: LLM | None,
    messages: list[dict[str, str]],
    *,
    purpose: str,
    max_tokens: int,
    trace: dict[str, Any],
    temperature: float = 0.0,
    allow_cut: bool = False,
    structured: bool = False,
) -> str | None:
    """One completion for a memory task; ``None`` (with a recorded fallback) when there is no usable
    output, so the caller keeps its previous state:

    - the call failed for good (a non-transient :class:`LLMError`);
    - the output was cut at the token limit (finish reason ``"length"``): a cut summary or thought
      list ends in half a sentence or misses its last items. ``allow_cut=True`` for tasks whose
      answer comes first (an operation label);
    - the output repeats the prompt's instructions (:func:`memory.hygiene.echoes_prompt`: a run of
      15+ words of them, or 7-word runs making up 40% of the output): a model that echoes its
      prompt has not done the task. ``structured=True`` for JSON answers in a format the prompt
      shows by example: only the long run counts then (see :func:`memory.hygiene.echoes_prompt`).

    Transient errors (timeouts, rate limits, 5xx) propagate: every update is a pure function of the
    stored state, so the caller (a Celery task) can retry the whole update safely."""
    if llm is None:
        fallback(trace, purpose, "no LLM configured")
        return None
    try:
        out = llm.complete(messages, max_tokens=max_tokens, temperature=temperature, purpose=purpose)
    except LLMTransientError:
        raise
    except LLMError as exc:
        fallback(trace, purpose, f"LLM error: {exc}")
        return None
    if out.finish_reason == FINISH_LENGTH and not allow_cut:
        fallback(trace, purpose, f"output cut at the token limit ({max_tokens} tokens): discarded", out.text)
        return None
    leak = echoes_prompt(out.text, messages, structured=structured)
    if leak is not None:
        fallback(
            trace, purpose, f"the output repeats the prompt ({leak.words} words: {leak.text!r}): discarded", out.text
        )
        return None
    return strip_tags(out.text)


_BULLET = re.compile(r"^\s*(?:[-*\u2022>]+|\(?\d{1,3}[.):]|\[\d{1,3}\])\s*")


def parse_lines(text: str | None, *, drop: Sequence[str] = ()) -> list[str]:
    """The non-empty lines of a reply, without list bullets or numbering, deduplicated in order.

    Lines equal (case-insensitively, without final punctuation) to an entry of ``drop`` are removed:
    e.g. "NONE" or an echoed heading."""
    if not text:
        return []
    dropped = {d.lower().strip(" .:") for d in drop}
    out: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip().strip('"').strip()
        key = line.lower().strip(" .:")
        if not line or key in dropped or key in seen:
            continue
        seen.add(key)
        out.append(line)
    return out


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences (on ., ! or ? followed by a capital), dropping empty pieces."""
    return [s.strip() for s in _SENTENCE.split(text.replace("\n", " ")) if s.strip()]


def top_indices(scores: np.ndarray, k: int, ids: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first, ties broken by the smaller id (``ids``,
    default the position): the order of a stable descending sort, in O(n) rather than O(n log n)."""
    scores = np.asarray(scores)
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.intp)
    if k < n:
        kth = np.partition(scores, n - k)[n - k]  # the k-th largest value
        cand = np.flatnonzero(scores >= kth)  # every tie of it too, so the tie-break below is exact
    else:
        cand = np.arange(n)
    keys = cand if ids is None else np.asarray(ids)[cand]
    order = np.lexsort((keys, -scores[cand]))[:k]
    return cand[order]


def top_k(query: np.ndarray, matrix: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Indices and cosine scores of the ``k`` rows of ``matrix`` closest to ``query`` (unit rows).

    Ties are broken by index (stable), so retrieval is deterministic."""
    if matrix.shape[0] == 0 or k <= 0:
        return []
    scores = matrix @ query.reshape(-1)
    return [(int(i), float(scores[i])) for i in top_indices(scores, k)]


def embed_texts(embedder: Embedder | None, texts: Sequence[str]) -> np.ndarray:
    if embedder is None:
        raise RuntimeError("this memory system needs an embedder (build it with embedder=make_embedder(...))")
    return embedder.embed(list(texts))


def last_user_text(session: Sequence[Turn]) -> str:
    return next((t.text for t in reversed(session) if t.speaker == "user"), "")


def last_exchange(session: Sequence[Turn]) -> tuple[str, str] | None:
    """(user message, bot reply) if the session ends with a bot reply that answers a user message."""
    if len(session) >= 2 and session[-1].speaker == "bot" and session[-2].speaker == "user":
        return session[-2].text, session[-1].text
    return None


def aware(dt: datetime) -> datetime:
    """Treat naive datetimes as UTC so that gaps can always be computed."""
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def iso(dt: datetime) -> str:
    return aware(dt).isoformat()


def parse_iso(text: str) -> datetime:
    return aware(datetime.fromisoformat(text))


def turn_time(turn: Turn, now: datetime) -> datetime:
    return aware(turn.at) if turn.at is not None else aware(now)


def render_lines(items: Sequence[str], *, bullet: str = "- ") -> str:
    return "\n".join(f"{bullet}{x}" for x in items)
