"""Embeddings kept with the state (memory/vectors.py): each memory item is embedded once, when it is
written; compose() embeds the query only; a block that does not match its texts is never trusted."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from memory import vectors
from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.registry import build_system
from memory.systems.memorybank import units
from memory.tests.dialogue import SESSIONS, run_dialogue
from memory.tests.fake_llm import fake_llm

NOW = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
EMBEDDING_ARMS = ["ld_agent", "memory_accumulate", "memory_update", "memorybank", "tim"]


class CountingEmbedder:
    """The hashing embedder, recording every text it is asked to embed."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.name = self.inner.name
        self.dim = self.inner.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += list(texts)
        return self.inner.embed(texts)


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    vectors.CACHE.clear()
    yield
    vectors.CACHE.clear()


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


def params(name: str) -> dict[str, Any]:
    return {"forgetting": False} if name == "memorybank" else {}


def built_state(name: str, embedder: CountingEmbedder) -> dict[str, Any]:
    """The state after the scripted 4 first sessions, written by the arm itself."""
    llm = fake_llm()
    run = run_dialogue(build_system(name, llm=llm, embedder=embedder, **params(name)), llm, SESSIONS[:4])
    return run.states[-1]


def stored_texts(name: str, state: dict[str, Any]) -> list[str]:
    if name == "tim":
        return [t["text"] for t in state["thoughts"]]
    if name == "ld_agent":
        return [e["summary"] for e in [*state["long_term"], *([state["pending"]] if state["pending"] else [])]]
    if name == "memorybank":
        return [text for _, text in units(state)]
    return list(state["memory"])


@pytest.mark.parametrize("name", EMBEDDING_ARMS)
@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_compose_embeds_the_query_and_no_stored_item(name: str, cache: str) -> None:
    embedder = CountingEmbedder()
    state = roundtrip(built_state(name, embedder))
    assert state["vectors"]["count"] == len(stored_texts(name, state)) > 0
    if cache == "cold":
        vectors.CACHE.clear()  # a new process: the block is decoded, not re-embedded
    embedder.texts.clear()
    system = build_system(name, llm=fake_llm(), embedder=embedder, **params(name))
    at = NOW + timedelta(days=28, minutes=1)
    system.compose(state, [Turn("user", "Do you remember my dog Rex?", at)], at)
    assert len(embedder.texts) == 1, embedder.texts
    assert not set(embedder.texts) & set(stored_texts(name, state))


@pytest.mark.parametrize("name", EMBEDDING_ARMS)
def test_each_stored_item_is_embedded_once_over_a_whole_dialogue(name: str) -> None:
    embedder = CountingEmbedder()
    state = built_state(name, embedder)
    items = stored_texts(name, state)
    embedded_items = [t for t in embedder.texts if t in set(items)]
    assert sorted(embedded_items) == sorted(set(embedded_items)), "an item was embedded twice"


@pytest.mark.parametrize("name", EMBEDDING_ARMS)
def test_a_state_without_vectors_is_embedded_once_per_process_and_answers_the_same(name: str) -> None:
    embedder = CountingEmbedder()
    state = roundtrip(built_state(name, embedder))
    system = build_system(name, llm=fake_llm(), embedder=embedder, **params(name))
    at = NOW + timedelta(days=28, minutes=1)
    turn = [Turn("user", "Do you remember my dog Rex?", at)]
    with_block = system.compose(state, turn, at)
    legacy = {k: v for k, v in state.items() if k != "vectors"}  # a state written before vectors were kept
    vectors.CACHE.clear()
    embedder.texts.clear()
    first = system.compose(legacy, turn, at)
    assert len(embedder.texts) == len(set(stored_texts(name, state))) + 1
    embedder.texts.clear()
    second = system.compose(legacy, turn, at)
    assert len(embedder.texts) == 1
    assert first.memory == second.memory == with_block.memory


def test_a_block_that_does_not_match_its_texts_is_not_trusted() -> None:
    embedder = CountingEmbedder()
    texts = ["The user has a dog named Rex.", "The user works at a bakery."]
    block = vectors.extend(None, texts, embedder).block()
    edited = ["The user has a cat named Tom.", "The user works at a bakery."]  # edited behind the arm's back
    got = vectors.load(block, edited, embedder)
    assert np.array_equal(got.matrix, vectors.as_stored(HashingEmbedder().embed(edited)))
    vectors.CACHE.clear()
    assert np.array_equal(vectors.load(block, edited, embedder).matrix, got.matrix)  # digest check on decode


def test_a_malformed_block_is_reported_and_the_texts_are_embedded_instead(caplog: pytest.LogCaptureFixture) -> None:
    embedder = CountingEmbedder()
    texts = ["The user has a dog named Rex."]
    block = dict(vectors.extend(None, texts, embedder).block())
    vectors.CACHE.clear()
    block["data"] = block["data"][:-8]
    with pytest.raises(vectors.VectorBlockError, match="bytes"):
        vectors.decode(block)
    got = vectors.load(block, texts, embedder)
    assert np.array_equal(got.matrix, vectors.as_stored(HashingEmbedder().embed(texts)))
    assert "vector block ignored" in caplog.text
    with pytest.raises(vectors.VectorBlockError, match="malformed"):
        vectors.decode({"count": 1, "dim": 2, "data": "not base64!"})
    with pytest.raises(vectors.VectorBlockError, match="dtype"):
        vectors.decode({"count": 0, "dim": 2, "data": "", "dtype": "float64"})


def test_the_block_round_trips_float16_values_exactly() -> None:
    embedder = HashingEmbedder()
    texts = ["one fact", "another fact", "one fact"]
    vecs = vectors.extend(None, texts, embedder)
    block = roundtrip(vecs.block())
    assert block["count"] == 3 and block["dim"] == embedder.dim and block["dtype"] == "float16"
    assert np.array_equal(vectors.decode(block), vecs.matrix)
    assert np.array_equal(vecs.matrix, vectors.as_stored(embedder.embed(texts)))
    assert len(block["data"]) == 4 * ((3 * embedder.dim * 2 + 2) // 3)


def test_extend_embeds_only_the_new_texts_and_keeps_the_order_asked() -> None:
    embedder = CountingEmbedder()
    base = vectors.extend(None, ["a dog", "a cat"], embedder)
    embedder.texts.clear()
    grown = vectors.extend(base, ["a cat", "a bird", "a dog", "a bird"], embedder)
    assert embedder.texts == ["a bird"]
    assert grown.texts == ("a cat", "a bird", "a dog", "a bird")
    assert np.array_equal(grown.matrix[0], base.matrix[1]) and np.array_equal(grown.matrix[2], base.matrix[0])
    assert vectors.extend(grown, grown.texts, embedder) is grown


def test_rows_are_a_view_for_a_prefix_and_none_for_an_unknown_text() -> None:
    vecs = vectors.extend(None, ["a", "b", "c"], HashingEmbedder())
    rows = vecs.rows(["a", "b"])
    assert rows is not None and rows.base is not None and np.array_equal(rows, vecs.matrix[:2])
    picked = vecs.rows(["c", "a"])
    assert picked is not None and np.array_equal(picked, vecs.matrix[[2, 0]])
    assert vecs.rows(["a", "z"]) is None


def test_the_cache_keeps_at_most_its_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = 10 * 256 * (4 + 2)  # float32 and float16 copies of 10 rows
    cache = vectors._Cache(max_bytes=3 * entry)
    for i in range(5):
        cache.put(vectors.Vectors("m", [f"t{i}-{j}" for j in range(10)], np.zeros((10, 256), dtype=np.float16)))
    assert sum(v.nbytes for v in cache._items.values()) <= cache.max_bytes
    assert len(cache._items) == 3
    monkeypatch.setenv("MEMEVAL_VECTOR_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="MEMEVAL_VECTOR_CACHE_MB"):
        vectors._max_bytes()


def test_a_cached_entry_is_served_only_for_its_own_texts() -> None:
    embedder = CountingEmbedder()
    block = vectors.extend(None, ["a dog"], embedder).block()
    forged = {**block}  # same digest and count, other texts
    embedder.texts.clear()
    got = vectors.load(forged, ["a cat"], embedder)
    assert got.texts == ("a cat",) and embedder.texts == ["a cat"]


def test_redacted_replaces_the_vector_data_with_a_note() -> None:
    state = {"memory": ["a dog"], "vectors": vectors.extend(None, ["a dog"], HashingEmbedder()).block()}
    shown = vectors.redacted(state)
    assert shown["memory"] == ["a dog"] and "data" not in shown["vectors"]
    assert shown["vectors"]["note"] == "1 x 256 float16 vectors (hashing-256), not shown"
    assert "data" in state["vectors"]


def test_an_append_adds_a_piece_to_the_block_and_a_removal_rewrites_it() -> None:
    embedder = CountingEmbedder()
    first = roundtrip(vectors.extend(None, ["a dog", "a cat"], embedder).block())
    vectors.CACHE.clear()
    loaded = vectors.load(first, ["a dog", "a cat"], embedder)
    grown = vectors.extend(loaded, ["a dog", "a cat", "a bird"], embedder)
    block = roundtrip(grown.block())
    assert isinstance(block["data"], list) and block["data"][0] == first["data"] and len(block["data"]) == 2
    assert np.array_equal(vectors.decode(block).astype(np.float32), grown.matrix)
    shrunk = vectors.extend(grown, ["a cat", "a bird"], embedder).block()
    assert isinstance(shrunk["data"], str)
    many = loaded
    for i in range(vectors.MAX_SEGMENTS + 1):
        many = vectors.extend(many, [*many.texts, f"fact {i}"], embedder)
    assert isinstance(many.block()["data"], str)  # compacted
    assert np.array_equal(vectors.decode(many.block()).astype(np.float32), many.matrix)


@pytest.mark.parametrize("name", ["ld_agent", "memory_accumulate", "memory_update"])
def test_an_arm_without_an_embedder_still_updates_and_keeps_no_vectors(name: str) -> None:
    llm = fake_llm()
    system = build_system(name, llm=llm)
    session = [Turn("user", "I have a dog named Rex.", NOW), Turn("bot", "Nice!", NOW)]
    state = {**system.initial_state(), "vectors": {"stale": True}}
    state = system.after_turn(state, session, NOW).state
    update = system.end_session(state, session, NOW + timedelta(minutes=5))
    assert "Rex" in json.dumps(update.state) and "vectors" not in update.state


def test_load_checked_reads_the_texts_once_per_state_object_and_version() -> None:
    embedder = CountingEmbedder()
    items = ["The user has a dog named Rex.", "The user works at a bakery."]
    block = vectors.extend(None, items, embedder).block()
    reads: list[int] = []

    def texts_of(events: list[dict[str, str]]) -> list[str]:
        reads.append(1)
        return [e["text"] for e in events]

    def load(events: list[dict[str, str]], blk: dict[str, Any]) -> vectors.Vectors:
        return vectors.load_checked(blk, (events,), len(events), lambda: texts_of(events), embedder)

    events = [{"text": t} for t in items]
    first = load(events, block)
    assert load(events, block) is first and len(reads) == 1  # the same object again: trusted
    assert load(roundtrip(events), block) is first and len(reads) == 2  # a new object: read and compared
    grown = vectors.extend(first, [*items, "The user plays chess."], embedder).block()
    events.append({"text": "The user plays chess."})  # same list, new length and block: read again
    assert load(events, grown).texts[-1] == "The user plays chess." and len(reads) == 3


EDITED = "The user keeps a tortoise named Shelly in the garden."


def edited_copy(name: str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with one stored text replaced and everything else (the vector block too) unchanged."""
    edited = roundtrip(state)
    if name == "tim":
        edited["thoughts"][0]["text"] = EDITED
    else:
        edited["long_term"][0]["summary"] = EDITED
    return edited


@pytest.mark.parametrize("name", ["ld_agent", "tim"])
def test_an_edited_state_is_not_served_the_vectors_of_the_state_it_was_copied_from(name: str) -> None:
    embedder = CountingEmbedder()
    state = roundtrip(built_state(name, embedder))
    assert stored_texts(name, state)[0] != EDITED
    system = build_system(name, llm=fake_llm(), embedder=embedder, **params(name))
    at = NOW + timedelta(days=28, minutes=1)
    turn = [Turn("user", EDITED, at)]
    original = system.compose(state, turn, at)
    system.compose(state, turn, at)  # now trusted for this object
    edited = edited_copy(name, state)
    assert edited["vectors"] == state["vectors"]
    embedder.texts.clear()
    warm = system.compose(edited, turn, at)
    assert embedder.texts.count(EDITED) == 2  # the query, and the edited item: embedded, not served its old row
    assert any(EDITED in line for line in warm.memory) and not any(EDITED in line for line in original.memory)
    vectors.CACHE.clear()  # a new process: what the edited state retrieves from scratch
    assert system.compose(edited, turn, at).as_dicts() == warm.as_dicts()
    assert system.compose(state, turn, at).as_dicts() == original.as_dicts()  # the original still answers as before


def test_load_checked_never_frees_a_gone_state_on_the_callers_path() -> None:
    embedder = CountingEmbedder()
    block = vectors.extend(None, ["a cat"], embedder).block()
    freed: list[str] = []

    class Items(list[str]):
        def __init__(self, name: str) -> None:
            super().__init__(["a cat"])
            self.name = name

        def __del__(self) -> None:
            freed.append(self.name)

    def load(items: Items) -> vectors.Vectors:
        return vectors.load_checked(block, (items,), 1, lambda: list(items), embedder)

    first = load(Items("gone"))  # its state is gone once the call returns: only the vectors hold it
    alive = Items("alive")
    assert load(alive) is first and freed == []  # not freed on the caller's path
    assert first.checked_against((alive,))  # and the new object is the one remembered
    load(Items("gone too"))  # MAX_RETIRED (2) retired now: "gone" and the tuple that held "alive"
    assert freed == [] and vectors.MAX_RETIRED == 2
    vectors.release_retired()  # what the next update does (built_from), off the reply's path
    assert freed == ["gone"]
    load(Items("third"))
    load(Items("fourth"))
    load(Items("fifth"))  # past the bound: the oldest retired one is freed by the caller
    assert freed == ["gone", "gone too"]


@pytest.mark.parametrize("name", ["ld_agent", "tim"])
def test_the_state_a_per_turn_update_returns_is_composed_without_reading_its_texts_again(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = CountingEmbedder()
    system = build_system(name, llm=fake_llm(), embedder=embedder, **params(name))
    at = NOW + timedelta(days=28, minutes=1)
    state = roundtrip(built_state(name, embedder))
    session = [Turn("user", "I adopted a kitten named Tom last week.", at), Turn("bot", "How lovely!", at)]
    new = system.after_turn(state, session, at).state
    assert new is not state and stored_texts(name, new) != []
    full_checks: list[int] = []
    load = vectors.load
    monkeypatch.setattr(vectors, "load", lambda *a, **k: full_checks.append(1) or load(*a, **k))
    built: list[int] = []
    if name == "tim":
        from memory.systems import tim

        table = tim.LSHTable
        monkeypatch.setattr(tim, "LSHTable", lambda *a: built.append(1) or table(*a))
    query = [Turn("user", "Do you remember my kitten?", at)]
    trusted = system.compose(new, query, at)  # the update read these texts to write the block
    assert full_checks == [] and built == []  # (and TiM's update built the hash tables of its new memory)
    parsed = roundtrip(new)  # the same state read from the database: a new object, checked in full
    assert system.compose(parsed, query, at).as_dicts() == trusted.as_dicts() and full_checks == [1]
    vectors.CACHE.clear()  # and a new process retrieves the same
    assert system.compose(roundtrip(new), query, at).as_dicts() == trusted.as_dicts()
