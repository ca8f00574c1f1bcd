"""An annotation lease (``Assignment.expires_at``) is on the database's clock (infra/clock.py), as job leases
are: a wall-clock step of one process (issue 27: +600 s, -600 s) neither expires another annotator's live
assignment nor writes one that is already over. ``clock_server`` and ``clock_step``: conftest.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from annotation import services
from annotation.models import Assignment, Queue


def _close(a: dt.datetime, b: dt.datetime, within: float = 2.0) -> bool:
    return abs((a - b).total_seconds()) <= within


def test_a_process_stepped_forward_does_not_expire_another_annotators_live_lease(
    pair_queue: Queue, make_annotators: Any, clock_server: Callable[[], dt.datetime], clock_step: Any
) -> None:
    pair_queue.lease_seconds = 300
    pair_queue.save()
    a, b = make_annotators(2)
    held = services.claim_next_item(pair_queue, a)  # by a process on time: 5 minutes from now
    assert held is not None
    clock_step(600)
    assert services.expire_leases(pair_queue) == 0
    held.refresh_from_db()
    assert held.status == Assignment.Status.OPEN and held.is_live()
    services.save_draft(held.pk, annotator=a, data={"op": "PASS"})  # the annotator's own process, stepped
    held.refresh_from_db()
    assert _close(held.expires_at, clock_server() + dt.timedelta(seconds=300))


def test_a_process_stepped_back_leases_on_the_database_clock(
    pair_queue: Queue, make_annotators: Any, clock_server: Callable[[], dt.datetime], clock_step: Any
) -> None:
    pair_queue.lease_seconds = 300
    pair_queue.save()
    (a,) = make_annotators(1)
    clock_step(-600)
    held = services.claim_next_item(pair_queue, a)
    assert held is not None and _close(held.expires_at, clock_server() + dt.timedelta(seconds=300))
