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

Its cursors also keep what Django's ``SQLiteCursorWrapper`` computes at every statement: the rewrite of
the ``%s`` placeholders to SQLite's ``?``, a regular expression over the whole statement (a chat turn's
dozen statements spent more on it than on some of their own work), is kept per statement text for the
last :data:`STATEMENTS` distinct texts (:func:`qmark`).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from django.db.backends.sqlite3 import base

_WRITER = threading.Lock()
WAIT_SECONDS = 5.0  # the busy_timeout of the connection (settings)


STATEMENTS = 2048  # distinct statement texts whose placeholder rewrite is kept


@lru_cache(maxsize=STATEMENTS)
def qmark(query: str) -> str:
    """``query`` with Django's ``%s`` placeholders as SQLite's ``?`` (and ``%%`` as ``%``): what
    ``SQLiteCursorWrapper.convert_query`` returns for positional parameters, kept per statement text."""
    return str(base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%"))


class CursorWrapper(base.SQLiteCursorWrapper):
    """Django's cursor, with the placeholder rewrite of positional parameters kept (:func:`qmark`)."""

    def convert_query(self, query: str, *, param_names: list[str] | None = None) -> str:
        if param_names is None:
            return qmark(query)
        return str(super().convert_query(query, param_names=param_names))  # type: ignore[misc]  # not in the stubs


class DatabaseWrapper(base.DatabaseWrapper):
    def create_cursor(self, name: str | None = None) -> CursorWrapper:
        return self.connection.cursor(factory=CursorWrapper)  # type: ignore[no-any-return]

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
