"""A wall-clock step of one app process (issue 27, item 9) against a real PostgreSQL and Redis: the database's
clock (infra/clock.py) is the server's, whatever this process's wall clock says, so the sweeper of a process
stepped +600 s takes back nobody's live job and a process stepped -600 s keeps its lease ahead; and the Redis
channel layer, which scores members and frames with the sending process's time.time(), neither drops a page's
socket from its group nor drops another process's queued frame when one sender's clock is 600 s off.

Run inside scripts/with-services.sh:
    bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres tests/test_postgres_clock_step.py
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from infra import clock
from runtime import executor, kinds, leases, sweeper
from runtime.kinds import RetryPolicy
from runtime.models import Job

pytestmark = pytest.mark.postgres

KIND = kinds.declare("test.pgclockstep", lane="memory", run=lambda job, attempt, handed: None, retry=RetryPolicy())


def _server_now() -> datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        value: datetime = cur.fetchone()[0]
    return value


def _close(a: datetime, b: datetime, within: float = 2.0) -> bool:
    return abs((a - b).total_seconds()) <= within


@pytest.fixture
def step(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], None]]:
    """Step this process's wall clock by ``seconds`` (PostgreSQL's does not move)."""
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh (DATABASE_URL=postgres://...)"
    real = timezone.now
    clock.reset()
    clock.now()  # anchored before the step, as a running process is

    def to(seconds: float) -> None:
        monkeypatch.setattr(timezone, "now", lambda: real() + timedelta(seconds=seconds))

    yield to
    clock.reset()


@pytest.mark.django_db(transaction=True)
def test_the_database_clock_is_postgres_clock_whatever_the_process_wall_clock(step: Callable[[float], None]) -> None:
    step(600)
    assert _close(clock.now(), _server_now())
    clock.reset()  # anchored after the step too: the anchor is read from the server
    assert _close(clock.now(), _server_now())
    assert not _close(timezone.now(), _server_now())


@pytest.mark.django_db(transaction=True)
def test_a_sweeper_stepped_forward_leaves_another_process_live_job_alone(
    step: Callable[[float], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    monkeypatch.setattr(sweeper, "broker_was_emptied", lambda: False)  # (its first sweep resends what is due)
    live = Job.objects.create(
        kind=KIND.name, target="1", lane=KIND.lane, status="running", attempts=1,
        lease_until=_server_now() + timedelta(seconds=15),
    )  # fmt: skip
    queued = Job.objects.create(kind=KIND.name, target="2", lane=KIND.lane, status="queued", due_at=_server_now())
    step(600)
    assert sweeper.sweep() == [] and sent == []
    assert Job.objects.filter(pk=live.pk, status="running").exists()
    assert Job.objects.get(pk=queued.pk).due_at == queued.due_at


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_stepped_back_keeps_its_lease_ahead_of_the_server(
    step: Callable[[float], None], settings: Any
) -> None:
    job = Job.objects.create(
        kind=KIND.name, target="3", lane=KIND.lane, status="running", attempts=1,
        lease_until=_server_now() + timedelta(seconds=5),
    )  # fmt: skip
    step(-600)
    beat = leases.Heartbeat(Job.objects.filter(pk=job.pk, status="running", attempts=1))
    assert beat.beat() and not beat.lost
    lease = Job.objects.values_list("lease_until", flat=True).get(pk=job.pk)
    assert _close(lease, _server_now() + timedelta(seconds=settings.CHAT_JOB_LEASE_SECONDS))
    assert Job.objects.filter(leases.lost(), pk=job.pk).count() == 0


# ------------------------------------------------------------------------------------------ the channel layer


def _sender_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """channels_redis reads ``time.time()`` of the process that adds or sends: this one's, stepped."""
    import channels_redis.core

    monkeypatch.setattr(channels_redis.core, "time", SimpleNamespace(time=lambda: time.time() + seconds))


def _layer() -> Any:
    assert os.environ.get("REDIS_URL"), "run with scripts/with-services.sh (REDIS_URL=redis://...)"
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisChannelLayer"
    return layer


def test_a_sender_600_s_ahead_does_not_drop_a_page_socket_from_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = _layer()
    group = f"chat-session-clock-{os.getpid()}"

    async def go() -> list[Any]:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)  # the page's daphne, on time
        _sender_clock(monkeypatch, 600)  # the reply's worker, stepped
        await layer.group_send(group, {"type": "chat.message", "html": "<p>the reply</p>", "seq": 1})
        monkeypatch.undo()
        await layer.group_send(group, {"type": "chat.message", "html": "<p>the next</p>", "seq": 2})
        got = [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(2)]
        await layer.group_discard(group, channel)
        return got

    # both arrive; in the order of their senders' clocks (channels_redis pops the lowest score first), so
    # frames of processes whose clocks differ may swap: the page places each by its id and seq
    assert sorted(m["seq"] for m in asyncio.run(go())) == [1, 2]


def test_a_frame_queued_by_a_sender_600_s_behind_survives_a_send_on_time(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = _layer()

    async def go() -> list[Any]:
        channel = await layer.new_channel()
        _sender_clock(monkeypatch, -600)  # a worker stepped back queues a frame the socket has not read yet
        await layer.send(channel, {"type": "chat.message", "seq": 1})
        monkeypatch.undo()
        await layer.send(channel, {"type": "chat.message", "seq": 2})  # another process, on time
        return [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(2)]

    assert sorted(m["seq"] for m in asyncio.run(go())) == [1, 2]
