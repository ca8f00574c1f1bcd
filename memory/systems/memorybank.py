"""``memorybank``: MemoryBank / SiliconFriend (Zhong et al., AAAI 2024), the baseline of Rsum and TiM.

Memory: every (user message, bot reply) pair of every day as a retrievable unit
("Conversation content on {date}:[|User|]: q; [|AI|]: r") plus one event summary per day; an overall
event summary and an overall personality (with a response strategy) that are always in the prompt.
Retrieval: top-k (k = 2, the code's memory_search_top_k) units by cosine to the user message.
Forgetting (Ebbinghaus): every unit has a strength S (1 at creation, +1 each time it is recalled, which
also resets its last-recall date); when memory is loaded on a day, a unit with retention
R = exp(−t/S) (t = days since last recall) is forgotten with probability 1 − R. A day whose units are
all forgotten loses its summary too (as in the code).

The official code writes ``math.exp(-t / 5*S)`` = exp(−(t/5)·S): stronger memories forget faster,
against its own docstring and the paper (notes §1.5). ``forgetting_curve`` chooses: "paper"
(exp(−t/S), default), "code_intended" (exp(−t/(5S))) or "code" (the bug, reproduced). The random draw
is a hash of (seed, unit id, day), so the same state and day always forget the same units.

Time scale (``forgetting_time_scale_days``): t is counted in units of this many days of the study's
clock. The paper's companion is used once a day (its evaluation set: one conversation a day for ten
days), so its curve is calibrated to one day between conversations; in a study, sessions are 1-2 weeks
apart, and counting that gap as 7-14 "days" would forget nearly everything (e^-7 ≈ 0.001 for a unit
recalled once). The default of 7 counts one week of the study's clock, the shortest gap of the
protocol, as the paper's one day. :func:`retention_after` says what is kept after a gap.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from memory import vectors
from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update, chat_turns
from memory.hygiene import DATA_RULE, NO_RECITAL, clean_memory_lines, data_block, inline_data
from memory.readiness.core import (
    START,
    Check,
    Task,
    copies,
    dialogue_text,
    failed,
    fallback_reasons,
    informative_dialogues,
    rate,
    safe,
    turns_of,
)
from memory.readiness.shared import summary_checks
from memory.systems.common import (
    SHORT_REPLIES,
    ask,
    aware,
    embed_texts,
    fallback,
    last_user_text,
    split_sentences,
    top_k,
)

SUMMARY_SYSTEM = (
    "Below is a transcript of a conversation between a human and an AI assistant that is intelligent and "
    "knowledgeable in psychology."
)


def _dialogue(pairs: Sequence[tuple[str, str]], user: str, bot: str) -> str:
    return data_block("conversation", "\n".join(f"{user}：{q.strip()}\n{bot}：{r.strip()}" for q, r in pairs))


def summarize_content_prompt(pairs: Sequence[tuple[str, str]], user: str, bot: str) -> str:
    prompt = (
        "Please summarize the following dialogue as concisely as possible, extracting the main themes and key "
        f"information. If there are multiple key events, you may summarize them separately. {DATA_RULE} "
        "Dialogue content:\n"
    )
    return prompt + _dialogue(pairs, user, bot) + "\nSummarization："


def summarize_person_prompt(pairs: Sequence[tuple[str, str]], user: str, bot: str) -> str:
    prompt = (
        f"Based on the following dialogue, please summarize {user}'s personality traits and emotions, and devise "
        f"response strategies based on your speculation. {DATA_RULE} Dialogue content:\n"
    )
    return (
        prompt
        + _dialogue(pairs, user, bot)
        + f"\n{user}'s personality traits, emotions, and {bot}'s response strategy are:"
    )


def summarize_overall_prompt(items: Sequence[tuple[str, str]]) -> str:
    prompt = (
        "Please provide a highly concise summary of the following event, capturing the essential key information "
        f"as succinctly as possible. {DATA_RULE} Summarize the event:\n"
    )
    events = "\n".join(f"At {day}, the events are {summary.strip()}" for day, summary in items)
    return prompt + data_block("summaries", events) + "\nSummarization："


def summarize_overall_personality(items: Sequence[tuple[str, str]]) -> str:
    prompt = (
        "The following are the user's exhibited personality traits and emotions throughout multiple dialogues, "
        f"along with appropriate response strategies for the current situation ({DATA_RULE}):\n"
    )
    analyses = "\n".join(f"At {day}, the analysis shows {summary.strip()}" for day, summary in items)
    return (
        prompt
        + data_block("summaries", analyses)
        + (
            "\nPlease provide a highly concise and general summary of the user's personality and the most appropriate "
            "response strategy for the AI companion, summarized as:"
        )
    )


META_PROMPT = (
    "Now you will play the role of a companion AI for user {user}, and your name is {bot}. You should be able to: "
    "(1) provide warm companionship to chat users; (2) understand past [memory], and if they are relevant to the "
    "current question, you must extract information from the [memory] to answer the question; (3) you are also an "
    "excellent psychological counselor, and when users confide in you about their difficulties and seek help, you "
    "can provide them with warm and helpful responses.\n"
    "The summary of your past memories with the user is: {overall}\n"
    "The personality of user {user} and the response strategy of the AI companion are: {personality}\n"
    "Based on the current user's question, you start recalling past conversations between the two of you, and the "
    "[memory] most relevant to the question is: {related}\n"
    "You should refer to the context of the conversation, past [memory], and provide detailed answers to user questions."
    "\n{rules}"
)
NEW_USER_PROMPT = (
    "Now you will play the role of a companion AI for user {user}, and your name is {bot}. You should be able to: "
    "(1) provide warm companionship to chat users; (2) you are also an excellent psychological counselor, and when "
    "users confide in you about their difficulties and seek help, you can provide them with warm and helpful responses."
    "\n{rules}"
)


# ------------------------------------------------------------------------------------ pure functions


def retention(days: float, strength: float, formula: str = "paper", time_scale_days: float = 1.0) -> float:
    """Ebbinghaus retention R after ``days`` since the last recall, for memory strength S, with t in
    units of ``time_scale_days`` days (1 = the paper's days)."""
    t, s = max(0.0, days) / max(1e-9, time_scale_days), max(1e-9, strength)
    if formula == "paper":
        return math.exp(-t / s)
    if formula == "code_intended":
        return math.exp(-t / (5 * s))
    if formula == "code":
        return math.exp(-t / 5 * s)  # sic: the official code's precedence, exp(-(t/5)*S)
    raise ValueError(f"memorybank: unknown forgetting_curve {formula!r} (paper, code_intended, code)")


def retention_after(gap_days: float, params: dict[str, Any] | None = None, *, strength: float = 1.0) -> float:
    """The probability that MemoryBank keeps a memory unit of ``strength`` (1 = stored and never
    recalled) through a gap of ``gap_days`` days of the study's clock, with the arm's ``params``
    (defaults filled in). 1.0 when forgetting is off. The expected share of such units kept."""
    p = {k: spec.default for k, spec in MemoryBank.params.items()} | dict(params or {})
    if not p["forgetting"]:
        return 1.0
    return retention(gap_days, strength, str(p["forgetting_curve"]), float(p["forgetting_time_scale_days"]))


def draw(seed: int, memory_id: str, day: str) -> float:
    """A uniform number in [0, 1) determined by (seed, unit, day): the code's random.random(), reproducible."""
    h = hashlib.blake2b(f"{seed}|{memory_id}|{day}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


def days_between(a: str, b: str) -> int:
    return (date.fromisoformat(b) - date.fromisoformat(a)).days


def forget(
    state: dict[str, Any], day: str, *, formula: str, seed: int, time_scale_days: float = 1.0
) -> tuple[dict[str, Any], list[str]]:
    """Apply forgetting as of ``day``: the new state and the ids of the forgotten units (pure)."""
    history: dict[str, list[dict[str, Any]]] = {}
    summary = dict(state.get("summary", {}))
    gone: list[str] = []
    for d, units in state.get("history", {}).items():
        kept = []
        for u in units:
            r = retention(days_between(u["last_recall_date"], day), u["memory_strength"], formula, time_scale_days)
            if draw(seed, u["memory_id"], day) > r:
                gone.append(u["memory_id"])
            else:
                kept.append(u)
        if kept:
            history[d] = kept
        else:
            summary.pop(d, None)
    return {**state, "history": history, "summary": summary}, gone


def units(state: dict[str, Any]) -> list[tuple[str, str]]:
    """(memory id, text) of every retrievable unit: the dialogue pairs, then the day summaries."""
    out = []
    for d, day_units in state.get("history", {}).items():
        for u in day_units:
            out.append(
                (
                    u["memory_id"],
                    f"Conversation content on {d}:[|User|]: {u['query'].strip()}; [|AI|]: {u['response'].strip()}",
                )
            )
    for d, s in state.get("summary", {}).items():
        if s.get("content"):
            out.append((s["memory_id"], f"The summary of the conversation on {d} is: {s['content']}"))
    return out


def strengthen(state: dict[str, Any], ids: Sequence[str], day: str) -> dict[str, Any]:
    """A recall: strength +1 and last-recall date = today for each recalled unit (the code's
    update_memory_when_searched)."""
    wanted = set(ids)
    history = {
        d: [
            {**u, "memory_strength": u["memory_strength"] + 1, "last_recall_date": day}
            if u["memory_id"] in wanted
            else u
            for u in us
        ]
        for d, us in state.get("history", {}).items()
    }
    summary = {
        d: (
            {**s, "memory_strength": s["memory_strength"] + 1, "last_recall_date": day}
            if s["memory_id"] in wanted
            else s
        )
        for d, s in state.get("summary", {}).items()
    }
    return {**state, "history": history, "summary": summary}


def pairs_of(session: Sequence[Turn]) -> list[tuple[str, str]]:
    """(user message, bot reply) pairs; consecutive messages of one speaker are joined."""
    out: list[tuple[str, str]] = []
    q: list[str] = []
    r: list[str] = []
    for t in session:
        if t.speaker == "user":
            if r:
                out.append((" ".join(q), " ".join(r)))
                q, r = [], []
            q.append(t.text)
        else:
            r.append(t.text)
    if q or r:
        out.append((" ".join(q), " ".join(r)))
    return out


# ------------------------------------------------------------------------------------------- system


class MemoryBank(BaseSystem):
    name = "memorybank"
    label = "MemoryBank"
    source = "Zhong et al., AAAI 2024; code zhongwanjun/MemoryBank-SiliconFriend@cf61c41"
    params = {
        "k": Param(2, "Memory units retrieved per reply.", "code: memory_search_top_k = 2"),
        "forgetting": Param(
            True, "Apply Ebbinghaus forgetting when memory is loaded.", "paper §Memory Updating (code default: off)"
        ),
        "forgetting_curve": Param(
            "paper",
            "paper: exp(-t/S); code_intended: exp(-t/(5S)); code: exp(-(t/5)S), the bug.",
            "paper; notes §1.5 for the code",
        ),
        "forgetting_time_scale_days": Param(
            7.0,
            "Days of the study's clock that count as one day of the forgetting curve (R = e^(-t/S), t in these "
            "units). 1 = the paper's days taken literally.",
            "ours: the paper's companion talks once a day; a study's sessions are 1-2 weeks apart",
        ),
        "max_overall_days": Param(
            14,
            "The overall summaries are rewritten from at most this many latest days' summaries (0 = all, as the code).",
            "ours: bounds the prompt",
        ),
        "seed": Param(0, "Seed of the forgetting draws.", "our choice"),
        "user_name": Param("User", "The user's name in the prompts.", "our choice"),
        "bot_name": Param("AI", "The bot's name in the prompts.", "code: boot_name = 'AI'"),
        "summary_max_tokens": Param(
            200, "Token budget of each summary.", "code: max_tokens = 400 (halved for small models)"
        ),
        "short_replies": Param(
            True, "Ask for one or two short sentences per reply.", "our choice (same for every arm)"
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {"history": {}, "summary": {}, "personality": {}, "overall_history": "", "overall_personality": ""}

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        out = []
        for units in state.get("history", {}).values():
            for u in units:
                out += [Stored("dialogue history", u["query"]), Stored("dialogue history", u["response"])]
        out += [Stored("daily event summaries", s["content"]) for s in state.get("summary", {}).values()]
        out += [Stored("daily personality summaries", p) for p in state.get("personality", {}).values()]
        out += [Stored("overall event summary", state.get("overall_history", "")),
                Stored("overall personality", state.get("overall_personality", ""))]  # fmt: skip
        return [s for s in out if isinstance(s.text, str) and s.text.strip()]

    def loaded(self, state: dict[str, Any], day: str) -> tuple[dict[str, Any], list[str]]:
        if not self.p["forgetting"]:
            return state, []
        return forget(
            state,
            day,
            formula=str(self.p["forgetting_curve"]),
            seed=int(self.p["seed"]),
            time_scale_days=float(self.p["forgetting_time_scale_days"]),
        )

    def stored_vectors(self, state: dict[str, Any]) -> vectors.Vectors:
        """The stored embeddings of the state's units (embedded only if the state has none for them)."""
        return vectors.load(state.get("vectors"), [text for _, text in units(state)], self.embedder)

    def with_vectors(self, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        """``after`` with the vectors of its units, embedding only the units that are new."""
        if self.embedder is None:  # no embedder, no vectors: compose() embeds once it has one
            return {k: v for k, v in after.items() if k != "vectors"}
        base = self.stored_vectors(before) if units(before) else None
        texts = [text for _, text in units(after)]
        return {**after, "vectors": vectors.extend(base, texts, self.embedder).block()}

    def search(self, state: dict[str, Any], query: str, stored: vectors.Vectors | None = None) -> list[tuple[str, str]]:
        """The top-k units for ``query``; ``stored`` holds vectors of (a superset of) the units."""
        found = units(state)
        if not found or not query.strip():
            return []
        texts = [text for _, text in found]
        rows = stored.rows(texts) if stored is not None else None
        if rows is None:
            rows = vectors.load(None, texts, self.embedder).matrix
        q = embed_texts(self.embedder, [query])[0]
        return [found[i] for i, _ in top_k(q, rows, int(self.p["k"]))]

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        stored = self.stored_vectors(state)
        state, _ = self.loaded(state, f"{aware(now):%Y-%m-%d}")
        if session:
            related = self.search(state, last_user_text(session), stored)
        else:  # the bot opens the session: nothing to search with, so the latest day's summary
            days = [u for u in units(state) if u[0].endswith("_summary")]
            related = days[-1:]
        names = {"user": self.p["user_name"], "bot": self.p["bot_name"]}
        rules = f"{DATA_RULE} {NO_RECITAL}"
        if state.get("overall_history") or related:
            system = META_PROMPT.format(
                **names,
                overall=inline_data("memory", state["overall_history"]) if state.get("overall_history") else "none",
                personality=inline_data("memory", state["overall_personality"])
                if state.get("overall_personality")
                else "none",
                related=data_block("memory", "\n".join(text for _, text in related)) if related else "none",
                rules=rules,
            )
        else:
            system = NEW_USER_PROMPT.format(**names, rules=rules)
        system += f"\nToday is {now:%A, %B %-d, %Y}."
        if self.p["short_replies"]:
            system += f"\n{SHORT_REPLIES}"
        shown = [text for _, text in related]
        if state.get("overall_history"):
            shown.insert(0, f"overall: {state['overall_history']}")
        return Prompt([ChatMessage("system", system), *chat_turns(session)], memory=shown)

    def after_turn(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        """Persist what compose() did: the day's forgetting, and the recall of the retrieved units."""
        day = f"{aware(now):%Y-%m-%d}"
        before, stored = state, self.stored_vectors(state)
        state, gone = self.loaded(state, day)
        recalled = [
            i
            for i, _ in self.search(
                state, last_user_text(session[:-1] if session and session[-1].speaker == "bot" else session), stored
            )
        ]
        new_state = self.with_vectors(before, strengthen(state, recalled, day))
        return Update(state=new_state, trace={"forgotten": gone, "recalled": recalled})

    def summarize(self, prompt: str, purpose: str, trace: dict[str, Any], session: Sequence[Turn] = ()) -> str:
        """One of the code's summaries; its sentences pass :func:`memory.hygiene.clean_memory_lines`
        (speaker labels, dialogue lines, refusals go). "" when nothing usable is left."""
        reply = ask(
            self.llm,
            [
                {"role": "system", "content": SUMMARY_SYSTEM},
                {"role": "user", "content": "Hello! Please help me summarize the content of the conversation."},
                {"role": "assistant", "content": "Sure, I will do my best to assist you."},
                {"role": "user", "content": prompt},
            ],
            purpose=purpose,
            max_tokens=int(self.p["summary_max_tokens"]),
            trace=trace,
        )
        text = (reply or "").strip()
        if text:
            kept = clean_memory_lines(
                split_sentences(text), trace=trace, where=purpose, session=session, about_user=False
            )
            text = " ".join(kept)
        if not text and reply is not None:
            fallback(trace, purpose, "empty summary (or nothing usable in it)", reply)
        return text

    def readiness_tasks(self) -> list[Task]:
        """The day summary and the personality summary on the calibration dialogues."""
        return [memorybank_task(self)]

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        day = f"{aware(now):%Y-%m-%d}"
        before = state
        state, gone = self.loaded(state, day)
        trace["forgotten"] = gone
        pairs = pairs_of(session)
        if not pairs:
            return Update(state=self.with_vectors(before, state), trace=trace)
        history = {d: list(us) for d, us in state.get("history", {}).items()}
        day_units = history.setdefault(day, [])
        start = len(day_units) and max(int(u["memory_id"].rsplit("_", 1)[1]) for u in day_units) + 1
        for n, (q, r) in enumerate(pairs, start):
            day_units.append(
                {"query": q, "response": r, "memory_strength": 1, "last_recall_date": day, "memory_id": f"{day}_{n}"}
            )
        user, bot = str(self.p["user_name"]), str(self.p["bot_name"])
        all_pairs = [(u["query"], u["response"]) for u in day_units]
        summary = dict(state.get("summary", {}))
        personality = dict(state.get("personality", {}))
        turns = [turn for q, r in all_pairs for turn in (Turn("user", q), Turn("bot", r))]
        # The day's summaries cover every pair of the day (several sessions on one day update them).
        text = self.summarize(summarize_content_prompt(all_pairs, user, bot), "memorybank_day_summary", trace, turns)
        if text:
            old = summary.get(day, {})
            summary[day] = {
                "content": text,
                "memory_strength": old.get("memory_strength", 1),
                "last_recall_date": old.get("last_recall_date", day),
                "memory_id": f"{day}_summary",
            }
        text = self.summarize(summarize_person_prompt(all_pairs, user, bot), "memorybank_day_personality", trace, turns)
        if text:
            personality[day] = text
        recent_days = int(self.p["max_overall_days"])

        def latest(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
            # The overall summaries are rewritten from the latest days only: the prompt stays bounded.
            return sorted(items)[-recent_days:] if recent_days else sorted(items)

        overall = state.get("overall_history", "")
        if summary:
            overall = (
                self.summarize(
                    summarize_overall_prompt(latest([(d, s["content"]) for d, s in summary.items()])),
                    "memorybank_overall_history",
                    trace,
                )
                or overall
            )
        overall_personality = state.get("overall_personality", "")
        if personality:
            overall_personality = (
                self.summarize(
                    summarize_overall_personality(latest(list(personality.items()))),
                    "memorybank_overall_personality",
                    trace,
                )
                or overall_personality
            )
        new_state = {
            **state,
            "history": history,
            "summary": summary,
            "personality": personality,
            "overall_history": overall,
            "overall_personality": overall_personality,
        }
        trace.update({"day": day, "pairs_added": len(pairs)})
        return Update(state=self.with_vectors(before, new_state), trace=trace)


# ------------------------------------------------------------------------------------------ readiness

BANK_THRESHOLDS = {"summary_not_empty": 0.80, "summary_facts_kept": 0.60, "summary_not_a_copy": 0.80,
                   "personality_not_empty": 0.80}  # fmt: skip


def memorybank_task(system: MemoryBank) -> Task:
    """The day summary and the personality summary of each informative calibration dialogue."""
    user, bot = str(system.p["user_name"]), str(system.p["bot_name"])

    def run(d: dict[str, Any]) -> dict[str, Any]:
        trace: dict[str, Any] = {}
        turns = turns_of(d["turns"], START)
        pairs = [(turns[i].text, turns[i + 1].text if i + 1 < len(turns) else "") for i in range(0, len(turns), 2)]
        summary = system.summarize(summarize_content_prompt(pairs, user, bot), "memorybank_day_summary", trace, turns)
        person = system.summarize(summarize_person_prompt(pairs, user, bot), "memorybank_day_personality", trace, turns)
        return {"summary": summary, "personality": person, "trace": trace}

    def score(records: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[Check]:
        n = len(items)
        pairs = list(zip(records, items, strict=False))

        def get(r: dict[str, Any], key: str) -> str:
            return "" if failed(r) else str(r[key])

        def example(r: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
            if failed(r):
                return {"dialogue": d["id"], "error": r["error"]}
            return {"dialogue": d["id"], "summary": r["summary"][:200], "personality": r["personality"][:160],
                    "fallbacks": fallback_reasons(r["trace"])}  # fmt: skip

        person = [bool(get(r, "personality")) and not copies(get(r, "personality"), dialogue_text(d)) for r, d in pairs]
        return [
            *summary_checks(
                records,
                items,
                names=("summary_not_empty", "summary_facts_kept", "summary_not_a_copy"),
                thresholds=BANK_THRESHOLDS,
                noun=("day summary", "day summaries"),
                text=lambda r: get(r, "summary"),
                usable=lambda r: bool(get(r, "summary")),
                example=example,
            ),
            rate("personality_not_empty", BANK_THRESHOLDS["personality_not_empty"], [float(x) for x in person], n,
                 f"{sum(person)} of {len(pairs)} personality summaries were usable and not a copy of the dialogue",
                 [example(r, d) for (r, d), ok in zip(pairs, person, strict=True) if not ok]),
        ]  # fmt: skip

    return Task("day summaries", informative_dialogues(), safe(run), score)
