"""Think-in-Memory: LSH grouping (Eq. 1), recall inside the group, post-thinking, forget and merge."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import Completion, ScriptedLLM
from memory.systems.tim import ThinkInMemory, lsh, make_projection, parse_thoughts, recall

NOW = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)


def test_lsh_maps_each_vector_to_the_argmax_of_xr_and_minus_xr() -> None:
    R = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)  # d = 2, b = 4
    x = np.array([[3.0, 1.0], [1.0, 3.0], [-3.0, 1.0], [1.0, -3.0]], dtype=np.float32)
    assert lsh(x, R).tolist() == [0, 1, 2, 3]


def test_lsh_puts_nearby_vectors_in_the_same_group_more_often_than_random_ones() -> None:
    rng = np.random.default_rng(1)
    R = make_projection(64, 8, seed=0)
    x = rng.standard_normal((500, 64))
    near = x + 0.05 * rng.standard_normal((500, 64))
    far = rng.standard_normal((500, 64))
    same_near = float(np.mean(lsh(x, R) == lsh(near, R)))
    same_far = float(np.mean(lsh(x, R) == lsh(far, R)))
    assert same_near > 0.9 and same_far < 0.3
    assert set(lsh(x, R).tolist()) == set(range(8))


def test_the_projection_is_fixed_by_its_seed() -> None:
    assert np.array_equal(make_projection(16, 8, 3), make_projection(16, 8, 3))
    assert not np.array_equal(make_projection(16, 8, 3), make_projection(16, 8, 4))


def test_recall_ranks_only_the_thoughts_of_the_querys_group() -> None:
    R = np.array([[1.0], [0.0]], dtype=np.float32)  # b = 2: the sign of the first coordinate
    vectors = np.array([[0.6, 0.8], [1.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    groups = lsh(vectors, R)
    query = np.array([0.8, 0.6], dtype=np.float32)
    ranked = recall(query, vectors, groups, R, k=5)
    assert [i for i, _ in ranked] == [0, 1]
    assert [round(score, 4) for _, score in ranked] == [0.96, 0.8]
    assert 2 not in [i for i, _ in recall(query, vectors, groups, R, k=5)]
    assert [i for i, _ in recall(query, vectors, groups, R, k=1)] == [0]


def test_post_thinking_output_keeps_the_text_or_renders_the_triple() -> None:
    assert parse_thoughts("(Book, Recommended, The Little Prince).\nRecommended book is The Little Prince.") == [
        "Recommended book is The Little Prince."
    ]
    assert parse_thoughts("(User, Has, a dog).") == ["User has a dog."]
    assert parse_thoughts("") == []


def organizing_script(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    if "extract the relation" in text:
        question = text.rsplit("<message>", 1)[1].split("</message>", 1)[0]
        return {
            "I like football.": "Michael likes to play football.",
            "I hate football.": "Michael does not like to play football.",
            "I also like basketball.": "Michael likes to play basketball.",
        }[question]
    group = text.rsplit("<thoughts>\n", 1)[1].split("\n</thoughts>", 1)[0].splitlines()
    if "remove the counterfactual" in text:
        return "\n".join(t for t in group if "does not" not in t)
    if "merge the similar" in text and len(group) > 1:
        return "Michael likes to play football and basketball."
    return "\n".join(group)


def test_new_thoughts_are_inserted_then_forgotten_and_merged_inside_their_group() -> None:
    system = ThinkInMemory(llm=ScriptedLLM(organizing_script), embedder=HashingEmbedder(), groups=2)
    state = system.initial_state()
    session: list[Turn] = []
    for question in ("I like football.", "I hate football.", "I also like basketball."):
        session += [Turn("user", question, NOW), Turn("bot", "I see.", NOW)]
        update = system.after_turn(state, session, NOW)
        state = update.state
    texts = [t["text"] for t in state["thoughts"]]
    assert "Michael does not like to play football." not in texts
    # every stored thought sits in the group its own embedding hashes to
    R = np.asarray(state["R"], dtype=np.float32)
    vectors = HashingEmbedder().embed(texts)
    assert [t["group"] for t in state["thoughts"]] == lsh(vectors, R).tolist()
    steps = [o["step"] for o in update.trace.get("organized", [])]
    assert steps and set(steps) <= {"tim_forget", "tim_merge"}


def test_a_malformed_organize_reply_keeps_the_group_and_is_recorded() -> None:
    def script(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "extract the relation" in text:
            return "The user owns a red bike." if "bike" in text else "The user owns a red car."
        return "Input:\nOutput:"

    system = ThinkInMemory(llm=ScriptedLLM(script), embedder=HashingEmbedder(), groups=2)
    state = system.initial_state()
    session = [Turn("user", "I own a red bike.", NOW), Turn("bot", "Cool.", NOW)]
    state = system.after_turn(state, session, NOW).state
    session += [Turn("user", "And a red car.", NOW), Turn("bot", "Nice.", NOW)]
    update = system.after_turn(state, session, NOW)
    assert {t["text"] for t in update.state["thoughts"]} == {"The user owns a red bike.", "The user owns a red car."}
    if len({t["group"] for t in update.state["thoughts"]}) == 1:
        assert [f["where"] for f in update.trace["fallbacks"]] == ["tim_forget", "tim_merge"]


def test_an_empty_post_thinking_reply_inserts_nothing_and_is_recorded() -> None:
    system = ThinkInMemory(llm=ScriptedLLM([""]), embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), [Turn("user", "Hi", NOW), Turn("bot", "Hello", NOW)], NOW)
    assert update.state["thoughts"] == [] and update.trace["fallbacks"][0]["where"] == "tim_think"


def test_compose_recalls_the_top_k_thoughts_of_the_querys_group() -> None:
    embedder = HashingEmbedder()
    system = ThinkInMemory(llm=ScriptedLLM(["unused"]), embedder=embedder, groups=2, k=1)
    R = make_projection(embedder.dim, 2, 0)
    texts = ["The user has a dog named Rex.", "The user works at a bakery.", "The user likes hiking."]
    groups = lsh(embedder.embed(texts), R).tolist()
    state = {"thoughts": [{"text": t, "group": g} for t, g in zip(texts, groups, strict=True)], "R": R.tolist()}
    query = "Do you remember my dog Rex?"
    q_group = int(lsh(embedder.embed([query]), R)[0])
    prompt = system.compose(state, [Turn("user", query, NOW)], NOW)
    assert len(prompt.memory) <= 1
    assert all(groups[texts.index(m)] == q_group for m in prompt.memory)
    if groups[0] == q_group:
        assert prompt.memory == ["The user has a dog named Rex."]


def test_forget_and_merge_see_only_the_newest_thoughts_of_a_large_group() -> None:
    seen: list[int] = []

    def script(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "extract the relation" in text:
            return "The user owns a red bike number 99."
        group = text.rsplit("<thoughts>\n", 1)[1].split("\n</thoughts>", 1)[0].splitlines()
        seen.append(len(group))
        return "\n".join(group)

    system = ThinkInMemory(llm=ScriptedLLM(script), embedder=HashingEmbedder(), groups=2, organize_window=5)
    R = make_projection(HashingEmbedder().dim, 2, 0)
    texts = [f"The user owns a red bike number {i}." for i in range(30)]
    groups = lsh(HashingEmbedder().embed(texts), R).tolist()
    state = {"thoughts": [{"text": t, "group": g} for t, g in zip(texts, groups, strict=True)], "R": R.tolist()}
    update = system.after_turn(state, [Turn("user", "Bike?", NOW), Turn("bot", "Yes.", NOW)], NOW)
    assert seen and max(seen) <= 5
    assert len(update.state["thoughts"]) == 31  # nothing outside the window was touched or lost


def test_a_forget_or_merge_reply_cut_at_the_token_limit_loses_no_thought_and_stores_no_half_sentence() -> None:
    def script(messages: list[dict[str, str]]) -> str | Completion:
        text = messages[-1]["content"]
        if "extract the relation" in text:
            return "The user owns a red car." if "car" in text else "The user owns a red bike."
        return Completion("The user owns a red bike.\nThe user owns a", "scripted", finish_reason="length")

    system = ThinkInMemory(llm=ScriptedLLM(script), embedder=HashingEmbedder(), groups=2)
    state: dict[str, Any] = {"thoughts": [], "R": None}
    for text in ("I own a red bike.", "And a red car."):
        state = system.after_turn(state, [Turn("user", text, NOW), Turn("bot", "Nice.", NOW)], NOW).state
    stored = {t["text"] for t in state["thoughts"]}
    assert stored == {"The user owns a red bike.", "The user owns a red car."}


def test_a_merge_that_drops_a_thought_is_rejected() -> None:
    def script(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        group = text.rsplit("<thoughts>\n", 1)[1].split("\n</thoughts>", 1)[0].splitlines()
        return group[0] if "merge the similar" in text else "\n".join(group)

    system = ThinkInMemory(llm=ScriptedLLM(script), embedder=HashingEmbedder())
    trace: dict = {}
    group = ["The user plays the piano.", "The user has a sister named Ana."]
    assert system.organize(group, trace) == group
    assert "dropped 1 thought" in trace["fallbacks"][0]["reason"]


def test_a_thought_that_copies_the_prompts_example_is_not_stored() -> None:
    system = ThinkInMemory(llm=ScriptedLLM(["The capital of China is Beijing."]), embedder=HashingEmbedder())
    update = system.after_turn(
        system.initial_state(), [Turn("user", "I like tea.", NOW), Turn("bot", "Nice.", NOW)], NOW
    )
    assert update.state["thoughts"] == [] and "example" in update.trace["rejected"][0]["reason"]


def test_a_merged_thought_is_rehashed_into_the_group_its_own_text_hashes_to() -> None:
    """Merge may rewrite a group's thoughts into text that belongs elsewhere: the stored group must be F(new
    text), not the group it was merged in (Eq. 1 must hold for every stored thought, or recall misses it)."""
    groups, embedder = 16, HashingEmbedder()
    R = make_projection(embedder.dim, groups, 0)

    def group(text: str) -> int:
        return int(lsh(embedder.embed([text]), R)[0])

    texts = [f"The user {v} {o}." for v in ("owns", "likes", "paints", "sells") for o in ("a red bike", "old maps",
             "green tea", "a blue boat", "jazz records", "rare stamps", "wooden toys", "fresh bread")]  # fmt: skip
    # two thoughts that land in the same group (so forget and merge run on it), and a merge result that does not
    first, second = next((a, b) for i, a in enumerate(texts) for b in texts[i + 1 :] if group(a) == group(b))
    # the merge keeps both thoughts' words (a merge that drops a thought is refused), and hashes elsewhere
    combined = f"{first[:-1]} and {second.removeprefix('The user ')[:-1]}"
    tails = ("", " too", " at home", " these days", " every week", " with friends", " since May", " in town")
    merged = next(t for tail in tails if group(t := f"{combined}{tail}.") != group(first))
    thought_of = {"<message>First.</message>": first, "<message>Second.</message>": second}

    def script(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "extract the relation" in text:
            return thought_of[text.rsplit("Question: ", 1)[1].split("\n", 1)[0]]
        if "merge the similar" in text:
            return merged
        return text.rsplit("<thoughts>\n", 1)[1].split("\n</thoughts>", 1)[0]  # forget keeps the group

    system = ThinkInMemory(llm=ScriptedLLM(script), embedder=embedder, groups=groups)
    state = system.initial_state()
    session: list[Turn] = []
    for question in ("First.", "Second."):
        session += [Turn("user", question, NOW), Turn("bot", "I see.", NOW)]
        state = system.after_turn(state, session, NOW).state
    (thought,) = state["thoughts"]
    assert thought["text"] == merged
    assert thought["group"] == group(merged) != group(first)
    # and recall finds it from a query about the merged text
    assert merged in system.compose(state, [Turn("user", merged, NOW)], NOW).memory
