"""Database time: the one clock for the points in time that processes share (job leases, due times and
deadlines, runtime/): a lease written by one process is compared by another one's sweeper, so both must
read the same clock, and a step of one process's wall clock (NTP, a VM resumed, an operator's ``date``)
must move neither.

On PostgreSQL :func:`now` is the server's clock, read once (``SELECT clock_timestamp()``) and then
advanced by this process's monotonic clock: no query per use (a chat turn reads it several times), and
the value is a plain parameter, so the precompiled statements of infra/sqlcache.py keep working. It is
read again every :data:`REANCHOR_SECONDS` (a few minutes: the two clocks drift by far less than a lease
in that time) and in a forked child. On SQLite (the embedded default) the database is a file on this
machine, and its clock is the machine's: :func:`now` is the wall clock (``django.utils.timezone.now``).

When the server cannot be read (it is down, the connection is broken, the caller is in an event loop
where Django forbids queries), the last anchor goes on being advanced, or before any the wall clock is
used, and the next call tries again: a clock never raises.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.utils import timezone

log = logging.getLogger(__name__)

#: How long an anchor is used before the server's clock is read again (seconds).
REANCHOR_SECONDS = 300.0

#: After a failed read, how long before the next try (seconds): a database that is down is not asked
#: on every call.
RETRY_SECONDS = 5.0


class _Anchor:
    __slots__ = ("at", "mono", "until")

    def __init__(self, at: datetime, mono: float, until: float) -> None:
        self.at, self.mono, self.until = at, mono, until


_ANCHOR: _Anchor | None = None
_LOCK = threading.Lock()
_SERVER: list[bool] = []  # [whether the database has a clock of its own], once known


def now() -> datetime:
    """The current time on the database's clock (aware, UTC)."""
    anchor = _ANCHOR
    mono = time.monotonic()
    if anchor is None or mono >= anchor.until:
        if not _SERVER:
            _SERVER.append(connections["default"].vendor == "postgresql")
        if not _SERVER[0]:
            return timezone.now()
        anchor = _anchor(mono)
    return anchor.at + timedelta(seconds=mono - anchor.mono)


def _server_time() -> datetime:
    """The PostgreSQL server's clock, now (not the transaction's start: ``clock_timestamp()``)."""
    connection = connections["default"]
    with transaction.atomic(savepoint=connection.in_atomic_block), connection.cursor() as cursor:
        # a savepoint inside a transaction: a failed read leaves the caller's transaction usable
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    value: datetime = row[0]
    return value


def _anchor(mono: float) -> _Anchor:
    """Read the server's clock and anchor this process's monotonic clock to it; on failure keep advancing
    the old anchor (or the wall clock, before any) and try again after :data:`RETRY_SECONDS`."""
    global _ANCHOR
    with _LOCK:
        current = _ANCHOR
        if current is not None and mono < current.until:  # another thread just did it
            return current
        try:
            before = time.monotonic()
            at = _server_time()
            after = time.monotonic()
            mid = (before + after) / 2  # the server read its clock about halfway through the round trip
            fresh = _Anchor(at, mid, mid + REANCHOR_SECONDS)
        except Exception:  # noqa: BLE001 (down, a broken connection, an event loop: a clock must not raise)
            log.warning("could not read the database's clock; using the last one", exc_info=True)
            if current is not None:
                fresh = _Anchor(current.at, current.mono, mono + RETRY_SECONDS)
            else:
                fresh = _Anchor(timezone.now(), mono, mono + RETRY_SECONDS)
        _ANCHOR = fresh
        return fresh


def later(seconds: float) -> datetime:
    """``seconds`` from now on the database's clock."""
    return now() + timedelta(seconds=seconds)


def reset() -> None:
    """Forget the anchor: the next :func:`now` reads the server's clock again (tests)."""
    global _ANCHOR
    _ANCHOR = None
    _SERVER.clear()


def _forked() -> None:
    """A forked child (a Celery worker's): anchors itself afresh, with a lock no parent thread holds."""
    global _LOCK
    _LOCK = threading.Lock()
    reset()


os.register_at_fork(after_in_child=_forked)
