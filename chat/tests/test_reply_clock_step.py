"""A reply's job is due, leased and bounded by its deadline on the database's clock (infra/clock.py), not on the
wall clock of the process that took the worker's message: a web process stepped back 600 s (issue 27) wrote a
reply job already past its deadline's worth of time ago, whose lease other processes saw lapsed at once.
``clock_server`` and ``clock_step``: conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.test import Client

from chat import turns
from chat.models import Message
from chat.tests.conftest import reply_job, start
from studies.models import Study


def _close(a: datetime | None, b: datetime, within: float = 2.0) -> bool:
    return a is not None and abs((a - b).total_seconds()) <= within


def test_a_reply_job_submitted_by_a_stepped_process_is_on_the_database_clock(
    study: Study, held: list[int], clock_server: Callable[[], datetime], clock_step: Any
) -> None:
    session = start(Client(), study)
    clock_step(-600)
    msg, _ = turns.post_user_message(session, "c1", "Hello")
    job = reply_job(Message.objects.get(reply_to=msg))
    assert _close(job.due_at, clock_server()) and job.deadline_at is not None
    assert job.deadline_at > clock_server() + timedelta(seconds=30)  # the reply's whole deadline is ahead
    assert job.lease_until is None or job.lease_until > clock_server()
