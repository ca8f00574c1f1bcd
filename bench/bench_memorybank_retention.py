"""How much MemoryBank keeps after the gaps of a study, for its forgetting settings.

    .venv/bin/python bench/bench_memorybank_retention.py

Two tables: (1) the retention R of a memory unit stored once and never recalled (strength 1) after a
gap of D days of the study's clock, from ``memory.systems.memorybank.retention_after``; (2) a replay of
the arm itself: ``users`` scripted users, 5 sessions each with gaps drawn uniformly from 7-14 days, the
share of session-1 units still in memory when session 5 starts (the forgetting draws are the arm's own).
"""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.base import Turn  # noqa: E402
from memory.embed import HashingEmbedder  # noqa: E402
from memory.llm import ScriptedLLM  # noqa: E402
from memory.systems.memorybank import MemoryBank, retention_after  # noqa: E402

SETTINGS: dict[str, dict[str, Any]] = {
    "default (time scale 7 days)": {},
    "time scale 10.5 days (mean gap of 7-14)": {"forgetting_time_scale_days": 10.5},
    "time scale 1 day (the paper's days taken literally)": {"forgetting_time_scale_days": 1.0},
    "code_intended curve, time scale 1": {"forgetting_curve": "code_intended", "forgetting_time_scale_days": 1.0},
}


def replay(params: dict[str, Any], users: int, seed: int) -> float:
    rng = random.Random(seed)
    kept = total = 0
    for u in range(users):
        system = MemoryBank(
            llm=ScriptedLLM(["A short summary of the day."]), embedder=HashingEmbedder(), seed=u, **params
        )
        state = system.initial_state()
        at = datetime(2026, 3, 2, 18, tzinfo=UTC)
        first_day = f"{at:%Y-%m-%d}"
        for k in range(5):
            if k == 4:  # session 5 starts: what does the arm still hold from session 1?
                state, _ = system.loaded(state, f"{at:%Y-%m-%d}")
                kept += len(state["history"].get(first_day, []))
                total += 6
                break
            session = []
            for i in range(6):
                t = at + timedelta(minutes=2 * i)
                session += [Turn("user", f"user {u} fact {k}-{i}", t), Turn("bot", "I see.", t)]
                state = system.after_turn(state, session, t).state
            state = system.end_session(state, session, at + timedelta(minutes=15)).state
            at += timedelta(days=rng.randint(7, 14))
    return kept / total


def main() -> int:
    gaps = (1, 7, 10, 14, 28)
    print("| setting | " + " | ".join(f"R after {d} d" for d in gaps) + " | session-1 units kept at session 5 |")
    print("|---|" + "---|" * (len(gaps) + 1))
    for label, params in SETTINGS.items():
        rs = " | ".join(f"{retention_after(d, params):.3f}" for d in gaps)
        print(f"| {label} | {rs} | {replay(params, users=200, seed=1):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
