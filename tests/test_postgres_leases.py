"""Leases and pooled connections against a real PostgreSQL: a heartbeat outlives a dropped database
connection, with and without the connection pool (settings.DB_POOL), and a connection the server cut
while it sat in the pool never reaches the next job.

Run inside scripts/with-services.sh:
    bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres tests/test_postgres_leases.py
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from chat.models import ArmJob
from infra import dbpool
from runtime import executor as jobs
from runtime import leases
from runtime.models import Job
from studies.models import Study

pytestmark = pytest.mark.postgres


def _lease(pk: int) -> Any:
    return Job.objects.values_list("lease_until", flat=True).get(pk=pk)


def _wait_for_a_beat(pk: int) -> None:
    """Until the heartbeat has moved the job's lease once (up to 5 s)."""
    first = _lease(pk)
    deadline = time.monotonic() + 5
    while _lease(pk) == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _lease(pk) != first, "the heartbeat never beat"


def _cut_every_other_backend() -> int:
    """What a PostgreSQL restart, a failover or an idle-connection reaper does to every connection of the
    test database but this thread's."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return len(cur.fetchall())


def _in_thread(fn: Callable[[], object]) -> object:
    """Run ``fn`` as one unit of work of a job thread (runtime/executor.py) and return what it returned or raised."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:
            out.append(exc)
        finally:
            jobs.keep_connections()

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    return out[0]


def _pool_stats() -> dict[str, int]:
    return dict(connection.pool.get_stats())


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
    # Without the pool (DB_POOL=false): persistent connections cannot be combined with one.
    connection.close()
    db_settings = connections.settings["default"]
    options = {k: v for k, v in db_settings.get("OPTIONS", {}).items() if k != "pool"}
    monkeypatch.setitem(db_settings, "OPTIONS", options)
    monkeypatch.setitem(db_settings, "CONN_MAX_AGE", None)
    monkeypatch.setitem(db_settings, "CONN_HEALTH_CHECKS", False)
    job = Job.objects.create(kind="chat.readiness", lane="long", status="running", lease_until=leases.later(0.9))
    with leases.heartbeat(Job.objects.filter(pk=job.pk)) as beat:
        _wait_for_a_beat(job.pk)
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
    # Unpooled connections are closed before the pool setting comes back (the idle beating thread closes
    # its own), so none is given back to a pool it never came from.
    connection.close()
    time.sleep(1.0)


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_keeps_its_lease_when_the_pooled_connections_are_cut(study: Study, settings: Any) -> None:
    assert dbpool.pooled(connection), "PostgreSQL runs with the connection pool by default (DB_POOL)"
    settings.CHAT_JOB_LEASE_SECONDS = 0.9
    job = Job.objects.create(kind="chat.readiness", lane="long", status="running", lease_until=leases.later(0.9))
    with leases.heartbeat(Job.objects.filter(pk=job.pk)) as beat:
        _wait_for_a_beat(job.pk)
        lost_before = _pool_stats().get("connections_lost", 0)
        assert _cut_every_other_backend() >= 1  # the beat's connection, back in the pool between rounds
        time.sleep(2.5)
        assert not beat.lost
        assert _lease(job.pk) > timezone.now(), "the lease lapsed: a live job would be declared lost"
    assert _pool_stats().get("connections_lost", 0) > lost_before, "the pool never lent out a cut connection"


@pytest.mark.django_db(transaction=True)
def test_a_connection_cut_while_it_sat_in_the_pool_never_reaches_the_next_job(study: Study, settings: Any) -> None:
    settings.CHAT_DB_KEEP_CONNECTIONS = True  # production's keep_connections: pooled ones go back to the pool
    arm = study.arms.first()
    assert arm is not None
    assert _in_thread(lambda: ArmJob.objects.count()) == 0  # borrows a connection and gives it back
    assert _pool_stats()["pool_available"] >= 1
    assert _cut_every_other_backend() >= 1
    # the next job, on a fresh thread: the pool checks what it lends, so the dead connection is replaced
    made = _in_thread(lambda: ArmJob.objects.create(arm=arm, kind=ArmJob.Kind.READINESS).pk)
    assert isinstance(made, int), made
    assert ArmJob.objects.filter(pk=made).exists()


@pytest.mark.django_db(transaction=True)
def test_a_connection_cut_while_a_job_held_it_fails_that_job_only(study: Study, settings: Any) -> None:
    from django.db import OperationalError

    settings.CHAT_DB_KEEP_CONNECTIONS = True
    holding, cut = threading.Event(), threading.Event()
    results: list[object] = []

    def job() -> None:
        for unit in range(2):
            try:
                ArmJob.objects.count()
                if unit == 0:
                    holding.set()
                    cut.wait(10)
                    ArmJob.objects.count()  # on the connection the server just ended
                results.append("ok")
            except OperationalError as exc:
                results.append(exc)
            finally:
                jobs.keep_connections()  # gives the broken connection back: the pool must discard it

    t = threading.Thread(target=job)
    t.start()
    assert holding.wait(10)
    _cut_every_other_backend()
    cut.set()
    t.join(30)
    assert isinstance(results[0], OperationalError)
    assert results[1] == "ok", results  # the same thread's next unit of work gets a live connection


def _query_in_child(conn: Any) -> None:
    try:
        ok = ArmJob.objects.count() >= 0 and connections["default"].pool is not None
        conn.send(ok)
    except Exception as exc:
        conn.send(repr(exc))
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_builds_its_own_pool_and_leaves_the_parents_alone(study: Study) -> None:
    ArmJob.objects.count()  # this process's pool is open and this thread holds one of its connections
    parent_pool = connection.pool
    ours, theirs = multiprocessing.get_context("fork").Pipe()
    child = multiprocessing.get_context("fork").Process(target=_query_in_child, args=(theirs,))
    child.start()
    assert ours.poll(30) and ours.recv() is True
    child.join(30)
    assert child.exitcode == 0
    assert connection.pool is parent_pool
    assert ArmJob.objects.count() == 0  # the parent's borrowed connection still works
    connection.close()
    assert _in_thread(lambda: ArmJob.objects.count()) == 0  # and so do the ones in its pool


@pytest.mark.django_db(transaction=True)
def test_after_every_pooled_connection_was_cut_the_next_query_waits_no_backoff(study: Study, settings: Any) -> None:
    settings.CHAT_DB_KEEP_CONNECTIONS = True
    barrier = threading.Barrier(6)

    def borrow() -> None:
        barrier.wait(10)
        ArmJob.objects.count()
        barrier.wait(10)  # all six hold one at once: the pool grows to six, then keeps them idle
        jobs.keep_connections()

    threads = [threading.Thread(target=borrow) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert _pool_stats()["pool_available"] >= 5
    assert _cut_every_other_backend() >= 5
    pool = connections["default"].pool
    swept: list[int] = []
    check_all = pool.check
    pool.check = lambda: (swept.append(1), check_all())[1]  # the pool's own sweep, counted
    lost_before = _pool_stats().get("connections_lost", 0)
    try:
        assert _in_thread(lambda: ArmJob.objects.count()) == 0
    finally:
        del pool.check
    # psycopg_pool alone finds dead connections one by one, pausing 1, 2, 4 s between failed checks (7 s or a
    # PoolTimeout for six): here the first failed check swept the pool once, and every cut one went with it
    assert swept == [1]
    assert _pool_stats().get("connections_lost", 0) - lost_before >= 5
