"""A study's persona cards as the researcher sees them: the bank, the event script session by session, one
card played through the script, and what to check in the design (the cards themselves: memory/cards.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory import cards
from studies.models import Study

OP_TITLES = {
    "mention": "bring up",
    "add": "new fact",
    "update": "changes",
    "forget": "ask to forget",
    "probe": "check (probe)",
}


@dataclass
class ScriptRow:
    session: int
    ops: dict[str, list[str]] = field(default_factory=dict)  # op -> slot labels

    @property
    def tasks(self) -> int:
        return sum(len(v) for v in self.ops.values())


def script_rows(script: cards.Script, bank: cards.Bank) -> list[ScriptRow]:
    """Per session, the facts of each kind of event (slots by their labels)."""
    rows = []
    for k in range(1, script.sessions + 1):
        row = ScriptRow(k)
        for e in script.of_session(k):
            label = bank.slots[e.slot].label if e.slot in bank.slots else e.slot
            row.ops.setdefault(OP_TITLES[e.op], []).append(label)
        rows.append(row)
    return rows


@dataclass
class Preview:
    bank: dict[str, Any]
    script_rows: list[ScriptRow]
    example: cards.EpisodePlan | None
    problems: list[str]
    script_is_default: bool
    bank_is_default: bool


def preview(study: Study) -> Preview | None:
    """What the study page shows about its persona cards (None when the study does not use them)."""
    if not study.persona_cards:
        return None
    try:
        bank = study.persona_bank()
        script = study.persona_script()
    except cards.CardError as exc:
        return Preview({}, [], None, [str(exc)], not study.card_script, study.card_bank_id is None)
    problems = cards.check_script(script, bank)
    example = None if problems else cards.plan_episode(bank, bank.cards[0], script)
    return Preview(bank.describe(), script_rows(script, bank), example, problems, not study.card_script,
                   study.card_bank_id is None)  # fmt: skip


def persona_warnings(study: Study) -> list[str]:
    """What a researcher should know about a study with persona cards (shown on the study and edit pages)."""
    if not study.persona_cards:
        return []
    try:
        script = study.persona_script()
    except cards.CardError:
        return []
    out = []
    busy = [k for k in range(1, script.sessions + 1) if len(script.of_session(k)) > study.min_user_turns]
    if busy:
        out.append(
            f"Persona cards: session(s) {', '.join(map(str, busy))} ask for more facts and probes than the minimum "
            f"of {study.min_user_turns} user turns; workers may end a session before they have done them all "
            "(facts not told are left out of the recall, and counted)."
        )
    if not any(e.op == "probe" for e in script.events):
        out.append(
            "Persona cards: the script has no in-session probe; memory is still probed after each session from "
            "the stored snapshot."
        )
    return out
