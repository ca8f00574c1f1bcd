"""A step of an app process's wall clock (issue 27, item 9: +600 s or -600 s, as an NTP correction or a resumed VM
does) moves no limit. The limits count on one clock for every process (infra/ratelimit.py's ``clock``: Redis's
``TIME`` with Redis, the process's monotonic clock without), not on each process's wall clock, which the
12-messages-a-minute limit read from the messages' stored times: a step back refused an active worker, a step
forward let a burst through. Here the wall clock (``time.time`` and Django's ``timezone.now``) is stepped by
monkeypatching while the limits' clock runs on."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from chat import errors, turns
from chat.tests.conftest import start
from infra import ratelimit
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


class Clocks:
    """The process's wall clock and the limits' clock: :meth:`wait` moves both (time passes), :meth:`step` the
    wall clock only."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0  # the wall clock's offset from the real one
        self.shared = 10_000.0  # the limits' clock
        real_time, real_now = time.time, timezone.now
        monkeypatch.setattr(time, "time", lambda: real_time() + self.offset)
        monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=self.offset))
        monkeypatch.setattr(ratelimit, "clock", lambda: self.shared, raising=False)  # (raising: the old code had none)

    def wait(self, seconds: float) -> None:
        self.offset += seconds
        self.shared += seconds

    def step(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Clocks:
    return Clocks(monkeypatch)


@pytest.fixture
def session(client: Client, study: Study, script: Any) -> Any:
    script(["Nice."])
    study.max_messages_per_minute, study.max_turns_per_session = 12, 1000
    study.save()
    return start(client, study)


def test_a_step_back_does_not_refuse_an_active_worker(session: Any, clocks: Clocks) -> None:
    for i in range(12):  # a worker chatting at one message every 10 s: half the limit in any minute
        turns.post_user_message(session, f"a{i}", f"message {i}")
        clocks.wait(10)
    clocks.step(-600)  # on the stored times, "the last minute" now holds all twelve
    for i in range(12):
        turns.post_user_message(session, f"b{i}", f"message after the step {i}")
        clocks.wait(10)
    assert session.messages.filter(speaker="user").count() == 24


def test_a_step_forward_lets_no_burst_through(session: Any, clocks: Clocks) -> None:
    for i in range(12):
        turns.post_user_message(session, f"a{i}", f"message {i}")
    clocks.step(600)  # on the stored times, the burst was ten minutes ago
    with pytest.raises(errors.ChatError, match="limit is 12 a minute"):
        turns.post_user_message(session, "a12", "one more")
    clocks.wait(66)  # a real minute later (and the window's last bucket)
    turns.post_user_message(session, "a12", "one more")
    assert session.messages.filter(speaker="user").count() == 13


def test_the_limits_clock_is_not_the_wall_clock(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.REDIS_URL = ""  # the embedded default: this process's monotonic clock
    before = ratelimit.clock()
    monkeypatch.setattr(time, "time", lambda: 0.0)
    assert 0 <= ratelimit.clock() - before < 5

    class FakeRedis:  # with Redis: the server's TIME, whatever this process's clock says
        def time(self) -> tuple[int, int]:
            return 1_700_000_000, 250_000

    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(ratelimit, "_redis", lambda url: FakeRedis())
    assert ratelimit.clock() == 1_700_000_000.25


def test_a_window_counts_on_the_limits_clock(monkeypatch: pytest.MonkeyPatch, clocks: Clocks) -> None:
    window = ratelimit.Window("clock-step-test")
    assert all(window.hit("k", 3) for _ in range(3))
    clocks.step(600)
    assert not window.hit("k", 3)  # no new buckets for a stepped process
    clocks.step(-1200)
    assert not window.hit("k", 3)
    clocks.wait(66)
    assert window.hit("k", 3)


# ------------------------------------------------------------------------------------------ the session's clock


def test_a_process_stepped_forward_does_not_end_a_session_by_its_time_limit_early(
    client: Client, study: Study, script: Any, clock_server: Any, clock_step: Any
) -> None:
    """The time limit counts from ``started_at`` on the database's clock (infra/clock.py): a web process whose
    wall clock stepped +600 s does not find a 5-minute session over a minute after it started."""
    script(["Nice.", "Sure."])
    study.session_time_limit_minutes = 5
    study.save()
    session = start(client, study)
    turns.post_user_message(session.pk, "first", "Hello there")
    clock_step(600)
    turns.post_user_message(session.pk, "second", "And again")
    session.refresh_from_db()
    assert session.status == "chatting" and not session.time_is_up()
    assert session.messages.filter(speaker="user").count() == 2


def test_a_worker_seen_by_a_process_stepped_back_is_not_abandoned_by_another(
    client: Client, study: Study, script: Any, clock_server: Any, clock_step: Any
) -> None:
    """``last_seen_at`` is written and compared on the database's clock: a web process stepped -600 s that sees
    the worker writes "now" (it skipped the write, its "now" being before the last one), and the abandonment sweep
    of a process on time keeps the worker's place."""
    from chat.timing import sweep_abandoned
    from studies.models import Participant

    script(["Nice."])
    study.abandon_after_minutes = 1
    study.save()
    session = start(client, study)
    participant = Participant.objects.get(pk=session.episode.participant_id)
    Participant.objects.filter(pk=participant.pk).update(last_seen_at=clock_server() - timedelta(minutes=2))
    participant.refresh_from_db()
    clock_step(-600)
    participant.touch()  # the worker's page polls a stepped process
    clock_step(0)
    assert sweep_abandoned().participants == 0
    participant.refresh_from_db()
    assert participant.abandoned_at is None
