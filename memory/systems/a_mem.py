"""``a_mem``: A-Mem, agentic memory (Xu et al., NeurIPS 2025, arXiv 2502.12110).

Note construction: every exchange becomes a note whose keywords, context (one sentence) and tags are
written by the LLM (``analyze_content``). Link generation and memory evolution: the k nearest notes
are retrieved by embedding; one LLM call decides whether the new note evolves: "strengthen" links it
to chosen neighbours and replaces its tags; "update_neighbor" rewrites the neighbours' context and
tags. Retrieval for a reply: the k nearest notes, plus the notes they link to (up to k more).

Prompts are the official code's (WujiangXu/A-mem@17ce6b6 ``memory_layer.py``, MIT), verbatim except
that the neighbours are numbered by note id (the code prints their list position), so that the
ids the model returns in ``suggested_connections`` are stable, and that the conversation, the note's
context and keywords and the neighbours are quoted in tagged data blocks (memory.hygiene), with one
sentence in the system message saying that tagged text is data. The contexts the model writes (for a
new note and for evolved neighbours) pass :func:`memory.hygiene.rejection_reason`: a speaker label, a
refusal, a fragment or a bot line is not stored (the note gets the code's fallback "General", a
neighbour keeps its context), recorded in ``trace["rejected"]``.

Platform choices: the exchanges of a session become notes at the end of the session (the reply
prompt already holds the current session; the stored trace shows every evolution); the index is
always computed from the notes' current text (the code re-indexes only every ``evo_threshold`` = 100
evolutions), so an evolved neighbour is found by its new context and tags at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update, chat_turns
from memory.hygiene import DATA_RULE, data_block, inline_data, rejection_reason
from memory.readiness.core import Check, Task, calibration, copies, exchanges, failed, rate, safe
from memory.systems.common import SHORT_REPLIES, ask, aware, embed_texts, fallback, top_k, turn_time
from memory.systems.prompts import memory_block, system_prompt

ANALYZE_PROMPT = """Generate a structured analysis of the following content by:
            1. Identifying the most salient keywords (focus on nouns, verbs, and key concepts)
            2. Extracting core themes and contextual elements
            3. Creating relevant categorical tags

            Format the response as a JSON object:
            {
                "keywords": [
                    // several specific, distinct keywords that capture key concepts and terminology
                    // Order from most to least important
                    // Don't include keywords that are the name of the speaker or time
                    // At least three keywords, but don't be too redundant.
                ],
                "context":
                    // one sentence summarizing:
                    // - Main topic/domain
                    // - Key arguments/points
                    // - Intended audience/purpose
                ,
                "tags": [
                    // several broad categories/themes for classification
                    // Include domain, format, and type tags
                    // At least three tags, but don't be too redundant.
                ]
            }

            Content for analysis:
            """

EVOLUTION_PROMPT = """
                                You are an AI memory evolution agent responsible for managing and evolving a knowledge base.
                                Analyze the the new memory note according to keywords and context, also with their several nearest neighbors memory.
                                Make decisions about its evolution.

                                The new memory context:
                                {context}
                                content: {content}
                                keywords: {keywords}

                                The nearest neighbors memories:
                                {nearest_neighbors_memories}

                                Based on this information, determine:
                                1. Should this memory be evolved? Consider its relationships with other memories.
                                2. What specific actions should be taken (strengthen, update_neighbor)?
                                   2.1 If choose to strengthen the connection, which memory should it be connected to? Can you give the updated tags of this memory?
                                   2.2 If choose to update_neighbor, you can update the context and tags of these memories based on the understanding of these memories. If the context and the tags are not updated, the new context and tags should be the same as the original ones. Generate the new context and tags in the sequential order of the input neighbors.
                                Tags should be determined by the content of these characteristic of these memories, which can be used to retrieve them later and categorize them.
                                Note that the length of new_tags_neighborhood must equal the number of input neighbors, and the length of new_context_neighborhood must equal the number of input neighbors.
                                The number of neighbors is {neighbor_number}.
                                Return your decision in JSON format with the following structure:
                                {{
                                    "should_evolve": True or False,
                                    "actions": ["strengthen", "update_neighbor"],
                                    "suggested_connections": ["neighbor_memory_ids"],
                                    "tags_to_update": ["tag_1",..."tag_n"],
                                    "new_context_neighborhood": ["new context",...,"new context"],
                                    "new_tags_neighborhood": [["tag_1",...,"tag_n"],...["tag_1",..."tag_n"]],
                                }}
                                """

# The code's system message for every call (OpenAIController.get_completion), plus our data rule.
JSON_SYSTEM = f"You must respond with a JSON object. {DATA_RULE}"


# ------------------------------------------------------------------------------------ pure functions


def parse_object(reply: str | None) -> dict[str, Any] | None:
    """The JSON object in a reply (fences, Python's True/False and trailing commas tolerated), or None."""
    if not reply:
        return None
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", reply.strip(), flags=re.MULTILINE)
    if "{" in text:
        text = text[text.find("{") : text.rfind("}") + 1]
    text = re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", text))
    text = re.sub(r",\s*([}\]])", r"\1", text)
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def strings(value: Any) -> list[str]:
    """A list of non-empty strings from a JSON value (anything else gives [])."""
    if not isinstance(value, list):
        return []
    return [str(x).strip() for x in value if isinstance(x, str | int | float) and str(x).strip()]


def note_turns(content: str) -> list[Turn]:
    """The exchange a note was made from, as turns (for memory-write validation)."""
    turns = []
    for line in content.split("\n"):
        speaker, _, text = line.partition(": ")
        if speaker in ("User", "Assistant") and text:
            turns.append(Turn("user" if speaker == "User" else "bot", text))
    return turns


def note_document(note: dict[str, Any]) -> str:
    """What the index embeds for a note: the code's ``add_note`` document."""
    return (
        f"content:{note['content']} context:{note['context']} keywords: {', '.join(note['keywords'])} "
        f"tags: {', '.join(note['tags'])}"
    )


def neighbour_listing(notes: Sequence[dict[str, Any]]) -> str:
    """The code's ``find_related_memories`` rendering, numbered by note id."""
    return "".join(
        f"memory index:{n['id']}\t talk start time:{n['timestamp']}\t memory content: {n['content']}\t "
        f"memory context: {n['context']}\t memory keywords: {n['keywords']}\t memory tags: {n['tags']}\n"
        for n in notes
    )


def evolve(
    note: dict[str, Any], neighbours: list[dict[str, Any]], decision: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """Apply an evolution decision (the code's ``process_memory``), pure.

    strengthen: the note links to the suggested neighbour ids (only ids of the shown neighbours are
    kept) and takes ``tags_to_update``; update_neighbor: neighbour i takes ``new_tags_neighborhood[i]``
    and ``new_context_neighborhood[i]`` (its own context when that list is shorter), for i up to the
    shorter of the neighbours and the new tags. Returns (note, neighbours, what changed)."""
    changes: list[str] = []
    if decision.get("should_evolve") is not True:
        return note, neighbours, changes
    actions = strings(decision.get("actions"))
    note = dict(note)
    neighbours = [dict(n) for n in neighbours]
    shown = {n["id"] for n in neighbours}
    if "strengthen" in actions:
        links = [int(x) for x in strings(decision.get("suggested_connections")) if x.lstrip("-").isdigit()]
        links = list(dict.fromkeys(x for x in links if x in shown and x not in note["links"]))  # once each
        note["links"] = [*note["links"], *links]
        tags = strings(decision.get("tags_to_update"))
        if tags:
            note["tags"] = tags
        changes.append(f"strengthen: links {links}, tags {note['tags']}")
    if "update_neighbor" in actions:
        contexts = decision.get("new_context_neighborhood")
        contexts = contexts if isinstance(contexts, list) else []
        tag_lists = decision.get("new_tags_neighborhood")
        tag_lists = tag_lists if isinstance(tag_lists, list) else []
        for i in range(min(len(neighbours), len(tag_lists))):
            tags = strings(tag_lists[i])
            if tags:
                neighbours[i]["tags"] = tags
            if i < len(contexts) and isinstance(contexts[i], str) and contexts[i].strip():
                neighbours[i]["context"] = contexts[i].strip()
            changes.append(
                f"update_neighbor {neighbours[i]['id']}: {neighbours[i]['context']!r} {neighbours[i]['tags']}"
            )
    return note, neighbours, changes


# ------------------------------------------------------------------------------------------- system


class AMem(BaseSystem):
    name = "a_mem"
    label = "A-Mem (agentic memory)"
    source = "Xu et al., NeurIPS 2025 (arXiv 2502.12110) §3; code WujiangXu/A-mem@17ce6b6 memory_layer.py (MIT)"
    params = {
        "k": Param(
            5, "Nearest notes for link generation / evolution, and for each reply.", "code: find_related_memories(k=5)"
        ),
        "follow_links": Param(
            True,
            "A reply also sees the notes linked from the retrieved ones (up to k more).",
            "code: find_related_memories_raw",
        ),
        "analyze_max_tokens": Param(200, "Token budget of a note analysis (JSON).", "ours (code: 1000)"),
        "evolve_max_tokens": Param(500, "Token budget of an evolution decision (JSON).", "ours (code: 1000)"),
        "temperature": Param(0.0, "Temperature of the note and evolution calls.", "ours: 0 like every arm (code: 0.7)"),
        "short_replies": Param(
            True, "Ask for one or two short sentences per reply.", "our choice (same for every arm)"
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {"notes": [], "next_id": 0, "sessions": 0}

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        out = []
        for note in state.get("notes", []):
            out.append(Stored("notes", note["content"]))
            extra = [note.get("context", ""), *note.get("keywords", []), *note.get("tags", [])]
            out += [Stored("note context, keywords and tags", x) for x in extra if isinstance(x, str) and x.strip()]
        return out

    def search(self, notes: list[dict[str, Any]], query: str, k: int) -> list[dict[str, Any]]:
        if not notes or not query.strip() or k <= 0:
            return []
        vectors = embed_texts(self.embedder, [query, *(note_document(n) for n in notes)])
        return [notes[i] for i, _ in top_k(vectors[0], vectors[1:], k)]

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        notes = state.get("notes", [])
        query = next((t.text for t in reversed(session) if t.speaker == "user"), "")
        k = int(self.p["k"])
        # The bot opens the session (no message to match): the newest notes.
        found = self.search(notes, query, k) if session else (list(notes[-k:]) if k > 0 else [])
        if self.p["follow_links"]:
            by_id = {n["id"]: n for n in notes}
            seen = {n["id"] for n in found}
            linked: list[dict[str, Any]] = []
            for n in found:
                for target in n["links"]:
                    if target in by_id and target not in seen and len(linked) < k:
                        linked.append(by_id[target])
                        seen.add(target)
            found = found + linked
        lines = [
            f"({n['timestamp'][:10]}) {n['content']} [context: {n['context']}; tags: {', '.join(n['tags'])}]"
            for n in found
        ]
        block = memory_block(lines, bullet="")
        if self.p["short_replies"]:
            block = f"{block}\n\n{SHORT_REPLIES}".strip()
        return Prompt([ChatMessage("system", system_prompt(now, block)), *chat_turns(session)], memory=lines)

    def ask_json(
        self, prompt: str, purpose: str, max_tokens: int, trace: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, str]:
        reply = ask(
            self.llm,
            [{"role": "system", "content": JSON_SYSTEM}, {"role": "user", "content": prompt}],
            purpose=purpose,
            max_tokens=max_tokens,
            trace=trace,
            temperature=float(self.p["temperature"]),
            structured=True,
        )
        return parse_object(reply), reply or ""

    def readiness_tasks(self) -> list[Task]:
        """Note construction on each exchange of the calibration dialogues."""
        return [a_mem_notes_task(self)]

    def analyze(self, content: str, trace: dict[str, Any]) -> dict[str, Any]:
        """Keywords, context and tags of a new note; the code's fallback ([], "General", []) if unparseable."""
        prompt = ANALYZE_PROMPT + data_block("conversation", content)
        obj, raw = self.ask_json(prompt, "a_mem_note", int(self.p["analyze_max_tokens"]), trace)
        if obj is None:
            if raw:
                fallback(trace, "a_mem_note", "no JSON analysis: keywords [], context 'General', tags []", raw)
            return {"keywords": [], "context": "General", "tags": []}
        context = obj.get("context")
        if isinstance(context, list):  # the code joins a list context
            context = " ".join(strings(context))
        context = str(context).strip() if isinstance(context, str) and context.strip() else "General"
        reason = rejection_reason(context, session=note_turns(content), min_words=1)
        if reason is not None:
            trace.setdefault("rejected", []).append({"where": "a_mem_note", "text": context, "reason": reason})
            context = "General"
        return {"keywords": strings(obj.get("keywords")), "context": context, "tags": strings(obj.get("tags"))}

    def add_note(self, state: dict[str, Any], content: str, at: datetime, trace: dict[str, Any]) -> dict[str, Any]:
        notes = [dict(n) for n in state["notes"]]
        note = {
            "id": int(state["next_id"]),
            "content": content,
            "timestamp": aware(at).isoformat(),
            "links": [],
            **self.analyze(content, trace),
        }
        neighbours = self.search(notes, content, int(self.p["k"]))
        record: dict[str, Any] = {"note": note["id"], "neighbours": [n["id"] for n in neighbours], "changes": []}
        if neighbours:
            prompt = EVOLUTION_PROMPT.format(
                context=inline_data("context", note["context"]),
                content=data_block("conversation", note["content"]),
                keywords=inline_data("notes", str(note["keywords"])),
                nearest_neighbors_memories=data_block("memory", neighbour_listing(neighbours)),
                neighbor_number=len(neighbours),
            )
            decision, raw = self.ask_json(prompt, "a_mem_evolve", int(self.p["evolve_max_tokens"]), trace)
            if decision is None:
                if raw:
                    fallback(trace, "a_mem_evolve", "no JSON decision: no evolution", raw)
            else:
                note, evolved, record["changes"] = evolve(note, neighbours, decision)
                evolved = self.valid_contexts(neighbours, evolved, trace)
                by_id = {n["id"]: n for n in evolved}
                notes = [by_id.get(n["id"], n) for n in notes]
        trace.setdefault("notes", []).append(record)
        return {**state, "notes": [*notes, note], "next_id": note["id"] + 1}

    def valid_contexts(
        self, before: list[dict[str, Any]], after: list[dict[str, Any]], trace: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """``after`` with every rewritten context that may not be stored put back to ``before``'s."""
        out = []
        for old, new in zip(before, after, strict=True):
            if new["context"] != old["context"]:
                reason = rejection_reason(new["context"], session=note_turns(old["content"]), min_words=1)
                if reason is not None:
                    trace.setdefault("rejected", []).append(
                        {"where": "a_mem_evolve", "text": new["context"], "reason": reason}
                    )
                    new = {**new, "context": old["context"]}
            out.append(new)
        return out

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        state = {**self.initial_state(), **state}
        for n, turn in enumerate(session):
            if turn.speaker == "bot" and n > 0 and session[n - 1].speaker == "user":
                content = f"User: {session[n - 1].text}\nAssistant: {turn.text}"
                state = self.add_note(state, content, turn_time(turn, now), trace)
        if session and session[-1].speaker == "user":  # a last message the bot never answered
            state = self.add_note(state, f"User: {session[-1].text}", turn_time(session[-1], now), trace)
        state["sessions"] = int(state.get("sessions", 0)) + 1
        return Update(state=state, trace=trace)


# ------------------------------------------------------------------------------------------ readiness

NOTE_THRESHOLDS = {"note_context_usable": 0.80, "note_context_not_a_copy": 0.80}


def a_mem_notes_task(system: AMem) -> Task:
    """Note construction on each exchange: keywords and a context sentence the arm keeps (not the
    code's "General" fallback), not a copy of the exchange."""
    items = [(d, pair) for d in calibration()["dialogues"] for pair in exchanges(d)]

    def content_of(item: tuple[dict[str, Any], tuple[str, str]]) -> str:
        _, (user, bot) = item
        return f"User: {user}\nAssistant: {bot}" if bot else f"User: {user}"

    def run(item: tuple[dict[str, Any], tuple[str, str]]) -> dict[str, Any]:
        trace: dict[str, Any] = {}
        return {"note": system.analyze(content_of(item), trace), "trace": trace}

    def score(records: list[dict[str, Any]], items: list[Any]) -> list[Check]:
        pairs = list(zip(records, items, strict=False))
        usable = [not failed(r) and r["note"]["context"] != "General" and bool(r["note"]["keywords"]) for r, _ in pairs]
        clean = [
            ok and not copies(r["note"]["context"], content_of(i)) for (r, i), ok in zip(pairs, usable, strict=True)
        ]

        def example(r: dict[str, Any], i: Any) -> dict[str, Any]:
            if failed(r):
                return {"content": content_of(i)[:160], "error": r["error"]}
            return {"content": content_of(i)[:160], "note": r["note"], "rejected": r["trace"].get("rejected", [])[:2]}

        return [
            rate("note_context_usable", NOTE_THRESHOLDS["note_context_usable"], [float(x) for x in usable], len(items),
                 f"{sum(usable)} of {len(pairs)} notes have keywords and a context sentence the arm kept",
                 [example(r, i) for (r, i), ok in zip(pairs, usable, strict=True) if not ok]),
            rate("note_context_not_a_copy", NOTE_THRESHOLDS["note_context_not_a_copy"], [float(x) for x in clean],
                 len(items), f"{sum(clean)} of {len(pairs)} notes have a context that does not copy the exchange",
                 [example(r, i) for (r, i), ok, c in zip(pairs, usable, clean, strict=True) if ok and not c]),
        ]  # fmt: skip

    return Task("note construction", items, safe(run), score)
