"""Shared prompt pieces for the reply of every arm whose reply prompt is ours (not a paper's verbatim).

The memory header is the same for every such arm and says nothing about how the memory was made, so
a reply that recites it does not tell the worker which arm they talk to (and
:func:`memory.hygiene.find_prompt_leak` catches the recital anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memory.hygiene import DATA_RULE, NO_RECITAL, data_block

PERSONA = (
    "You are a friendly chatbot having a casual conversation with a user. "
    "Reply in one or two short sentences, and ask a question now and then."
)

#: The one header of every memory block we write (full_history, memory_accumulate, memory_update, tim).
MEMORY_HEADER = "From your earlier conversations with this user:"


def memory_block(items: Sequence[str], *, bullet: str = "- ") -> str:
    """The neutral header and the items, quoted as data (empty when there is nothing to show)."""
    if not items:
        return ""
    return f"{MEMORY_HEADER}\n" + data_block("notes", "\n".join(f"{bullet}{x}" for x in items))


def system_prompt(now: datetime, memory_block: str = "") -> str:
    """The system message: persona, the simulated date, (optionally) what the arm remembers, and the
    rules that keep quoted data and the instructions out of the reply."""
    parts = [PERSONA, f"Today is {now:%A, %B %-d, %Y}."]
    if memory_block:
        parts.append(memory_block)
    if "</" in memory_block:
        parts.append(DATA_RULE)
    parts.append(NO_RECITAL)
    return "\n\n".join(parts)
