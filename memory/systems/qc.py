"""``qc``: a deliberately degraded quality-control bot (Ji et al., ACL 2022), no LLM.

Ji et al. put a degraded "QualityControl" bot in every worker's set of live conversations and test
per worker (one-sided Mann-Whitney U) whether its ratings are lower than the real bots' (memeval's
analysis does that test: ``analysis/qc.py``). Their released conversations (TianboJi/Dialogue-Eval,
MIT, ``dialogue_data/HIT_detail``) show what the bot said: fluent chat sentences from other
conversations, degraded at the word level ("I have a raw diet. And black.", "I me out go kayaking",
"Are That kidding?"), i.e. replies that ignore the worker and read wrong.

Our variant: every reply is a bot utterance drawn from an unrelated dialogue, the English MemoryBank
GVD set that ships in ``memory/data/gvd/`` (MIT, Copyright (c) 2023 Wanjun Zhong): the first one or
two sentences of a companion-bot reply to some other user, never one naming a GVD user. Of a few
candidate draws the one sharing the fewest words with the worker's message is kept, so the reply
ignores what the worker said. ``degrade="words"`` (default) then drops and shuffles words as in Ji
et al.'s released QC replies; ``degrade="none"`` keeps the drawn sentence fluent (off-topic only).

Deterministic: the draw is a hash of (seed, session number, turn number, the worker's message), with
the seed kept in the state. The platform streams ``Prompt.reply`` as it is, without an LLM call.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update, chat_turns
from memory.systems.common import split_sentences
from memory.systems.prompts import system_prompt

CORPUS = Path(__file__).resolve().parent.parent / "data" / "gvd" / "memory_bank_en.json"
_WORD = re.compile(r"[a-z']+")


@lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    """The replies to draw from: the first one or two sentences (at most 30 words) of each GVD bot
    response that names no GVD user and does not say "AI"/"companion" about itself."""
    data = json.loads(CORPUS.read_text(encoding="utf-8"))
    names = {w.lower() for key in data for w in key.split()}
    out: list[str] = []
    for record in data.values():
        for pairs in record.get("history", {}).values():
            for pair in pairs:
                sentences = split_sentences(str(pair.get("response", "")))
                text = ""
                for s in sentences[:2]:
                    if len((text + " " + s).split()) > 30:
                        break
                    text = f"{text} {s}".strip()
                words = set(_WORD.findall(text.lower()))
                usable = len(text.split()) >= 5 and not words & (names | {"ai", "companion", "assistant"})
                if usable and text not in out:
                    out.append(text)
    return tuple(out)


def degrade_words(text: str, rng: random.Random) -> str:
    """Ji et al.-style word salad: drop about a quarter of the words, then shuffle a span of the rest."""
    words = text.split()
    kept = [w for w in words if rng.random() > 0.25] or words[:1]
    if len(kept) >= 4:
        start = rng.randrange(0, len(kept) - 3)
        span = kept[start : start + max(3, len(kept) // 2)]
        rng.shuffle(span)
        kept[start : start + len(span)] = span
    out = " ".join(kept)
    return out[0].upper() + out[1:] if out else out


def overlap(a: str, b: str) -> int:
    return len(
        {w for w in _WORD.findall(a.lower()) if len(w) > 3} & {w for w in _WORD.findall(b.lower()) if len(w) > 3}
    )


def draw(seed: int, session: int, turn: int, message: str, *, candidates: int, degrade: str) -> str:
    """The QC reply for this point of the episode (pure, deterministic)."""
    key = f"{seed}|{session}|{turn}|{message}".encode()
    rng = random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))
    pool = corpus()
    picks = [pool[rng.randrange(len(pool))] for _ in range(max(1, candidates))]
    reply = min(picks, key=lambda s: overlap(s, message))  # min keeps the first of equals: deterministic
    if degrade == "words":
        return degrade_words(reply, rng)
    if degrade == "none":
        return reply
    raise ValueError(f"qc: degrade must be 'words' or 'none', not {degrade!r}")


class QualityControl(BaseSystem):
    name = "qc"
    label = "Quality control (degraded, no LLM)"
    source = (
        "Ji et al., ACL 2022 (QualityControl bot; TianboJi/Dialogue-Eval, MIT); replies from the GVD set "
        "(MIT) in memory/data/gvd"
    )
    is_qc = True
    params = {
        "degrade": Param(
            "words",
            "words: drop and shuffle words (Ji et al.'s QC replies); none: fluent but unrelated replies.",
            "Ji et al. 2022 released QC conversations",
        ),
        "candidates": Param(
            8,
            "Draws per reply; the one sharing the fewest words with the worker's message is sent.",
            "ours (makes the reply ignore the message)",
        ),
        "seed": Param(0, "Seed of the draws (kept in the state).", "ours"),
    }

    def initial_state(self) -> dict[str, Any]:
        return {"seed": int(self.p["seed"]), "sessions": 0}

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        return []  # a seed and a session count: nothing about the user

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        message = next((t.text for t in reversed(session) if t.speaker == "user"), "")
        turn = sum(1 for t in session if t.speaker == "user")
        reply = draw(
            int(state.get("seed", self.p["seed"])),
            int(state.get("sessions", 0)),
            turn,
            message,
            candidates=int(self.p["candidates"]),
            degrade=str(self.p["degrade"]),
        )
        return Prompt([ChatMessage("system", system_prompt(now)), *chat_turns(session)], reply=reply)

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        return Update(
            state={**state, "sessions": int(state.get("sessions", 0)) + 1},
            trace={"replies": sum(1 for t in session if t.speaker == "bot")},
        )
