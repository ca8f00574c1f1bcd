"""``none``: the current session only (Keep Me Updated "Without memory"; Rsum "W/O memory")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory.base import BaseSystem, ChatMessage, Prompt, Turn, chat_turns
from memory.systems.prompts import system_prompt


class NoMemory(BaseSystem):
    name = "none"
    label = "Without memory"
    source = "Keep Me Updated (Bae et al. 2022) 'Without memory'; Rsum 'W/O memory'"
    params = {}

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        return Prompt([ChatMessage("system", system_prompt(now)), *chat_turns(session)])
