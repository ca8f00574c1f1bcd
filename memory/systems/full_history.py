"""``full_history``: all past sessions before the current one, truncated from the front to the model's
context (Keep Me Updated "History accumulate"; Rsum's vanilla LLM baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update, chat_turns
from memory.hygiene import data_block
from memory.systems.prompts import MEMORY_HEADER, system_prompt


def approx_tokens(text: str) -> int:
    # ~4 characters per token for English: a model-free estimate, good enough for a budget.
    return len(text) // 4 + 1


class FullHistory(BaseSystem):
    name = "full_history"
    label = "History accumulate"
    source = "Keep Me Updated (Bae et al. 2022) 'History accumulate', Appendix D"
    params = {
        "max_history_tokens": Param(
            2500,
            "Token budget for past sessions; the oldest turns are dropped first.",
            "fits SmolLM2's 4k context window",
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {"sessions": []}

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        return [Stored("dialogue history", t["text"]) for past in state.get("sessions", []) for t in past["turns"]]

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        lines: list[str] = []
        for i, past in enumerate(state.get("sessions", []), start=1):
            lines.append(f"[Session {i}, {past['date']}]")
            lines.extend(f"{'User' if t['speaker'] == 'user' else 'Bot'}: {t['text']}" for t in past["turns"])
        budget = int(self.p["max_history_tokens"])
        kept: list[str] = []
        used = 0
        for line in reversed(lines):  # truncate from the front: keep the most recent lines
            used += approx_tokens(line)
            if used > budget:
                break
            kept.append(line)
        kept.reverse()
        block = f"{MEMORY_HEADER}\n{data_block('conversation', chr(10).join(kept))}" if kept else ""
        return Prompt([ChatMessage("system", system_prompt(now, block)), *chat_turns(session)], memory=kept)

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        sessions = [
            *state.get("sessions", []),
            {"date": f"{now:%Y-%m-%d}", "turns": [{"speaker": t.speaker, "text": t.text} for t in session]},
        ]
        return Update(state={"sessions": sessions}, trace={"appended_turns": len(session)})
