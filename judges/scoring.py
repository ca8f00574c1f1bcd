"""One judge call: a session scored on one statement, or one answer labelled CORRECT/WRONG.

The judge is any :class:`memory.llm.LLM` (an OpenAI-compatible endpoint in a study, a fake in the tests).
Its answer is read from a JSON object (``{"score": 55}`` / ``{"label": "CORRECT"}``); an answer that cannot
be read gives ``None`` and keeps the raw text, so it is counted and shown, never guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from judges.prompts import Prompt
from memory.evalscore import ask_label
from memory.llm import LLM, LLMError, LLMTransientError

_OBJECT = re.compile(r"\{[^{}]*\}")
MAX_TRANSCRIPT_CHARS = 24000  # a session longer than this is cut from the start (the end is what was rated)


def transcript_text(turns: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'User' if t.get('speaker') == 'user' else 'Bot'}: {t.get('text', '')}" for t in turns]
    text = "\n".join(lines)
    return text[-MAX_TRANSCRIPT_CHARS:]


def parse_score(reply: str) -> float | None:
    """The last JSON object's ``score`` in ``reply``, if it is a number from 0 to 100."""
    found: float | None = None
    for match in _OBJECT.finditer(reply or ""):
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict):
            continue
        score = next((v for k, v in value.items() if str(k).strip().lower() == "score"), None)
        if isinstance(score, (int, float)) and not isinstance(score, bool) and 0 <= score <= 100:
            found = float(score)
        elif isinstance(score, str):
            try:
                number = float(score)
            except ValueError:
                continue
            if 0 <= number <= 100:
                found = number
    return found


def score_session(
    judge: LLM, prompt: Prompt, turns: Sequence[dict[str, Any]], statement: dict[str, str]
) -> tuple[float | None, str]:
    """(score or None, raw reply). Transient errors (rate limits, timeouts) propagate for the job to retry;
    any other LLM error is a reply that could not be read."""
    text = prompt.render(
        statement=statement["statement"],
        low=statement.get("low", "Strongly disagree"),
        high=statement.get("high", "Strongly agree"),
        transcript=transcript_text(turns),
    )
    try:
        reply = judge.complete([{"role": "user", "content": text}], max_tokens=200, purpose="judge").text
    except LLMTransientError:
        raise
    except LLMError as exc:
        return None, f"judge error: {exc}"
    return parse_score(reply), reply


def label_answer(judge: LLM, prompt: Prompt, question: str, gold: str, answer: str) -> tuple[int | None, str]:
    """(1 CORRECT / 0 WRONG / None unreadable, raw reply) for one answer."""
    return ask_label(judge, prompt.render(question=question, gold=gold, answer=answer))
