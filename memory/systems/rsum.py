"""``rsum``: recursive summarization (LLM-Rsum, Wang et al.), M_i = LLM(H_i, M_{i-1}, P_m).

The memory is one paragraph of at most 20 sentences, updated once per session end with the memory-
management prompt P_m; each reply is generated from the latest memory and the current session with
the response-generator prompt P_r (both from Figure 12 of the Rsum seed, verbatim). Temperature 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update, recent, transcript
from memory.hygiene import DATA_RULE, NO_RECITAL, clean_memory_lines, data_block
from memory.readiness.core import (
    START,
    Check,
    Task,
    calibration,
    copies,
    dialogue_text,
    facts_kept,
    failed,
    fallback_reasons,
    rate,
    safe,
    turns_of,
)
from memory.systems.common import SHORT_REPLIES, ask, fallback, split_sentences

MEMORY_SYSTEM = (
    "You are an advanced AI language model with the ability to keep track of dialog information between speakers."
)
RESPONSE_SYSTEM = "You are an advanced AI language model designed to engage in personality-based conversations."

# Figure 12 (below): memory management prompt P_m, verbatim.
P_M = (
    "You are an advanced AI language model with the ability to store and update a memory to keep track of key "
    "personality information for both the user and the system. You will receive a memory and a dialogue context. "
    "Your goal is to update the memory by incorporating the new personality information while ensuring that the "
    "memory does not exceed 20 sentences. To successfully update the memory, follow these steps:\n"
    "1. Carefully analyze the existing memory and extract the key personality information of the user and system from it.\n"
    "2. Consider the dialogue context provided to identify any new or changed personality traits that need to be "
    "incorporated into the memory.\n"
    "3. Combine the old and new personality information to create an updated representation of the user and system's traits.\n"
    "4. Structure the updated memory in a clear and concise manner, ensuring that it does not exceed 20 sentences.\n"
    "5. Pay attention to the relevance and importance of the personality information, focusing on capturing the "
    "most significant aspects while maintaining the overall coherence of the memory.\n"
    "Remember, the memory should serve as a reference point to maintain continuity in the dialogue and help you "
    "respond accurately to the user based on their personality traits."
)

# Figure 12 (above): response generator prompt P_r, verbatim.
P_R = (
    "You are an advanced AI language model capable of engaging in personality-based conversations. You will be "
    "provided with a memory containing personality information for both yourself (the assistant) and the user, as "
    "well as a dialogue context. Your goal is to respond accurately to the user based on the personality traits and "
    "dialogue context. Even if there isn't a specific relevant personality trait in the memory, you should still "
    "respond naturally, ensuring the conversation continues smoothly. Follow these steps to successfully complete the task:\n"
    "1. Analyze the provided memory to extract the key personality traits for both yourself and the user. Take note "
    "of any relevant information that can guide your responses.\n"
    "2. Review the dialogue context to understand the context and flow of the conversation. Consider the user's "
    "statements and questions carefully.\n"
    "3. Utilize the extracted personality traits and dialogue context to formulate an appropriate response. If there "
    "is a relevant personality trait in the memory, try to incorporate it into your answer.\n"
    "4. If no specific personality trait is applicable, respond naturally as a human would, keeping the conversation "
    "flowing and engaging.\n"
    "5. Pay attention to the user's input and respond in a coherent and contextually appropriate manner, maintaining "
    "a conversational tone throughout.\n"
    "Remember, the purpose of this conversation is to engage the user in a personality-based manner, using the "
    "memory as a reference to provide meaningful responses."
)

_UPDATED = re.compile(r"(?:\[?updated memory\]?\s*(?:is)?\s*:?)", re.IGNORECASE)


def parse_memory(reply: str) -> str:
    """The Rsum code's post-processing: keep the text after "Updated memory:" / "[Updated Memory]",
    then strip newlines."""
    parts = _UPDATED.split(reply)
    text = parts[-1] if len(parts) > 1 else reply
    return " ".join(line.strip(" -*\t") for line in text.splitlines() if line.strip()).strip()


def render(session: Sequence[Turn]) -> str:
    return transcript(session, user="User", bot="System") if session else "(no messages yet)"


def test_input(memory: str, session: Sequence[Turn], ending: str) -> str:
    """The paper's test input, with the memory and the dialogue quoted as data."""
    return (
        f"Previous Memory:\n{data_block('memory', memory)}\n\n"
        f"Dialogue Context:\n{data_block('conversation', render(session))}\n\n{ending}"
    )


class Rsum(BaseSystem):
    name = "rsum"
    label = "Recursive summarization (LLM-Rsum)"
    source = "Wang et al., Neurocomputing 2025 (arXiv 2308.15022), Figure 12; code qingyue2014/Rsum"
    params = {
        "max_sentences": Param(20, "Memory cap in sentences (oldest dropped first).", "Rsum Figure 12 (20 sentences)"),
        "initial_memory": Param(
            "Empty", "How the empty memory M_0 is shown to the LLM.", 'Rsum code ("Empty"); paper text "EMPTY"'
        ),
        "memory_max_tokens": Param(400, "Token budget of the memory update reply.", "our choice (20 sentences)"),
        "short_replies": Param(
            True, "Ask for one or two short sentences per reply.", "our choice (same for every arm)"
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {"memory": "", "sessions": 0}

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        return [Stored("memory", state["memory"])] if state.get("memory") else []

    def shown(self, memory: str) -> str:
        return memory or str(self.p["initial_memory"])

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        memory = state.get("memory", "")
        instruction = P_R + (f"\n{SHORT_REPLIES}" if self.p["short_replies"] else "")
        user = f"{instruction}\n{DATA_RULE} {NO_RECITAL}\n\nToday is {now:%A, %B %-d, %Y}.\n\n" + test_input(
            self.shown(memory), recent(session), "Response:"
        )
        return Prompt(
            [ChatMessage("system", RESPONSE_SYSTEM), ChatMessage("user", user)],
            memory=split_sentences(memory) if memory else [],
        )

    def readiness_tasks(self) -> list[Task]:
        """The memory update: first memories, and a recursive update after a follow-up session."""
        return [rsum_task(self)]

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        before = state.get("memory", "")
        reply = ask(
            self.llm,
            [
                {"role": "system", "content": MEMORY_SYSTEM},
                {
                    "role": "user",
                    "content": f"{P_M}\n{DATA_RULE}\n\n"
                    + test_input(self.shown(before), session, "So the Updated Memory is :"),
                },
            ],
            purpose="rsum_memory",
            max_tokens=int(self.p["memory_max_tokens"]),
            trace=trace,
        )
        after = parse_memory(reply or "")
        if after and after.strip(" .").lower() not in ("empty", "none"):
            # Keep the sentences that are memories; labels, dialogue lines, the bot's lines and refusals go.
            kept = clean_memory_lines(
                split_sentences(after), trace=trace, where="rsum_memory", session=session, about_user=False
            )
            after = " ".join(kept)
        if not after or after.strip(" .").lower() in ("empty", "none"):
            if reply is not None:
                fallback(trace, "rsum_memory", "no usable updated memory: kept the previous memory", reply)
            after = before
        sentences = split_sentences(after)
        cap = int(self.p["max_sentences"])
        if cap and len(sentences) > cap:
            trace["trimmed"] = sentences[: len(sentences) - cap]
            fallback(
                trace,
                "rsum_memory",
                f"{len(sentences)} sentences > {cap}: dropped the oldest (first) ones",
                reply or "",
            )
            after = " ".join(sentences[len(sentences) - cap :])
        trace.update({"memory_before": before, "memory_after": after, "raw": reply or ""})
        return Update(state={"memory": after, "sessions": int(state.get("sessions", 0)) + 1}, trace=trace)


# ------------------------------------------------------------------------------------------ readiness

RSUM_THRESHOLDS = {"memory_not_empty": 0.80, "memory_facts_kept": 0.60, "memory_not_a_copy": 0.80,
                   "memory_within_cap": 1.00}  # fmt: skip


def rsum_task(system: Rsum) -> Task:
    """The memory update from the empty memory on each informative calibration dialogue, and the
    recursive update of that memory after each follow-up session (whose facts changed)."""
    data = calibration()
    by_id = {d["id"]: d for d in data["dialogues"]}
    items = [{"first": d, "then": None} for d in data["dialogues"] if d["facts"]]
    items += [{"first": by_id[f["after"]], "then": f} for f in data["followups"]]

    def run(item: dict[str, Any]) -> dict[str, Any]:
        first = item["first"]
        update = system.end_session(system.initial_state(), turns_of(first["turns"], START), START)
        if item["then"] is not None:
            later = START + timedelta(days=7)
            update = system.end_session(update.state, turns_of(item["then"]["turns"], later), later)
        return {"memory": update.state["memory"], "trace": dict(update.trace)}

    def score(records: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[Check]:
        pairs = list(zip(records, items, strict=False))
        n = len(items)

        def facts(item: dict[str, Any]) -> list[list[str]]:
            return list((item["then"] or item["first"])["facts"])

        def source(item: dict[str, Any]) -> str:
            text = dialogue_text(item["first"])
            return text + "\n" + dialogue_text(item["then"]) if item["then"] is not None else text

        def memory(r: dict[str, Any]) -> str:
            return "" if failed(r) else str(r["memory"])

        def example(r: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
            if failed(r):
                return {"dialogue": item["first"]["id"], "error": r["error"]}
            return {"dialogue": item["first"]["id"], "followup": item["then"] is not None,
                    "memory": r["memory"][:300], "fallbacks": fallback_reasons(r["trace"])}  # fmt: skip

        usable = [bool(memory(r).strip()) for r, _ in pairs]
        kept = [facts_kept(memory(r), facts(item)) for r, item in pairs]
        clean = [bool(memory(r)) and not copies(memory(r), source(item)) for r, item in pairs]
        within = [failed(r) or not r["trace"].get("trimmed") for r, _ in pairs]
        return [
            rate("memory_not_empty", RSUM_THRESHOLDS["memory_not_empty"], [float(x) for x in usable], n,
                 f"{sum(usable)} of {len(pairs)} memory updates gave a usable memory",
                 [example(r, i) for (r, i), ok in zip(pairs, usable, strict=True) if not ok]),
            rate("memory_facts_kept", RSUM_THRESHOLDS["memory_facts_kept"], kept, n,
                 f"mean share of the labelled facts in the memory: {sum(kept) / max(1, len(pairs)):.2f}",
                 [example(r, i) for (r, i), k in zip(pairs, kept, strict=True) if k < 1], binary=False),
            rate("memory_not_a_copy", RSUM_THRESHOLDS["memory_not_a_copy"], [float(x) for x in clean], n,
                 f"{sum(clean)} of {len(pairs)} memories are neither empty nor a copy of the dialogue",
                 [example(r, i) for (r, i), ok in zip(pairs, clean, strict=True) if not ok]),
            rate("memory_within_cap", RSUM_THRESHOLDS["memory_within_cap"], [float(x) for x in within], n,
                 f"{len(pairs) - sum(within)} of {len(pairs)} memories exceeded the "
                 f"{system.p['max_sentences']}-sentence cap",
                 [example(r, i) for (r, i), ok in zip(pairs, within, strict=True) if not ok]),
        ]  # fmt: skip

    return Task("memory updates", items, safe(run), score)
