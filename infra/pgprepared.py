"""A cursor whose statements PostgreSQL prepares once per connection: Django's and psycopg's internals, in
this module only (docs/architecture.md, "Private internals"). It reaches under Django's PostgreSQL backend
(``ServerBindingCursor``, the wrapper's ``make_cursor``/``make_debug_cursor``) and sets psycopg's
``prepare_threshold`` on the connection Django made; ``tests/test_private_internals.py`` pins both to the
versions this was checked against. Used by the annotation claim and submit (annotation/services.py)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections


@contextmanager
def prepared_cursor(*, enabled: bool = True) -> Iterator[Any]:
    """A cursor whose statements PostgreSQL prepares once per connection and then only executes.

    Django's cursors bind parameters on the client and never prepare (``prepare_threshold`` is off so
    that transaction-mode poolers keep working). The two hot statements below cost PostgreSQL more to
    plan than to run, so they go through psycopg's server-side binding with ``prepare=True`` instead.
    Wrapped like any Django cursor: errors become django.db errors (IntegrityError for the claim's
    retry) and the statements are logged where Django logs queries (the statement-count tests).
    ``enabled=False`` (the annotation's ``ANNOTATION_PREPARED_STATEMENTS = False``) gives a plain cursor, for a
    pooler that cannot keep prepared statements (PgBouncer before 1.21, or without ``max_prepared_statements``).
    """
    if not enabled:
        with connection.cursor() as cursor:
            yield cursor
        return
    db = connections[DEFAULT_DB_ALIAS]  # once: every attribute of the ``connection`` proxy is a lookup
    db.close_if_health_check_failed()  # as connection.cursor() does (CONN_HEALTH_CHECKS)
    db.ensure_connection()
    db.validate_thread_sharing()
    pg = db.connection
    if pg.prepare_threshold is None:
        # Django turns psycopg's preparing off (None), which also refuses prepare=True. A threshold no
        # query reaches prepares only what asks for it: Django's own cursors bind on the client and
        # never prepare.
        pg.prepare_threshold = sys.maxsize
    raw = _preparing_cursor_class()(pg)
    cursor = db.make_debug_cursor(raw) if db.queries_logged else db.make_cursor(raw)
    with cursor:
        yield cursor


@functools.cache
def _preparing_cursor_class() -> type:
    # needs psycopg, so PostgreSQL only; defined only when psycopg 3 is (the stubs do not know it)
    from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]

    class PreparingCursor(ServerBindingCursor):  # type: ignore[misc]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            return super().execute(query, params, prepare=True, **kwargs)

    return PreparingCursor
