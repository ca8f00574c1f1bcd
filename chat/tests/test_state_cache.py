"""The per-process cache of parsed memory states (chat/state.py): a reply reads only the state's version
with its session and parses ``memory_state`` only on a miss; a write is cached under its new version once
committed; a write by another process is read again, never served stale; a cached state is never
changed in place."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from chat import arms, sessions, state, turns
from chat.models import ChatSession, Episode, Message
from chat.tests.conftest import SeeingMemory, start
from memory.llm import ScriptedLLM
from memory.llmwrap import RecordingLLM
from memory.registry import MEMORY_SYSTEMS
from memory.tests.fake_llm import fake_llm
from studies.models import Arm, Study

# ------------------------------------------------------------------------------------------ the cache


def test_a_cached_state_is_served_only_at_its_version() -> None:
    cache = state.StateCache()
    kept = {"items": ["a"]}
    cache.put(7, 3, kept)
    assert cache.get(7, 3) is kept
    assert cache.get(7, 2) is None and cache.get(7, 4) is None and cache.get(8, 3) is None
    assert (cache.hits, cache.misses) == (1, 3)


def test_the_cache_keeps_the_latest_version_of_an_episode_and_the_object_it_already_holds() -> None:
    cache = state.StateCache()
    v3, v4 = {"v": 3}, {"v": 4}
    cache.put(7, 3, v3)
    cache.put(7, 4, v4)
    assert cache.get(7, 3) is None and cache.get(7, 4) is v4 and len(cache) == 1
    cache.put(7, 3, {"v": 3})  # a slow reader's older state does not replace the newer one
    assert cache.get(7, 4) is v4
    cache.put(7, 4, {"v": 4})  # the same version parsed again: the object already handed out stays
    assert cache.get(7, 4) is v4


def test_the_cache_forgets_the_least_recently_used_episode_past_its_entry_limit(settings: Any) -> None:
    settings.CHAT_STATE_CACHE_ENTRIES = 2
    cache = state.StateCache()
    cache.put(1, 0, {"e": 1})
    cache.put(2, 0, {"e": 2})
    assert cache.get(1, 0) == {"e": 1}  # episode 1 is now the most recently used
    cache.put(3, 0, {"e": 3})
    assert cache.get(2, 0) is None and cache.get(1, 0) == {"e": 1} and cache.get(3, 0) == {"e": 3}
    settings.CHAT_STATE_CACHE_ENTRIES = 0  # off: nothing is kept
    cache.put(4, 0, {"e": 4})
    assert len(cache) == 0


def test_the_cache_stays_within_its_size_budget_and_skips_a_state_larger_than_all_of_it(settings: Any) -> None:
    big = {"items": [{"text": f"item {i} " + "x" * 200} for i in range(2000)]}  # ~0.7 MB as Python objects
    size = state.approx_bytes(big)
    assert 0.5e6 < size < 1.5e6
    settings.CHAT_STATE_CACHE_MB = 2 * size / 1024 / 1024 + 0.01
    cache = state.StateCache()
    for episode in range(1, 5):
        cache.put(episode, 0, {"items": list(big["items"])})
    assert len(cache) == 2 and cache.nbytes <= 2 * size + 1000
    assert cache.get(3, 0) is not None and cache.get(4, 0) is not None
    settings.CHAT_STATE_CACHE_MB = size / 2 / 1024 / 1024
    cache.put(9, 0, big)
    assert cache.get(9, 0) is None


def test_the_size_estimate_grows_with_the_memory_and_costs_no_walk_over_it() -> None:
    def memory(n: int) -> dict[str, Any]:
        return {"long_term": [{"summary": f"The user likes thing {i}.", "topics": ["thing"]} for i in range(n)]}

    small, large = state.approx_bytes(memory(1000)), state.approx_bytes(memory(10000))
    assert 9 < large / small < 11


def test_a_state_changed_in_place_after_it_was_cached_is_caught_when_verifying(settings: Any) -> None:
    settings.CHAT_STATE_CACHE_VERIFY = True
    cache = state.StateCache()
    kept = {"items": ["a"]}
    cache.put(7, 0, kept)
    kept["items"].append("b")  # what no arm and no platform code may do
    with pytest.raises(state.StatePoisoned, match="episode 7 was changed in place"):
        cache.get(7, 0)
    assert cache.get(7, 0) is None  # and it is dropped: the next reply reads the database
    with pytest.raises(state.StatePoisoned, match="not plain JSON"):
        cache.put(8, 0, {"items": ("a", "b")})  # the database would give a list: the cache would differ
    replaced = {"items": ["c"]}
    cache.put(9, 0, replaced)
    replaced["items"].append("d")
    cache.put(9, 1, {"items": ["e"]})  # a state changed in place and then replaced is reported too
    assert cache.poisoned == ["episode 7 version 0", "episode 8 version 0 (not plain JSON)", "episode 9 version 0"]


def test_concurrent_readers_and_writers_only_ever_get_the_state_of_the_version_they_ask_for() -> None:
    cache = state.StateCache()
    errors: list[str] = []
    barrier = threading.Barrier(6)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        barrier.wait()
        for _ in range(3000):
            episode, version = rng.randrange(5), rng.randrange(20)
            if rng.random() < 0.4:
                cache.put(episode, version, {"episode": episode, "version": version})
            else:
                got = cache.get(episode, version)
                if got is not None and got != {"episode": episode, "version": version}:
                    errors.append(f"{episode}/{version}: {got}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(cache) <= 5


# ------------------------------------------------------------------------------------ with the database


@pytest.mark.django_db(transaction=True)
def test_a_reply_reads_the_state_once_and_then_takes_it_from_the_cache_without_a_query(
    client: Client, study: Study
) -> None:
    episode_id = start(client, study).episode_id
    state.CACHE.clear()
    version = Episode.objects.get(pk=episode_id).state_version
    with CaptureQueriesContext(connection) as miss:
        first, got = state.for_reply(episode_id, version)
    assert got == version and len(miss.captured_queries) == 1 and "memory_state" in miss.captured_queries[0]["sql"]
    with CaptureQueriesContext(connection) as hit:
        again, _ = state.for_reply(episode_id, version)
    assert again is first and hit.captured_queries == []


@pytest.mark.django_db(transaction=True)
def test_a_write_is_cached_under_its_new_version_once_committed_and_a_rolled_back_one_never(
    client: Client, study: Study
) -> None:
    episode_id = start(client, study).episode_id
    _, version = state.read(episode_id)
    written = {"items": ["kept"]}
    with transaction.atomic():
        assert state.write(episode_id, written, expected_version=version)
        assert state.CACHE.get(episode_id, version + 1) is None  # not before the commit
    assert state.CACHE.get(episode_id, version + 1) is written
    with pytest.raises(RuntimeError), transaction.atomic():
        assert state.write(episode_id, {"items": ["rolled back"]}, expected_version=version + 1)
        raise RuntimeError("the transaction fails after the write")
    assert state.CACHE.get(episode_id, version + 2) is None
    assert state.for_reply(episode_id, version + 1) == (written, version + 1)


@pytest.fixture
def seeing(monkeypatch: pytest.MonkeyPatch) -> SeeingMemory:
    system = SeeingMemory()
    monkeypatch.setattr(arms, "build_arm", lambda arm, **_: (system, RecordingLLM(ScriptedLLM(["Nice."] * 50))))
    return system


@pytest.mark.django_db(transaction=True)
def test_the_next_reply_composes_from_the_state_the_per_turn_update_wrote_without_reading_it(
    client: Client, study: Study, seeing: SeeingMemory
) -> None:
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    written = state.CACHE.get(session.episode_id, 1)
    assert written == {"items": ["turn 2"]}
    with CaptureQueriesContext(connection) as ctx:
        turns.post_user_message(session, "c2", "Again")
    assert seeing.composed[-1] is written  # the very object the update returned, from the cache
    assert not [q for q in ctx.captured_queries if q["sql"].startswith("SELECT") and "memory_state" in q["sql"]]


@pytest.mark.django_db(transaction=True)
def test_a_state_written_by_another_process_is_read_again_not_served_stale(
    client: Client, study: Study, seeing: SeeingMemory
) -> None:
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")  # this process caches version 1: ["turn 2"]
    assert state.CACHE.get(session.episode_id, 1) == {"items": ["turn 2"]}
    # Another process (a memory worker, a second web process) writes through chat.state there: the
    # database row changes and this process's cache does not.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Episode._meta.db_table} SET memory_state = %s, state_version = state_version + 1 WHERE id = %s",
            ['{"items": ["turn 2", "from elsewhere"]}', session.episode_id],
        )
    turns.post_user_message(session, "c2", "Again")
    assert seeing.composed[-1] == {"items": ["turn 2", "from elsewhere"]}
    assert seeing.updated[-1] == {"items": ["turn 2", "from elsewhere"]}
    episode = Episode.objects.get(pk=session.episode_id)
    assert episode.memory_state == {"items": ["turn 2", "from elsewhere", "turn 4"]} and episode.state_version == 3
    assert state.CACHE.get(session.episode_id, 3) == episode.memory_state


@pytest.mark.django_db(transaction=True)
def test_the_end_of_session_update_starts_from_the_cached_state_and_caches_what_it_writes(
    client: Client, study: Study, seeing: SeeingMemory
) -> None:
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    cached = state.CACHE.get(session.episode_id, 1)
    sessions.end_session(session)
    assert cached is not None and seeing.updated[-1] is cached
    assert state.CACHE.get(session.episode_id, 2) == {"items": ["turn 2", "session end"]}
    assert cached == {"items": ["turn 2"]}  # the update made a new state; the cached one is as it was


def _arm_study(memory_system: str) -> Study:
    study = Study.objects.create(
        name=f"cache {memory_system}", status=Study.Status.OPEN, sessions_per_episode=2, min_user_turns=1
    )
    study.add_default_metrics()
    Arm.objects.create(study=study, name="arm", memory_system=memory_system, llm_backend="scripted")
    return study


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("memory_system", sorted(MEMORY_SYSTEMS))
def test_no_arm_changes_a_cached_state_through_the_platform(
    client: Client, memory_system: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every arm through two replies, the end of the session and a reply of the next one, with the
    cache verifying (CHAT_STATE_CACHE_VERIFY, on in every test): each state handed out, replaced or
    left at the end is compared with the JSON it had when it was cached, so an update that edited the
    state it was given fails here. The model is the arms' scripted fake (memory/tests/fake_llm.py),
    which answers their prompts plausibly, so every reply and update runs."""
    monkeypatch.setattr(arms, "build_llm", lambda arm: fake_llm())
    study = _arm_study(memory_system)
    session = start(client, study)
    episode_id = session.episode_id
    for k in (1, 2):
        turns.post_user_message(session, f"c{k}", f"I walked my dog Rex by the river, day {k}.")
    cached = state.CACHE.get(episode_id, Episode.objects.get(pk=episode_id).state_version)
    assert cached is not None
    snapshot = Episode.objects.get(pk=episode_id).memory_state
    assert cached == snapshot
    sessions.end_session(session)
    assert cached == snapshot  # the end-of-session update was computed from it and left it as it was
    ChatSession.objects.filter(pk=session.pk).update(status=ChatSession.Status.DONE)
    following = ChatSession.objects.get(episode_id=episode_id, index=2)
    assert following.status == ChatSession.Status.READY
    sessions.start_session(following)  # the bot's opening message, composed from the cached state
    turns.post_user_message(following, "n1", "Do you remember my dog?")
    replies = Message.objects.filter(session__episode_id=episode_id, speaker="bot").values_list("status", "error")
    assert [status for status, _ in replies] == ["complete"] * 4, list(replies)
    current = Episode.objects.get(pk=episode_id)
    assert state.for_reply(episode_id, current.state_version)[0] == current.memory_state
    assert state.CACHE.verify() == [] and state.CACHE.hits >= 3
