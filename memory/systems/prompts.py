"""Shared prompt pieces for the reply of every arm."""

from __future__ import annotations

from datetime import datetime

PERSONA = (
    "You are a friendly chatbot having a casual conversation with a user. "
    "Reply in one or two short sentences, and ask a question now and then."
)


def system_prompt(now: datetime, memory_block: str = "") -> str:
    """The system message: persona, the simulated date, and (optionally) what the arm remembers."""
    parts = [PERSONA, f"Today is {now:%A, %B %-d, %Y}."]
    if memory_block:
        parts.append(memory_block)
    return "\n\n".join(parts)
