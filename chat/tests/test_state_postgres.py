"""Compare-and-set memory-state writes under real concurrency, on PostgreSQL with real threads.

bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres chat/tests/test_state_postgres.py
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import close_old_connections, connection
from django.test import Client

from chat import state
from chat.tests.conftest import start
from memory.base import Update
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
