"""Django's SQLite backend, with the process's write transactions queued in Python.

SQLite has one writer at a time. Every transaction here begins with ``BEGIN IMMEDIATE`` (settings), so
a thread that finds another one writing waits in SQLite's busy handler, which sleeps in growing steps
(1, 2, 5, ... up to 100 ms) and polls: under a burst of chat turns the writers of one process (socket
threads, reply jobs) slept while the lock was free, and a turn's latency was mostly these naps. Here a
thread first takes a process-wide lock, held from ``BEGIN`` to ``COMMIT``/``ROLLBACK``: the writers of
the process queue on it and each starts the moment the previous one commits. Other processes (a
management command, a second server) still meet SQLite's own busy handling. A thread that waits longer
than the busy timeout goes ahead without the lock (SQLite then arbitrates, as before): the lock can
only add order, never a deadlock.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db.backends.sqlite3 import base

_WRITER = threading.Lock()
WAIT_SECONDS = 5.0  # the busy_timeout of the connection (settings)


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holds_writer = False

    def _start_transaction_under_autocommit(self) -> None:
        self._holds_writer = _WRITER.acquire(timeout=WAIT_SECONDS)
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # private, not in the stubs
        except BaseException:
            self._release_writer()
            raise

    def _release_writer(self) -> None:
        if self._holds_writer:
            self._holds_writer = False
            _WRITER.release()

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]
        finally:
            self._release_writer()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]
        finally:
            self._release_writer()

    def _close(self) -> None:
        try:
            super()._close()  # type: ignore[misc]
        finally:
            self._release_writer()
