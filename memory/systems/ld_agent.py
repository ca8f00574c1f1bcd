"""``ld_agent``: LD-Agent ("Hello Again!", Li et al., NAACL 2025), tuning-free (zero-shot) variant.

- Event memory. A short-term cache M_S of timestamped utterances; when a new utterance arrives more
  than β after the last cached one, the cache is summarized (Prompt 1, Appendix E.1) into an event
  record (time, summary, topic nouns of the cached dialogue) in the long-term bank M_L and cleared
  (Eq. 4). Retrieval for the user utterance (Eq. 1-3): s_top = ½(|Vq∩Vk|/|Vq| + |Vq∩Vk|/|Vk|),
  λ_t = exp(−t/τ), s = λ_t (s_sem + s_top), only memories with s_sem > γ, else "No relevant memory".
- Dynamic personas. Every utterance goes through the persona extractor (Prompt 2, Appendix E.2);
  replies containing NO_TRAIT add nothing; user and agent traits go to separate banks.
- Response. Prompt 4 of Appendix E.3 with context, memories, user traits and agent traits.

The official code differs from the paper (notes §1.2): its key is the comma-joined noun list, it
takes the top-1 embedding neighbour, scores λ_t · s_top without s_sem and keeps it iff the noun overlap
is non-empty (γ unused). ``retrieval="code"`` selects that variant; ``retrieval="paper"`` (default)
follows Eq. 1-3 with the summary as key.

Platform adaptations (docs/memory-systems.md): compose() may not call the LLM, so (1) persona
extraction of a user utterance happens in after_turn, after the reply (the paper: before it); (2) at
session end the cache summary is computed ahead of time ("pending") and moved to M_L by the β rule
when the next utterance arrives, so the first reply of the next session already sees it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from memory import vectors
from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update
from memory.hygiene import DATA_RULE, NO_RECITAL, clean_memory_lines, data_block, inline_data
from memory.readiness.core import (
    START,
    Check,
    Task,
    calibration,
    facts_kept,
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
    embed_texts,
    fallback,
    iso,
    parse_iso,
    split_sentences,
    top_indices,
    turn_time,
)
from memory.systems.nouns import topic_nouns

NO_MEMORY = "No relevant memory"

SUMMARY_SYSTEM = (
    "You are good at extracting events and summarizing them in brief sentences. "
    "You will be shown a conversation between {user} and {agent}."
)
SUMMARY_USER = (
    "#Conversation#:\n{context}\n"
    "Based on the Conversation, please summarize the main points of the conversation with brief sentences in "
    "English, within 20 words.\nSUMMARY:"
)
PERSONA_SYSTEM = "You excel at extracting user personal traits from their words, a renowned local communication expert."
PERSONA_USER = (
    "If no traits can be extracted in the sentence, you should reply NO_TRAIT. Given you some format examples of "
    "traits extraction, such as:\n"
    "1. No, I have no longer serve in the millitary, I had served up the full term that I signed up for, and now "
    "work outside of the millitary. Extracted Traits: I now work elsewhere. I used to be in the military.\n"
    "2. That must a been some kind of endeavor. Its great that people are aware of issues that arise in their "
    "homes, otherwise it can be very problematic in the future.\nNO_TRAIT\n"
    "Please extract the personal traits who said this sentence (no more than 20 words):{sentence}"
)
#: Prompt 2's own example traits and sentences: a trait equal to one is kept only if the speaker said it.
PERSONA_EXAMPLES = (
    "I now work elsewhere.",
    "I used to be in the military.",
    "I now work elsewhere. I used to be in the military.",
    "No, I have no longer serve in the millitary, I had served up the full term that I signed up for, and now "
    "work outside of the millitary.",
    "That must a been some kind of endeavor.",
)
RESPONSE_SYSTEM = (
    "As a communication expert with outstanding communication habits, you embody the role of {agent} throughout "
    "the following dialogues. Here are some of your distinctive personal traits: {agent_traits}."
    "\n{rules}"
)
RESPONSE_USER = (
    "<CONTEXT>\nDrawing from your recent conversation with {user}:\n{context}\n"
    "<MEMORY>\nThe memories linked to the ongoing conversation are:\n{memories}\n"
    "<USER_TRAITS>\nDuring the conversation process between you and {user} in the past, you found that the "
    "{user} has the following characteristics:\n{user_traits}\n"
    "Now, please role-play as {agent} to continue the dialogue between {agent} and {user}.\n"
    "{user} just said: {input}\n"
    "Please respond to {user}'s statement using the following format (maximum 30 words, must be in English):{style}\n"
    "RESPONSE:"
)


# ------------------------------------------------------------------------------------ pure functions


def topic_overlap(vq: Sequence[str], vk: Sequence[str]) -> float:
    """Eq. 1: s_top = ½ (|Vq ∩ Vk| / |Vq| + |Vq ∩ Vk| / |Vk|); 0 when either set is empty."""
    q, k = set(vq), set(vk)
    if not q or not k:
        return 0.0
    inter = len(q & k)
    return 0.5 * (inter / len(q) + inter / len(k))


def time_decay(age_seconds: float, tau: float) -> float:
    """λ_t = exp(−t/τ), t in seconds (negative ages count as 0)."""
    return math.exp(-max(0.0, age_seconds) / tau)


class TopicIndex:
    """Eq. 1 for every key at once: the keys holding each noun (postings) and each key's noun count."""

    def __init__(self, keys: Sequence[Sequence[str]]) -> None:
        postings: dict[str, list[int]] = {}
        self.sizes = np.zeros(len(keys), dtype=np.float64)
        for i, key in enumerate(keys):
            nouns = set(key)
            self.sizes[i] = len(nouns)
            for noun in nouns:
                postings.setdefault(noun, []).append(i)
        self.postings = {noun: np.asarray(ix, dtype=np.intp) for noun, ix in postings.items()}
        self.divisors = np.where(self.sizes > 0, self.sizes, 1.0)  # a key without nouns overlaps nothing: 0/1
        self.nbytes = int(self.sizes.nbytes) * 2 + sum(ix.nbytes for ix in self.postings.values())

    def intersections(self, q: set[str]) -> np.ndarray:
        """|Vq ∩ Vk| for every key (float64)."""
        inter = np.zeros(len(self.sizes), dtype=np.float64)
        for noun in q:
            ix = self.postings.get(noun)
            if ix is not None:
                inter[ix] += 1.0
        return inter

    def overlap(self, vq: Sequence[str]) -> np.ndarray:
        """s_top of ``vq`` against every key (the same arithmetic as :func:`topic_overlap`)."""
        q = set(vq)
        inter = self.intersections(q)
        if not q:
            return inter
        return 0.5 * (inter / len(q) + inter / self.divisors)


def rank_paper(
    s_sem: np.ndarray, s_top: np.ndarray, ages: np.ndarray, *, tau: float, gamma: float, top_n: int
) -> list[tuple[int, float]]:
    """Eq. 2-3 on arrays: candidates with s_sem > γ, ranked by λ_t (s_sem + s_top), top_n (ties: older first)."""
    sem = np.asarray(s_sem, dtype=np.float64)
    candidates = np.flatnonzero(sem > gamma)
    if not candidates.size or top_n <= 0:
        return []
    decay = np.exp(-np.maximum(np.asarray(ages, dtype=np.float64)[candidates], 0.0) / tau)
    score = decay * (sem[candidates] + np.asarray(s_top, dtype=np.float64)[candidates])
    return [(int(candidates[o]), float(score[o])) for o in top_indices(score, top_n, candidates)]


def rank_paper_indexed(
    s_sem: np.ndarray,
    vq: Sequence[str],
    topics: TopicIndex,
    epochs: np.ndarray,
    now: float,
    *,
    tau: float,
    gamma: float,
    top_n: int,
) -> list[tuple[int, float]]:
    """``rank_paper(s_sem, topics.overlap(vq), now - epochs, ...)`` with Eq. 1 and the decay computed
    for the candidates (s_sem > γ) only: the same arithmetic on each candidate, so the same result,
    without the passes over the whole memory that the candidates do not need."""
    sem = np.asarray(s_sem, dtype=np.float64)
    candidates = np.flatnonzero(sem > gamma)
    if not candidates.size or top_n <= 0:
        return []
    q = set(vq)
    score = sem[candidates]
    if q:
        inter = topics.intersections(q)[candidates]
        score += 0.5 * (inter / len(q) + inter / topics.divisors[candidates])
    # λ_t as in rank_paper: ages = now − epoch, negative ages count as 0.
    score *= np.exp(-np.maximum(now - np.asarray(epochs, dtype=np.float64)[candidates], 0.0) / tau)
    return [(int(candidates[o]), float(score[o])) for o in top_indices(score, top_n, candidates)]


def rank_code(
    s_sem: np.ndarray, vq: Sequence[str], keys: Sequence[Sequence[str]], ages: np.ndarray, *, tau: float, top_n: int
) -> list[tuple[int, float]]:
    """The official code on arrays: the top_n nearest keys, scored λ_t · s_top, kept iff overlap > 0."""
    out = []
    for i in (int(x) for x in top_indices(np.asarray(s_sem), top_n)):
        if set(vq) & set(keys[i]):
            out.append((i, time_decay(float(ages[i]), tau) * topic_overlap(vq, keys[i])))
    out.sort(key=lambda x: (-x[1], x[0]))
    return out


def score_paper(
    s_sem: np.ndarray,
    vq: Sequence[str],
    keys: Sequence[Sequence[str]],
    ages: Sequence[float],
    *,
    tau: float,
    gamma: float,
    top_n: int,
) -> list[tuple[int, float]]:
    """Eq. 2-3: candidates with s_sem > γ, ranked by λ_t (s_sem + s_top); top_n of them (ties: older first)."""
    s_top = TopicIndex(keys).overlap(vq)
    return rank_paper(s_sem, s_top, np.asarray(ages, dtype=np.float64), tau=tau, gamma=gamma, top_n=top_n)


def score_code(
    s_sem: np.ndarray,
    vq: Sequence[str],
    keys: Sequence[Sequence[str]],
    ages: Sequence[float],
    *,
    tau: float,
    top_n: int,
) -> list[tuple[int, float]]:
    """The official code: the top_n nearest keys by embedding, scored λ_t · s_top, kept iff overlap > 0."""
    return rank_code(s_sem, vq, keys, np.asarray(ages, dtype=np.float64), tau=tau, top_n=top_n)


class EventIndex:
    """What retrieval needs about the stored events, built once per process and memory: the event
    times (seconds since the epoch, to compute ages without parsing dates per reply) and the topic
    index. Spot-checked against the events' times on use; an event is written once and never edited."""

    def __init__(self, events: Sequence[dict[str, Any]]) -> None:
        self.times = tuple(str(e["time"]) for e in events)
        self.epochs = np.array([parse_iso(x).timestamp() for x in self.times], dtype=np.float64)
        self.keys = [list(e["topics"]) for e in events]
        self.topics = TopicIndex(self.keys)
        self.nbytes = int(self.epochs.nbytes) + self.topics.nbytes


def humanize_age(seconds: float) -> str:
    """The code's rendering: "{Y} years {M} months {D} days {H} hours {m} minutes" (zero parts omitted)."""
    minutes = int(max(0, seconds) // 60)
    parts = []
    for unit, size in (("years", 525600), ("months", 43200), ("days", 1440), ("hours", 60), ("minutes", 1)):
        n, minutes = divmod(minutes, size)
        if n:
            parts.append(f"{n} {unit}")
    return " ".join(parts) or "0 minutes"


def gap_exceeds(last: str, t: datetime, beta: float) -> bool:
    """Eq. 4's trigger: the new utterance is more than β seconds after the last cached one."""
    return (t - parse_iso(last)).total_seconds() > beta


# ------------------------------------------------------------------------------------------- system


class LDAgent(BaseSystem):
    name = "ld_agent"
    label = "LD-Agent"
    source = "Li et al., NAACL 2025 (Hello Again!), Eq. 1-5, Appendix E; code leolee99/LD-Agent@20c1a67"
    params = {
        "retrieval": Param(
            "paper",
            "paper: λ_t(s_sem + s_top) with threshold γ on s_sem; code: the official code's variant.",
            "LD-Agent Eq. 1-3 vs leolee99/LD-Agent@20c1a67",
        ),
        "tau": Param(
            1e7,
            "Time-decay temperature τ in seconds (λ_t = exp(−t/τ)).",
            "code: decay_temp = 1e-7 (the paper gives no value)",
        ),
        "gamma": Param(
            0.25,
            "Semantic threshold γ on the cosine s_sem.",
            "code: squared-L2 dist_thres 1.5 on unit vectors = cosine 0.25",
        ),
        "beta": Param(
            3600, "Short-term cache gap β in seconds that triggers summarization.", "code: one_hour_seconds = 3600"
        ),
        "top_n": Param(1, "Memories returned per utterance.", "code: relevance_memory_number = 1"),
        "context_turns": Param(30, "Short-term entries shown as context.", "code: context_memory_number = 30"),
        "max_personas": Param(
            0, "Traits kept per persona bank, oldest dropped first (0 = all).", "code: max_*_personas = 0 (all)"
        ),
        "max_prompt_traits": Param(
            10,
            "Traits of each bank shown in a reply prompt: the ones most similar to the user's message "
            "(the most recent ones when the bot opens a session); 0 = all, as the code.",
            "ours: the code shows every trait, so the prompt grows without bound",
        ),
        "noun_extractor": Param(
            "heuristic", "heuristic (no model) or spacy (en_core_web_sm, as the code).", "our choice; code uses spaCy"
        ),
        "user_name": Param("User", "The user's name in the prompts.", "our choice"),
        "agent_name": Param("Assistant", "The agent's name in the prompts.", "our choice"),
        "summary_max_tokens": Param(60, "Token budget of an event summary (≤ 20 words).", "Prompt 1 (within 20 words)"),
        "persona_max_tokens": Param(
            40, "Token budget of a persona extraction (≤ 20 words).", "Prompt 2 (no more than 20 words)"
        ),
        "short_replies": Param(
            False, "Add the one-or-two-sentences instruction (Prompt 4 already caps at 30 words).", "Prompt 4"
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {
            "long_term": [],
            "short_term": [],
            "pending": None,
            "cached_turns": 0,
            "user_personas": [],
            "agent_personas": [],
        }

    # ------------------------------------------------------------------ helpers

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        out = []
        for event in state.get("long_term", []):
            out += [
                Stored("long-term memory", event["summary"]),
                Stored("long-term memory topics", " ".join(event.get("topics", []))),
            ]
        pending = state.get("pending")
        if pending:
            out += [Stored("pending event summary", pending["summary"]),
                    Stored("pending event topics", " ".join(pending.get("topics", [])))]  # fmt: skip
        out += [Stored("short-term memory", t["text"]) for t in state.get("short_term", [])]
        out += [Stored("user persona", p) for p in state.get("user_personas", [])]
        out += [Stored("agent persona", p) for p in state.get("agent_personas", [])]
        return [s for s in out if s.text.strip()]

    def nouns(self, text: str) -> list[str]:
        return topic_nouns(text, str(self.p["noun_extractor"]))

    def view(self, state: dict[str, Any], t: datetime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(M_L, M_S) as they are when an utterance arrives at ``t`` (Eq. 4 applied without an LLM call:
        uses the summary precomputed at session end, if it covers the whole cache). The lists are the
        state's own when the rule changes nothing (not copied at every reply): read them, do not modify."""
        lt: list[dict[str, Any]] = state.get("long_term", [])
        st: list[dict[str, Any]] = state.get("short_term", [])
        if st and gap_exceeds(st[-1]["time"], t, float(self.p["beta"])):
            pending = state.get("pending")
            if pending and pending.get("size") == len(st):
                lt = [*lt, {k: pending[k] for k in ("time", "summary", "topics")}]
            st = []
        return lt, st

    def key_text(self, event: dict[str, Any]) -> str:
        """What is embedded for an event: its summary (paper), or its comma-joined nouns (code)."""
        if self.p["retrieval"] == "paper":
            return str(event["summary"])
        if self.p["retrieval"] == "code":
            return ", ".join(event["topics"])
        raise ValueError(f"ld_agent: retrieval must be 'paper' or 'code', not {self.p['retrieval']!r}")

    def stored_events(self, state: dict[str, Any]) -> Iterable[dict[str, Any]]:
        """The events whose vectors the state keeps: M_L, then the pending summary (which view() may
        append to M_L), so that any view of M_L is a prefix of this list."""
        pending = state.get("pending")
        return chain(state.get("long_term", []), [pending] if pending else [])

    def key_texts(self, events: Iterable[dict[str, Any]]) -> tuple[str, ...]:
        """:meth:`key_text` of every event (one pass: compose calls it on the whole bank)."""
        if self.p["retrieval"] == "paper":
            return tuple(map(itemgetter("summary"), events))
        return tuple(self.key_text(e) for e in events)

    def stored_vectors(self, state: dict[str, Any]) -> vectors.Vectors:
        """The vectors of :meth:`stored_events`; their texts are read and checked once per state object
        and memory version (:func:`memory.vectors.load_checked`), not at every reply."""
        long_term, pending = state.get("long_term", []), state.get("pending")
        return vectors.load_checked(
            state.get("vectors"),
            (long_term, pending),
            len(long_term) + (1 if pending else 0),
            lambda: self.key_texts(self.stored_events(state)),
            self.embedder,
        )

    def with_vectors(self, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        """``after`` with the vectors of its stored events, embedding only the events that are new."""
        if self.embedder is None:  # no embedder, no vectors: compose() embeds once it has one
            return {k: v for k, v in after.items() if k != "vectors"}
        base = self.stored_vectors(before) if before.get("long_term") or before.get("pending") else None
        texts = self.key_texts(self.stored_events(after))
        new = vectors.extend(base, texts, self.embedder)
        # the texts were just read from these objects: the next compose of this state need not read them
        vectors.built_from(new, (after.get("long_term", []), after.get("pending")))
        return {**after, "vectors": new.block()}

    def retrieve(
        self, long_term: list[dict[str, Any]], query: str, t: datetime, stored: vectors.Vectors | None = None
    ) -> list[tuple[dict[str, Any], float]]:
        """Eq. 1-3 (or the code's variant) over ``long_term``; ``stored`` holds the vectors of a list of
        events of which ``long_term`` is a prefix (embedded here if not given)."""
        if not long_term or not query.strip():
            return []
        vq = self.nouns(query)
        if stored is None or len(stored) < len(long_term):
            stored = vectors.load(None, self.key_texts(long_term), self.embedder)
        n = len(long_term)
        # Events are never edited once written, so spot-checking times (first, middle, last) is enough
        # to catch a bank that is not the one the index was built from; the texts were checked by load().
        probes = sorted({0, n // 2, n - 1})
        index = stored.derived(
            ("ld_agent", "events"),
            lambda: EventIndex(long_term),
            valid=lambda ix: len(ix.times) >= n and all(ix.times[i] == long_term[i]["time"] for i in probes),
        )
        q = embed_texts(self.embedder, [query if self.p["retrieval"] == "paper" else ", ".join(vq)])[0]
        s_sem = stored.matrix[:n] @ q
        if self.p["retrieval"] == "code":
            ages = t.timestamp() - index.epochs[:n]
            ranked = rank_code(s_sem, vq, index.keys, ages, tau=float(self.p["tau"]), top_n=int(self.p["top_n"]))
        else:
            ranked = rank_paper_indexed(
                s_sem,
                vq,
                index.topics,
                index.epochs[:n],
                t.timestamp(),
                tau=float(self.p["tau"]),
                gamma=float(self.p["gamma"]),
                top_n=int(self.p["top_n"]),
            )
        return [(long_term[i], s) for i, s in ranked]

    def names(self) -> dict[str, str]:
        return {"user": str(self.p["user_name"]), "agent": str(self.p["agent_name"])}

    def prompt_traits(self, traits: list[str], query: str) -> list[str]:
        """At most ``max_prompt_traits`` traits for a reply prompt, in bank order: those most similar to
        the query (ties: the newer), or the most recent ones when there is no query."""
        cap = int(self.p["max_prompt_traits"])
        if not cap or len(traits) <= cap:
            return list(traits)
        if not query.strip():
            return traits[-cap:]
        vectors = embed_texts(self.embedder, [query, *traits])
        scores = vectors[1:] @ vectors[0]
        order = sorted(range(len(traits)), key=lambda i: (-float(scores[i]), -i))[:cap]
        return [traits[i] for i in sorted(order)]

    # ------------------------------------------------------------------ interface

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        query_turn = session[-1] if session else Turn("user", "")
        t = turn_time(query_turn, now)
        lt, st = self.view(state, t)
        cached = int(state.get("cached_turns", 0))
        entries = [*st, *({"speaker": x.speaker, "text": x.text} for x in session[cached:-1])]
        entries = entries[-int(self.p["context_turns"]) :] if int(self.p["context_turns"]) else entries
        n = self.names()
        context = "\n".join(
            f"[TURN {i}] : {n['user'] if e['speaker'] == 'user' else n['agent']}: {e['text']}."
            for i, e in enumerate(entries, 1)
        )
        if session:
            stored = self.stored_vectors(state) if lt else None
            found = [e for e, _ in self.retrieve(lt, query_turn.text, t, stored)]
        else:  # the bot opens the session: no utterance to match, so the latest events
            found = sorted(lt, key=lambda e: e["time"])[-int(self.p["top_n"]) :] if int(self.p["top_n"]) else []
        memories = [
            f"{humanize_age((t - parse_iso(e['time'])).total_seconds())} ago, {e['summary'].rstrip('.')}."
            for e in found
        ]
        user_traits = self.prompt_traits(state.get("user_personas", []), query_turn.text)
        agent_traits = self.prompt_traits(state.get("agent_personas", []), query_turn.text)
        system = RESPONSE_SYSTEM.format(
            agent=n["agent"],
            agent_traits=inline_data("traits", " ".join(agent_traits)) if agent_traits else "none",
            rules=f"{DATA_RULE} {NO_RECITAL}",
        )
        said = (
            inline_data("message", query_turn.text)
            if session
            else f"(nothing yet: {n['user']} has just come back and you speak first)"
        )
        user = RESPONSE_USER.format(
            **n,
            context=data_block("context", context) if context else "(the conversation has just started)",
            memories=data_block("memory", "\n".join(memories)) if memories else NO_MEMORY,
            user_traits=data_block("traits", "\n".join(user_traits)) if user_traits else "none",
            input=said,
            style=f" {SHORT_REPLIES}" if self.p["short_replies"] else "",
        )
        shown = memories + [f"user trait: {x}" for x in user_traits] + [f"agent trait: {x}" for x in agent_traits]
        return Prompt([ChatMessage("system", system), ChatMessage("user", user)], memory=shown)

    def summarize(self, cache: list[dict[str, Any]], trace: dict[str, Any]) -> dict[str, Any]:
        """A(M_S): an event record (time of the last cached utterance, summary, topic nouns)."""
        n = self.names()
        context = "\n".join(f"{n['user'] if e['speaker'] == 'user' else n['agent']}: {e['text']}" for e in cache)
        reply = ask(
            self.llm,
            [
                {"role": "system", "content": f"{SUMMARY_SYSTEM.format(**n)} {DATA_RULE}"},
                {"role": "user", "content": SUMMARY_USER.format(context=data_block("conversation", context))},
            ],
            purpose="ld_agent_summary",
            max_tokens=int(self.p["summary_max_tokens"]),
            trace=trace,
        )
        summary = re.sub(r"^\s*summary\s*:\s*", "", reply or "", flags=re.IGNORECASE).strip().replace("\n", " ")
        if summary:
            turns = [{"speaker": e["speaker"], "text": e["text"]} for e in cache]
            kept = clean_memory_lines(
                split_sentences(summary), trace=trace, where="ld_agent_summary", session=turns, about_user=False
            )
            summary = " ".join(kept)
        if not summary:
            # Defined fallback: the user's own words (first 20), so the event stays retrievable.
            words = " ".join(e["text"] for e in cache if e["speaker"] == "user").split()[:20]
            summary = " ".join(words)
            fallback(trace, "ld_agent_summary", "empty event summary: used the user's first 20 words", reply or "")
        return {"time": cache[-1]["time"], "summary": summary, "topics": self.nouns(context), "size": len(cache)}

    def readiness_tasks(self) -> list[Task]:
        """Prompt 1 (event summaries) and Prompt 2 (persona traits) on the calibration data."""
        return [ld_summary_task(self), ld_persona_task(self)]

    def extract_persona(self, text: str, trace: dict[str, Any]) -> str | None:
        """Prompt 2; kept iff the reply has no NO_TRAIT and is longer than 3 characters (the code's rule)."""
        reply = ask(
            self.llm,
            [
                {"role": "system", "content": f"{PERSONA_SYSTEM} {DATA_RULE}"},
                {"role": "user", "content": PERSONA_USER.format(sentence="\n" + inline_data("sentence", text))},
            ],
            purpose="ld_agent_persona",
            max_tokens=int(self.p["persona_max_tokens"]),
            trace=trace,
        )
        if reply is None:
            return None
        out = (
            re.sub(r"^\s*(extracted traits?|traits?)\s*:\s*", "", reply.strip(), flags=re.IGNORECASE)
            .replace("\n", " ")
            .strip()
        )
        if "NO_TRAIT" in out.upper().replace(" ", "_") or len(out) <= 3:
            return None
        kept = clean_memory_lines(
            [out], trace=trace, where="ld_agent_persona", examples=PERSONA_EXAMPLES, support=text, about_user=False
        )
        return kept[0] if kept else None

    def ingest(
        self, state: dict[str, Any], turns: Sequence[Turn], now: datetime, trace: dict[str, Any]
    ) -> dict[str, Any]:
        """Add utterances to M_S (flushing to M_L by the β rule) and update the persona banks."""
        state = {**state, "long_term": list(state["long_term"]), "short_term": list(state["short_term"])}
        cap = int(self.p["max_personas"])
        for turn in turns:
            t = turn_time(turn, now)
            st = state["short_term"]
            if st and gap_exceeds(st[-1]["time"], t, float(self.p["beta"])):
                pending = state.get("pending")
                record = pending if pending and pending.get("size") == len(st) else self.summarize(st, trace)
                state["long_term"].append({k: record[k] for k in ("time", "summary", "topics")})
                trace.setdefault("flushed", []).append(record["summary"])
                state["short_term"], state["pending"] = [], None
            state["short_term"].append({"time": iso(t), "speaker": turn.speaker, "text": turn.text})
            trait = self.extract_persona(turn.text, trace)
            if trait:
                bank = "user_personas" if turn.speaker == "user" else "agent_personas"
                traits = [x for x in state[bank] if x != trait] + [trait]  # deduplicated (the code keeps duplicates)
                state[bank] = traits[-cap:] if cap else traits
                trace.setdefault("personas", []).append({"speaker": turn.speaker, "trait": trait})
        return state

    def after_turn(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        cached = int(state.get("cached_turns", 0))
        before = state
        state = self.ingest(state, session[cached:], now, trace)
        state["cached_turns"] = len(session)
        return Update(state=self.with_vectors(before, state), trace=trace)

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        cached = int(state.get("cached_turns", 0))
        before = state
        state = self.ingest(state, session[cached:], now, trace)
        state["pending"] = self.summarize(state["short_term"], trace) if state["short_term"] else None
        state["cached_turns"] = 0
        trace["pending_summary"] = state["pending"]["summary"] if state["pending"] else ""
        return Update(state=self.with_vectors(before, state), trace=trace)


# ------------------------------------------------------------------------------------------ readiness

LD_THRESHOLDS = {
    "event_summary_not_empty": 0.80,
    "event_summary_facts_kept": 0.50,
    "event_summary_not_a_copy": 0.80,
    "persona_trait_decision": 0.80,
    "persona_traits_kept": 0.60,
}


def ld_summary_task(system: LDAgent) -> Task:
    """Prompt 1 on each informative calibration dialogue: a usable event summary (not the fallback to
    the user's first words) that keeps the labelled facts and does not copy the dialogue."""

    def run(d: dict[str, Any]) -> dict[str, Any]:
        trace: dict[str, Any] = {}
        cache_ = [
            {"time": t.at.isoformat() if t.at else "", "speaker": t.speaker, "text": t.text}
            for t in turns_of(d["turns"], START)
        ]
        record = system.summarize(cache_, trace)
        fell_back = any(f["where"] == "ld_agent_summary" for f in trace.get("fallbacks", []))
        return {"summary": record["summary"], "fallback": fell_back, "trace": trace}

    def score(records: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[Check]:
        def example(r: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
            if failed(r):
                return {"dialogue": d["id"], "error": r["error"]}
            return {"dialogue": d["id"], "summary": r["summary"][:200], "fallbacks": fallback_reasons(r["trace"])}

        return summary_checks(
            records,
            items,
            names=("event_summary_not_empty", "event_summary_facts_kept", "event_summary_not_a_copy"),
            thresholds=LD_THRESHOLDS,
            noun=("event summary", "event summaries"),
            text=lambda r: str(r["summary"]),
            usable=lambda r: not failed(r) and not r["fallback"],
            example=example,
            unusable=" (else the user's first words are stored)",
        )

    return Task("event summaries", informative_dialogues(), safe(run), score)


def ld_persona_task(system: LDAgent) -> Task:
    """Prompt 2 on labelled utterances: a trait where the speaker said something about themself (and
    the trait names it), NO_TRAIT where not."""

    def run(item: dict[str, Any]) -> dict[str, Any]:
        trace: dict[str, Any] = {}
        return {"trait": system.extract_persona(item["text"], trace)}

    def score(records: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[Check]:
        pairs = list(zip(records, items, strict=False))
        decision = [not failed(r) and (r["trait"] is not None) == (i["trait"] is not None) for r, i in pairs]
        with_trait = [(r, i) for r, i in pairs if i["trait"]]
        kept = [not failed(r) and bool(r["trait"]) and facts_kept(r["trait"], i["trait"]) == 1 for r, i in with_trait]
        n_trait = sum(1 for i in items if i["trait"])
        return [
            rate("persona_trait_decision", LD_THRESHOLDS["persona_trait_decision"], [float(x) for x in decision],
                 len(items), f"{sum(decision)} of {len(pairs)} utterances rightly given a trait or NO_TRAIT",
                 [{"utterance": i["text"], "expected": "a trait" if i["trait"] else "NO_TRAIT",
                   "got": r.get("trait"), **({"error": r["error"]} if failed(r) else {})}
                  for (r, i), ok in zip(pairs, decision, strict=True) if not ok]),
            rate("persona_traits_kept", LD_THRESHOLDS["persona_traits_kept"], [float(x) for x in kept], n_trait,
                 f"{sum(kept)} of {len(with_trait)} traits name what the speaker said",
                 [{"utterance": i["text"], "got": r.get("trait")}
                  for (r, i), ok in zip(with_trait, kept, strict=True) if not ok]),
        ]  # fmt: skip

    return Task("persona extraction", list(calibration()["persona"]), safe(run), score)
