"""A readable view of any arm's memory state (or trace): text, lists and tables instead of raw JSON.

The view is generic on purpose: it reads the JSON shapes the arms use (a string is a text, a list of
strings a list, a list of objects a table, a mapping of dates to objects a table with the date as its
first column, numbers a few facts), so a new arm gets a readable memory without code here.
Embeddings are summarised (``memory.vectors.redacted``), and matrices of numbers (TiM's LSH planes)
are named, not printed.

>>> [b.kind for b in readable({"memory": "The user has a cat.", "facts": ["a", "b"], "sessions": 2})]
['text', 'list', 'facts']
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from memory import vectors

# Nicer titles for the keys the seed arms use; any other key is shown humanised ("long_term" -> "Long term").
TITLES: dict[str, str] = {
    "memory": "Memory",
    "summary": "Summary",
    "long_term": "Long-term memory (event summaries)",
    "short_term": "Short-term memory (this session's turns)",
    "pending": "Pending event summary",
    "user_persona": "Persona of the user",
    "bot_persona": "Persona of the bot",
    "persona": "Persona",
    "human": "About the user",
    "thoughts": "Thoughts",
    "history": "Stored dialogue turns",
    "utterances": "Indexed utterances",
    "sessions": "Sessions",
    "memories": "Memories",
    "notes": "Notes",
    "archive": "Archival memory",
    "recent": "Recent messages",
}


@dataclass
class Block:
    """One part of a readable view. ``kind``: ``text`` (``text``), ``list`` (``items``), ``table``
    (``columns`` and ``rows`` of strings) or ``facts`` (``items`` as "name: value" pairs in ``rows``)."""

    title: str
    kind: str
    text: str = ""
    items: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.rows) if self.kind in ("table", "facts") else len(self.items) if self.kind == "list" else 0


def title_of(key: str) -> str:
    return TITLES.get(key) or key.replace("_", " ").strip().capitalize()


def cell(value: Any) -> str:
    """One value as text: strings as they are, lists of scalars joined, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return ", ".join(cell(v) for v in value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _numbers_matrix(value: list[Any]) -> bool:
    return bool(value) and all(
        isinstance(row, list) and row and all(isinstance(x, int | float) and not isinstance(x, bool) for x in row)
        for row in value
    )


def _redacted_vectors(value: Any) -> bool:
    return isinstance(value, dict) and "digest" in value and "note" in value


def _table(title: str, records: list[dict[str, Any]], first: str | None = None) -> Block:
    columns: list[str] = [first] if first else []
    for r in records:
        columns += [k for k in r if k not in columns]
    return Block(title, "table", columns=columns, rows=[[cell(r.get(c)) for c in columns] for r in records])


def block(key: str, value: Any) -> Block | None:
    """The block of one top-level key (None for a scalar: those are gathered into one facts block)."""
    title = title_of(key)
    if _scalar(value):
        return None
    if _redacted_vectors(value):
        return Block(title, "text", text=str(value["note"]))
    if isinstance(value, list):
        if not value:
            return Block(title, "list")
        if all(isinstance(v, str) for v in value):
            return Block(title, "list", items=list(value))
        if _numbers_matrix(value):
            return Block(title, "text", text=f"{len(value)} x {len(value[0])} numbers (not shown)")
        if all(isinstance(v, dict) for v in value):
            return _table(title, value)
        if all(isinstance(v, list) for v in value):
            width = max(len(v) for v in value)
            return Block(title, "table", columns=[""] * width, rows=[[cell(x) for x in v] for v in value])
        return Block(title, "list", items=[cell(v) for v in value])
    if isinstance(value, dict):
        if value and all(isinstance(v, list) and all(isinstance(x, dict) for x in v) for v in value.values()):
            # e.g. MemoryBank's history: {date: [turn, ...]}
            return _table(title, [{"key": k, **x} for k, rows in value.items() for x in rows], first="key")
        if value and all(isinstance(v, dict) for v in value.values()):
            return _table(title, [{"key": k, **v} for k, v in value.items()], first="key")
        return Block(title, "facts", rows=[[str(k), cell(v)] for k, v in value.items()])
    return Block(title, "text", text=cell(value))


def readable(state: Any) -> list[Block]:
    """The blocks of a memory state or trace (any JSON value), in the state's key order; the scalar
    fields (counters, dates, seeds) come last as one "facts" block."""
    state = vectors.redacted(state)
    if not isinstance(state, dict):
        found = block("memory", state)
        return [found] if found else [Block("Memory", "text", text=cell(state))]
    blocks: list[Block] = []
    facts: list[list[str]] = []
    for key, value in state.items():
        if isinstance(value, str) and key in TITLES:
            blocks.append(Block(title_of(key), "text", text=value))
            continue
        found = block(key, value)
        if found is None:
            facts.append([title_of(key), cell(value)])
        else:
            blocks.append(found)
    if facts:
        blocks.append(Block("Other fields", "facts", rows=facts))
    return blocks


def lines(value: Any) -> list[str]:
    """A trace's summary or memory as a list of lines: a list as it is, a text as its non-empty lines
    (Rsum's memory is one text: iterating it would give one character per line)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [line for line in (x.strip() for x in value.splitlines()) if line]
    if isinstance(value, list):
        return [cell(v) for v in value]
    return [cell(value)]


def as_text(blocks: list[Block]) -> str:
    """The blocks as plain text (one section per block), e.g. for a CSV cell."""
    parts = []
    for b in blocks:
        if b.kind == "text":
            body = b.text
        elif b.kind == "list":
            body = "\n".join(f"- {x}" for x in b.items)
        elif b.kind == "facts":
            body = "\n".join(f"{k}: {v}" for k, v in b.rows)
        else:
            head = [" | ".join(b.columns)] if any(b.columns) else []
            body = "\n".join(head + [" | ".join(row) for row in b.rows])
        parts.append(f"{b.title}:\n{body}" if body else f"{b.title}: (empty)")
    return "\n\n".join(parts)
