"""memory.display: every arm's memory reads as text, lists and tables, never as characters or vectors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.base import Turn
from memory.display import Block, lines, readable
from memory.embed import make_embedder
from memory.llm import make_llm
from memory.registry import MEMORY_SYSTEMS, build_system

NOW = datetime(2026, 1, 5, 18, 0, tzinfo=UTC)


def _after_one_session(name: str) -> dict[str, object]:
    system = build_system(name, llm=make_llm("scripted"), embedder=make_embedder("hashing"))
    turns = [
        Turn("user", "I adopted a cat named Miso. I live in Lyon.", NOW),
        Turn("bot", "How lovely! How old is Miso?", NOW),
    ]
    state = system.after_turn(system.initial_state(), turns, NOW).state
    return system.end_session(state, turns, NOW + timedelta(minutes=5)).state


def _texts(blocks: list[Block]) -> list[str]:
    out = []
    for b in blocks:
        out += [b.text, *b.items, *(c for row in b.rows for c in row)]
    return out


@pytest.mark.parametrize("name", sorted(MEMORY_SYSTEMS))
def test_every_arms_memory_after_a_session_reads_without_single_characters_or_vectors(name: str) -> None:
    blocks = readable(_after_one_session(name))
    texts = _texts(blocks)
    assert not [b for b in blocks if b.kind == "list" and b.items and all(len(x) == 1 for x in b.items)]
    assert not any("base64" in t or '"data"' in t for t in texts)
    assert all(b.kind in ("text", "list", "table", "facts") for b in blocks)
    if name in ("full_history", "bm25", "memorybank", "ld_agent", "a_mem"):  # they store the turns themselves
        assert any("Miso" in t for t in texts), [b.title for b in blocks]


def test_rsums_memory_text_is_one_paragraph_not_one_character_per_line() -> None:
    blocks = readable({"memory": "The user adopted a cat.\nThe user lives in Lyon.", "sessions": 2})
    assert (blocks[0].kind, blocks[0].title) == ("text", "Memory")
    assert blocks[0].text.startswith("The user adopted")
    assert blocks[-1].rows == [["Sessions", "2"]]
    assert lines("The user adopted a cat.\nThe user lives in Lyon.\n") == [
        "The user adopted a cat.",
        "The user lives in Lyon.",
    ]


def test_structured_memories_become_tables_with_their_fields_as_columns() -> None:
    state = {
        "long_term": [{"time": "2026-01-05", "summary": "Adopted a cat.", "topics": ["cat", "pet"]}],
        "history": {"2026-01-05": [{"query": "hi", "response": "hello", "memory_strength": 1}]},
        "R": [[0.1, -0.2], [0.3, 0.4]],
    }
    by_title = {b.title: b for b in readable(state)}
    events = by_title["Long-term memory (event summaries)"]
    assert events.columns == ["time", "summary", "topics"] and events.rows == [
        ["2026-01-05", "Adopted a cat.", "cat, pet"]
    ]
    history = by_title["Stored dialogue turns"]
    assert history.columns == ["key", "query", "response", "memory_strength"]
    assert history.rows == [["2026-01-05", "hi", "hello", "1"]]
    assert by_title["R"].text == "2 x 2 numbers (not shown)"


def test_a_memory_that_is_not_a_mapping_is_still_shown() -> None:
    assert readable(["a fact", "another"])[0].items == ["a fact", "another"]
    assert readable("plain")[0].text == "plain"
