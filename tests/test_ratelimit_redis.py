"""The limits' windows on a real Redis (infra/ratelimit.py): one script per admission, atomic, on Redis's clock.

Run inside scripts/with-services.sh (it exports REDIS_URL; the cache is that Redis).
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import pytest
from django.core.cache import cache

from infra import ratelimit

pytestmark = pytest.mark.postgres


@pytest.fixture
def redis_url(settings: Any) -> str:
    url = os.environ.get("REDIS_URL", "")
    assert url, "run with scripts/with-services.sh (REDIS_URL=redis://...)"
    assert url == settings.REDIS_URL
    return url


def test_a_window_admits_up_to_its_limit_in_one_round_trip_and_takes_a_ticket_back(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = ratelimit.Window(f"redis-test-{uuid.uuid4().hex[:8]}")
    client = ratelimit._redis(redis_url)
    window.take("warm-up", 1)  # the script is loaded into Redis at its first use
    calls: list[str] = []
    execute = client.execute_command
    monkeypatch.setattr(client, "execute_command", lambda *a, **k: calls.append(str(a[0])) or execute(*a, **k))
    tickets = [window.take("worker", 3) for _ in range(3)]
    assert all(tickets) and window.take("worker", 3) is None
    assert calls == ["EVALSHA"] * 4  # one round trip each
    assert window.count("worker") == 3
    ttl = client.ttl(cache.make_key(tickets[0]))  # the count expires with the window
    assert 0 < ttl <= window.seconds + 2 * window.step + 1
    window.give_back(tickets[-1])  # the ticket names the bucket as the cache knows it
    assert window.count("worker") == 2 and window.hit("worker", 3) and not window.hit("worker", 3)
    assert window.has_room("another", 3)


def test_processes_racing_for_the_last_places_get_exactly_the_limit(redis_url: str) -> None:
    window = ratelimit.Window(f"redis-race-{uuid.uuid4().hex[:8]}")
    admitted: list[bool] = []
    start = threading.Barrier(24)

    def one() -> None:
        start.wait()
        admitted.append(window.hit("shared", 5))

    threads = [threading.Thread(target=one) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert admitted.count(True) == 5 and window.count("shared") == 5  # none lost to a race, none let through
