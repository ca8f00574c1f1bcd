"""The PostgreSQL connection pool (``settings.DB_POOL``) in the processes and threads that use it.

Django keeps one psycopg_pool ``ConnectionPool`` per process and database alias; a thread borrows a
connection on its first query and gives it back when Django closes it (``CONN_MAX_AGE`` 0: at the end
of a request, a task, or a unit of work in our own threads, chat/jobs.py). Two places need more than
Django does by itself:

* **fork.** A child made by ``fork`` (Celery's prefork pool, a bench's worker processes) inherits the
  parent's pool object: its connections' sockets are the parent's, its worker threads did not survive the
  fork. The child must forget it (never close it: closing would end the parent's connections on the
  server) and build its own on first use: :func:`forget_inherited_pools`, run after every fork.
* **Celery.** Celery's Django fixup (5.6+) closes the whole pool at every task boundary in a prefork
  child, so each task would build a new pool and log in again (celery/celery#10554);
  :class:`PoolKeepingWorkerFixup` gives the connections back instead and keeps the pool.
* **A cut of every connection** (a PostgreSQL restart, a failover). The pool checks a connection before
  lending it, and after a failed check takes the next idle one, backing off 1, 2, 4 s between failed
  checks (psycopg_pool's guard against a busy loop): with 5 or more dead idle connections one request
  waited past ``DB_POOL_TIMEOUT_SECONDS`` and failed, and a lease heartbeat stalled. After a failed
  check :func:`sweep_on_failed_check` checks every idle connection at once, so the next try gets a
  live or a new one.
"""

from __future__ import annotations

import os
from typing import Any

from celery.fixups.django import DjangoWorkerFixup  # type: ignore[attr-defined]  # not in celery-types
from django.db import DatabaseError, InterfaceError, connections
from django.db.backends.signals import connection_created
from psycopg_pool import ConnectionPool

_installed = False


def pooled(conn: Any) -> bool:
    """Whether a database connection (a Django wrapper) borrows from a pool. Reads the settings only: the
    wrapper's ``pool`` property would build the pool."""
    return conn.vendor == "postgresql" and bool(conn.settings_dict.get("OPTIONS", {}).get("pool"))


def forget_inherited_pools() -> None:
    """In a forked child: drop the pools (and the borrowed connection) inherited from the parent without
    touching their sockets; the child's first query builds a pool of its own."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    DatabaseWrapper._connection_pools.clear()  # type: ignore[attr-defined]  # Django's, not in the stubs
    for conn in connections.all(initialized_only=True):
        if pooled(conn) and conn.connection is not None:
            conn.connection = None  # the parent's: neither used nor given back here


def sweep_on_failed_check(pool: ConnectionPool) -> None:
    """Make a failed check of one connection check every idle connection of ``pool`` at once (replacing
    the broken ones), instead of finding them one by one with a growing pause between. Only for the
    pool's standard check (Django's, with ``CONN_HEALTH_CHECKS``); idempotent."""
    if getattr(pool, "_check", None) is not ConnectionPool.check_connection:
        return  # no checks, or already sweeping

    def check(conn: Any) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            pool.check()  # the others died with it, most likely: one pass over them now
            raise

    pool._check = check


def _on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    if pooled(connection):
        sweep_on_failed_check(connection.pool)


def install() -> None:
    """Run :func:`forget_inherited_pools` in every child this process forks, and make every pool of this
    process sweep after a failed check (:func:`sweep_on_failed_check`); once per process."""
    global _installed
    if not _installed:
        os.register_at_fork(after_in_child=forget_inherited_pools)
        connection_created.connect(_on_connection_created, dispatch_uid="memeval-dbpool-sweep")
        _installed = True


class PoolKeepingWorkerFixup(DjangoWorkerFixup):  # type: ignore[misc]  # untyped base (celery-types)
    """Celery's Django worker fixup, except that a task boundary gives pooled connections back to the
    pool instead of closing the pool (celery/celery#10554); without a pool it is Celery's own."""

    def _close_database(self) -> None:
        if not any(pooled(c) for c in connections.all(initialized_only=True)):
            super()._close_database()
            return
        for conn in connections.all(initialized_only=True):
            try:
                conn.close()  # pooled: back to the pool (a broken one is discarded by the pool)
            except InterfaceError:
                pass
            except DatabaseError as exc:  # as Celery's: a connection that is already gone is fine
                if "closed" not in str(exc) and "not connected" not in str(exc):
                    raise


def install_celery_fixup(app: Any) -> None:
    """Use :class:`PoolKeepingWorkerFixup` as the Django fixup of the Celery ``app``'s workers."""
    from celery.fixups.django import DjangoFixup

    for fixup in getattr(app, "_fixups", []):
        if isinstance(fixup, DjangoFixup):
            fixup.worker_fixup = PoolKeepingWorkerFixup(app)  # type: ignore[misc]  # a setter since Celery 5.5
