"""How LLM calls are stored without growing quadratically with the conversation (issue 11).

A reply's prompt is the arm's system message followed by the whole session so far, so storing every
reply call's prompt in full stores the session once per turn: quadratic in turns (a 150-turn flood
grew the database by 49 MB). The session's turns are already stored as :class:`~chat.models.Message`
rows, so a reply call keeps its system message(s) and the newest turn in full and replaces the earlier
turns by one marker::

    {"role": "omitted", "content": "<n> earlier messages of this session (the transcript up to the
     user message before this reply)", "count": "<n>", "sha256": "<hash of the omitted messages>"}

The full prompt is the system message(s), then the session's user messages and completed replies
before the reply's ``seq`` (``chat.transcript.turns_of(session, upto_seq=seq - 1)``), as the arm got them;
the hash lets a researcher check a reconstruction. Calls of other purposes (memory updates) are stored
in full: they are made once per session or per turn, with prompts the arm bounds itself.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from chat.models import LLMCallRecord
from infra import sqlcache

COMPACTED_PURPOSES = frozenset({"reply"})
KEEP_LAST = 1  # the newest turn: what this reply answers


def compact_messages(messages: list[dict[str, Any]], purpose: str) -> list[dict[str, Any]]:
    """The prompt as stored: leading system messages and the newest turn in full, earlier turns
    replaced by a marker with their count and hash (reply calls only)."""
    if purpose not in COMPACTED_PURPOSES:
        return messages
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    middle = messages[head : max(head, len(messages) - KEEP_LAST)]
    if not middle:
        return messages
    digest = hashlib.sha256(json.dumps(middle, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
    marker = {
        "role": "omitted",
        "content": f"{len(middle)} earlier messages of this session (the transcript before this turn)",
        "count": str(len(middle)),
        "sha256": digest,
    }
    return [*messages[:head], marker, *messages[head + len(middle) :]]


def store_llm_calls(session_id: int, message_id: int | None, calls: list[dict[str, Any]]) -> None:
    """Store recorded LLM calls (``RecordingLLM.drain()`` dicts) as :class:`LLMCallRecord` rows; a reply's
    earlier turns are stored once, in the transcript, not again with every call (see above)."""
    rows = [
        LLMCallRecord(
            session_id=session_id,
            message_id=message_id,
            purpose=c.get("purpose") or "",
            model=c.get("model") or "",
            messages=compact_messages(c.get("messages") or [], c.get("purpose") or ""),
            reply=c.get("reply") or "",
            latency_ms=c.get("latency_ms") or 0,
            prompt_tokens=c.get("prompt_tokens"),
            completion_tokens=c.get("completion_tokens"),
            error=c.get("error") or "",
        )
        for c in calls
    ]
    if len(rows) == 1:
        sqlcache.insert(rows[0])  # one statement (bulk_create wraps even one row in a transaction)
    elif rows:
        LLMCallRecord.objects.bulk_create(rows)
