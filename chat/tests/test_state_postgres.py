"""Compare-and-set memory-state writes under real concurrency, on PostgreSQL with real threads.

bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres chat/tests/test_state_postgres.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import close_old_connections, connection
from django.test import Client

from chat import arms, state, turns
from chat.tests.conftest import SeeingMemory, start
from memory.base import Update
from memory.llm import ScriptedLLM
from memory.llmwrap import RecordingLLM
from studies.models import Study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_concurrent_updates_of_one_episode_lose_nothing(client: Client, study: Study) -> None:
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh"
    episode_id = start(client, study).episode_id
    state.write(episode_id, {"items": []}, expected_version=state.read(episode_id)[1])
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            barrier.wait()
            for i in range(15):

                def add(current: dict[str, Any], item: str = f"{name}-{i}") -> Update:
                    return Update({"items": [*current["items"], item]})

                state.apply(episode_id, add, max_rounds=200)
        except BaseException as exc:  # reported below, with the thread's name
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=writer, args=(f"w{k}",)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    items, version = state.read(episode_id)
    assert len(items["items"]) == 60 and len(set(items["items"])) == 60
    assert [i for i in items["items"] if i.startswith("w0-")] == [f"w0-{i}" for i in range(15)]


WRITE_ELSEWHERE = """
import django
django.setup()
from chat import state
current, version = state.read({episode_id})
assert state.write({episode_id}, {{"items": [*current["items"], "from another process"]}}, version)
"""


def test_a_state_written_by_another_process_is_read_again_by_this_one(
    client: Client, study: Study, worker_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes with their own caches: a write in one bumps the version, so the other misses at its
    next reply and reads the new state (it is never served the state it cached before)."""
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh"
    system = SeeingMemory()
    monkeypatch.setattr(arms, "build_arm", lambda arm, **_: (system, RecordingLLM(ScriptedLLM(["Nice."] * 10))))
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")  # this process caches the version it wrote
    _, version = state.read(session.episode_id)
    assert state.CACHE.get(session.episode_id, version) == {"items": ["turn 2"]}
    env = {**os.environ, "DATABASE_URL": worker_database_url, "DJANGO_SETTINGS_MODULE": "evalsite.settings"}
    subprocess.run(
        [sys.executable, "-c", WRITE_ELSEWHERE.format(episode_id=session.episode_id)],
        env=env, check=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert state.CACHE.get(session.episode_id, version) == {"items": ["turn 2"]}  # this cache knows nothing of it
    turns.post_user_message(session, "c2", "Again")
    assert system.composed[-1] == {"items": ["turn 2", "from another process"]}
    assert state.read(session.episode_id) == ({"items": ["turn 2", "from another process", "turn 4"]}, version + 2)
