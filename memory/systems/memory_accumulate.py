"""``memory_accumulate``: Keep Me Updated (Bae et al. 2022) "Memory accumulate".

At the end of each session a summarizer turns the session into summary sentences S about the user
(§4.2); memory is the union M ∪ S (APPEND only, no update). Each reply is conditioned on the top-k
memory sentences retrieved by cosine similarity to the current dialogue context (§4.1, Appendix B.3,
k = 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory import vectors
from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update, chat_turns, transcript
from memory.hygiene import DATA_RULE, clean_memory_lines, data_block
from memory.readiness.core import (
    START,
    Check,
    Task,
    calibration,
    copies,
    dialogue_text,
    discarded,
    facts_kept,
    failed,
    fallback_reasons,
    informative_dialogues,
    mentions,
    rate,
    safe,
    turns_of,
)
from memory.systems.common import SHORT_REPLIES, ask, embed_texts, fallback, parse_lines, top_k
from memory.systems.prompts import memory_block, system_prompt

SUMMARY_SYSTEM = "You summarize conversations between a user and a chatbot into short memory sentences about the user."
SUMMARY_INSTRUCTION = (
    "Read the conversation below. Write the important information about the user that the chatbot should "
    "remember for future conversations (health, daily life, family, plans, feelings, preferences), as short "
    "sentences, one per line, like:\n"
    "Goes hiking every weekend\n"
    "Has a dog\n"
    "Had back surgery\n"
    "If there is nothing worth remembering, write NONE.\n"
    "Write only about the user: what the chatbot said about itself is not about the user. " + DATA_RULE
)
#: The instruction's own example sentences: a memory line equal to one is kept only if the user said it.
EXAMPLES = ("Goes hiking every weekend", "Has a dog", "Had back surgery")
NONE_MARKERS = ("none", "nothing", "n/a", "no information", "summary", "memory sentences")


def _echoed(line: str) -> bool:
    key = line.lower().strip(" .")
    return len(key) > 12 and key in SUMMARY_INSTRUCTION.lower() and key not in {e.lower() for e in EXAMPLES}


def summary_messages(session: Sequence[Turn]) -> list[dict[str, str]]:
    """The summarizer's prompt: the instruction, then the session quoted as data."""
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        {
            "role": "user",
            "content": f"{SUMMARY_INSTRUCTION}\n\n{data_block('conversation', transcript(session))}\n\nMemory sentences:",
        },
    ]


def summarize_session(
    llm: Any, session: Sequence[Turn], *, trace: dict[str, Any], max_tokens: int, max_sentences: int
) -> list[str]:
    """S = the summary sentences of a finished session (Keep Me Updated §4.2).

    Lines that are not memories about the user (speaker labels, the bot's lines, refusals, the
    instruction's examples the user did not say: :func:`memory.hygiene.clean_memory_lines`) are
    rejected and recorded in ``trace["rejected"]``. Fallback: an empty, unparseable, cut or
    prompt-repeating reply gives S = [] (memory unchanged), recorded in the trace."""
    if not any(t.speaker == "user" for t in session):
        return []
    reply = ask(llm, summary_messages(session), purpose="summarize_session", max_tokens=max_tokens, trace=trace)
    lines = [s for s in parse_lines(reply, drop=NONE_MARKERS) if len(s) > 2 and not _echoed(s)]
    sentences = clean_memory_lines(lines, trace=trace, where="summarize_session", session=session, examples=EXAMPLES)
    if reply is not None and not sentences:
        fallback(trace, "summarize_session", "no summary sentence in the reply: memory unchanged", reply or "")
    if len(sentences) > max_sentences:
        fallback(trace, "summarize_session", f"{len(sentences)} sentences; kept the first {max_sentences}", reply or "")
        sentences = sentences[:max_sentences]
    return sentences


def trim_fifo(memory: list[str], cap: int, trace: dict[str, Any]) -> list[str]:
    """Drop the oldest sentences beyond ``cap`` (0 = no cap)."""
    if cap and len(memory) > cap:
        trace["trimmed"] = memory[: len(memory) - cap]
        return memory[len(memory) - cap :]
    return memory


class MemoryAccumulate(BaseSystem):
    name = "memory_accumulate"
    label = "Memory accumulate"
    source = "Keep Me Updated (Bae et al. 2022) §4.1-4.2, Appendix B.3"
    summary_sentences = "summary"
    params = {
        "k": Param(5, "Memory sentences retrieved for each reply.", "Keep Me Updated, Appendix B.3 (k = 5)"),
        "query_turns": Param(
            0,
            "Turns of the current session used as the retrieval query (0 = the whole session).",
            "Keep Me Updated, Appendix B.3: the query is the dialogue context D_t",
        ),
        "max_memory": Param(0, "Memory cap in sentences, oldest dropped first (0 = no cap).", "the paper sets no cap"),
        "max_summary_sentences": Param(10, "At most this many summary sentences per session.", "our choice"),
        "summary_max_tokens": Param(160, "Token budget of the summarizer reply.", "our choice"),
        "short_replies": Param(
            True, "Ask for one or two short sentences per reply.", "our choice (same for every arm)"
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {"memory": [], "sessions": 0}

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        return [Stored("memory sentences", m) for m in state.get("memory", [])]

    def memory_vectors(self, state: dict[str, Any]) -> vectors.Vectors:
        """The stored embeddings of the memory sentences (embedded only if the state has none)."""
        return vectors.load(state.get("vectors"), list(state.get("memory", [])), self.embedder)

    def with_vectors(self, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        """``after`` with the vectors of its memory, embedding only the sentences that are new."""
        if self.embedder is None:  # no embedder, no vectors: compose() embeds once it has one
            return {k: v for k, v in after.items() if k != "vectors"}
        base = self.memory_vectors(before) if before.get("memory") else None
        return {**after, "vectors": vectors.extend(base, after["memory"], self.embedder).block()}

    def retrieve(self, memory: list[str], session: Sequence[Turn], stored: vectors.Vectors | None = None) -> list[str]:
        """Top-k memory sentences by cosine similarity to the dialogue context (ties: older first);
        ``stored`` holds the sentences' vectors (embedded here if not given)."""
        if not memory:
            return []
        if not session:  # the bot opens the session: nothing to match yet, so the latest memories
            return memory[-int(self.p["k"]) :]
        n = int(self.p["query_turns"])
        context = transcript(session[-n:] if n else session)
        rows = stored.rows(memory) if stored is not None else None
        if rows is None:
            rows = vectors.load(None, memory, self.embedder).matrix
        query = embed_texts(self.embedder, [context])[0]
        return [memory[i] for i, _ in top_k(query, rows, int(self.p["k"]))]

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        memory = state.get("memory", [])
        retrieved = self.retrieve(memory, session, self.memory_vectors(state) if memory and session else None)
        block = memory_block(retrieved)
        if self.p["short_replies"]:
            block = f"{block}\n\n{SHORT_REPLIES}".strip()
        return Prompt([ChatMessage("system", system_prompt(now, block)), *chat_turns(session)], memory=retrieved)

    def summarize(self, session: Sequence[Turn], trace: dict[str, Any]) -> list[str]:
        return summarize_session(
            self.llm,
            session,
            trace=trace,
            max_tokens=int(self.p["summary_max_tokens"]),
            max_sentences=int(self.p["max_summary_sentences"]),
        )

    def readiness_tasks(self) -> list[Task]:
        """The session summarizer, on the calibration dialogues."""
        return [summary_task(self)]

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        before = list(state.get("memory", []))
        summary = self.summarize(session, trace)
        after = before + [s for s in summary if s not in before]  # union: APPEND only
        after = trim_fifo(after, int(self.p["max_memory"]), trace)
        trace.update({"summary": summary, "memory_before": before, "memory_after": after})
        new_state = {"memory": after, "sessions": int(state.get("sessions", 0)) + 1}
        return Update(state=self.with_vectors(state, new_state), trace=trace)


# ------------------------------------------------------------------------------------------ readiness

SUMMARY_THRESHOLDS = {
    "summary_not_empty": 0.80,
    "summary_facts_kept": 0.60,
    "summary_not_a_copy": 0.80,
    "summary_no_prompt_examples": 1.00,
    "summary_no_bot_facts": 0.80,
}


def summary_task(system: MemoryAccumulate) -> Task:
    """The summarizer on each calibration dialogue: the stored summary must keep the labelled facts,
    not copy the dialogue, not write the prompt's examples and not give the bot's facts as the user's."""

    def run(d: dict[str, Any]) -> dict[str, Any]:
        trace: dict[str, Any] = {}
        sentences = system.summarize(turns_of(d["turns"], START), trace)
        return {"id": d["id"], "sentences": sentences, "trace": trace}

    def score(records: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[Check]:
        n_inf = len(informative_dialogues())
        pairs = list(zip(records, items, strict=False))
        informative = [(r, d) for r, d in pairs if d["facts"]]

        def stored(r: dict[str, Any]) -> bool:
            return not failed(r) and bool(r["sentences"])

        def text(r: dict[str, Any]) -> str:
            return "\n".join(r["sentences"])

        def example(r: dict[str, Any], d: dict[str, Any], **extra: Any) -> dict[str, Any]:
            if failed(r):
                return {"dialogue": d["id"], "error": r["error"]}
            trace = r["trace"]
            return {"dialogue": d["id"], "stored": r["sentences"], "rejected": trace.get("rejected", [])[:3],
                    "fallbacks": fallback_reasons(trace), **extra}  # fmt: skip

        made = [stored(r) for r, _ in informative]
        kept = [facts_kept(text(r), d["facts"]) if stored(r) else 0.0 for r, d in informative]
        clean = [stored(r) and not copies(text(r), dialogue_text(d)) for r, d in informative]
        no_bot = [stored(r) and not any(mentions(text(r), [b]) for b in d["bot_facts"]) for r, d in informative]
        # A reply discarded whole (cut, echoed, failed) cannot show it avoided the examples: it counts as failing.
        parsed = [not failed(r) and not discarded(r["trace"], "summarize_session") for r, _ in pairs]
        wrote_examples = [
            ok and any("example" in x["reason"] for x in r["trace"].get("rejected", []))
            for (r, _), ok in zip(pairs, parsed, strict=True)
        ]
        no_examples = [ok and not ex for ok, ex in zip(parsed, wrote_examples, strict=True)]
        seen = len(informative)
        return [
            rate(
                "summary_not_empty",
                SUMMARY_THRESHOLDS["summary_not_empty"],
                [float(x) for x in made],
                n_inf,
                f"{sum(made)} of {seen} informative dialogues left a stored summary sentence after validation",
                [example(r, d) for (r, d), ok in zip(informative, made, strict=True) if not ok],
            ),
            rate(
                "summary_facts_kept",
                SUMMARY_THRESHOLDS["summary_facts_kept"],
                kept,
                n_inf,
                f"mean share of the labelled facts found in the stored summary: {sum(kept) / max(1, seen):.2f}",
                [example(r, d, facts=d["facts"]) for (r, d), k in zip(informative, kept, strict=True) if k < 1],
                binary=False,
            ),
            rate(
                "summary_not_a_copy",
                SUMMARY_THRESHOLDS["summary_not_a_copy"],
                [float(x) for x in clean],
                n_inf,
                f"{sum(clean)} of {seen} dialogues have a stored summary that does not copy the dialogue "
                "(half or more of its 5-grams)",
                [example(r, d) for (r, d), ok in zip(informative, clean, strict=True) if not ok],
            ),
            rate(
                "summary_no_prompt_examples",
                SUMMARY_THRESHOLDS["summary_no_prompt_examples"],
                [float(x) for x in no_examples],
                len(items),
                f"{sum(wrote_examples)} of {len(pairs)} replies wrote the prompt's example sentences "
                f"({', '.join(EXAMPLES)}) that the user never said; {len(pairs) - sum(parsed)} replies were "
                "discarded whole (cut, echoing the prompt or failed)",
                [example(r, d) for (r, d), ok in zip(pairs, no_examples, strict=True) if not ok],
            ),
            rate(
                "summary_no_bot_facts",
                SUMMARY_THRESHOLDS["summary_no_bot_facts"],
                [float(x) for x in no_bot],
                n_inf,
                f"{sum(no_bot)} of {seen} dialogues have a stored summary that does not give what the bot said "
                "about itself as facts about the user",
                [
                    example(r, d, bot_facts=d["bot_facts"])
                    for (r, d), ok in zip(informative, no_bot, strict=True)
                    if not ok
                ],  # fmt: skip
            ),
        ]

    return Task("session summaries", list(calibration()["dialogues"]), safe(run), score)
