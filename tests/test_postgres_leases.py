"""Leases against a real PostgreSQL: a heartbeat outlives a dropped database connection.

Run inside scripts/with-services.sh:
    bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres tests/test_postgres_leases.py
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from chat import leases
from chat.models import ArmJob
from studies.models import Study

pytestmark = pytest.mark.postgres


def _lease(pk: int) -> Any:
    return ArmJob.objects.values_list("lease_until", flat=True).get(pk=pk)


@pytest.mark.django_db(transaction=True)  # committed rows: the heartbeat thread has its own connection
def test_a_heartbeat_keeps_the_lease_after_the_database_dropped_its_connection(
    study: Study, settings: Any, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh (DATABASE_URL=postgres://...)"
    settings.CHAT_JOB_LEASE_SECONDS = 0.9  # a beat every 0.3 s
    # Persistent connections without health checks (a deployment may set both): the beating thread keeps
    # its connection between rounds, so the cut below reaches it, and nothing but the heartbeat's own
    # handling replaces it. (The defaults, CONN_MAX_AGE 0 and health checks on, close it after every round
    # or check it before reuse; this is the hardest case.)
    db_settings = connections.settings["default"]
    monkeypatch.setitem(db_settings, "CONN_MAX_AGE", None)
    monkeypatch.setitem(db_settings, "CONN_HEALTH_CHECKS", False)
    job = ArmJob.objects.create(
        arm=study.arms.first(), kind=ArmJob.Kind.READINESS, status=ArmJob.Status.RUNNING, lease_until=leases.later(0.9)
    )
    with leases.heartbeat(ArmJob.objects.filter(pk=job.pk)) as beat:
        first = _lease(job.pk)
        deadline = time.monotonic() + 5
        while _lease(job.pk) == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _lease(job.pk) != first, "the heartbeat never beat"
        # A PostgreSQL restart, a failover or an idle-connection reaper: every other backend of the test
        # database (the heartbeat thread's) is cut off while the job keeps running.
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        time.sleep(2.5)  # several leases long: the first beat after the cut fails, the next ones must reconnect
        assert not beat.lost
        assert _lease(job.pk) > timezone.now(), "the lease lapsed: a live job would be declared lost"
        assert "lease heartbeat failed" in caplog.text  # the cut did reach the heartbeat's connection
