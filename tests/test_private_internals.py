"""Where memeval leans on a dependency's private internals, each in one module named in docs/architecture.md
("Private internals"), pinned here: every test fails when the dependency changes underneath, so that an
upgrade (``make lock``) is a moment to re-check the module, not a surprise in production. A version not in
a test's list fails it: check the module against the new version's source, then add the version.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def test_daphne_request_hooks_of_evalsite_serverlimit() -> None:
    """evalsite/serverlimit.py: the request body limit inside daphne (WebRequest's hooks, the channel's path)."""
    assert version("daphne") in {"4.2.3"}, "re-check evalsite/serverlimit.py against this daphne"
    from daphne.http_protocol import WebRequest

    from evalsite import serverlimit

    for hook in ("gotLength", "handleContentChunk", "process"):
        assert callable(getattr(WebRequest, hook))
    from daphne.http_protocol import HTTPFactory

    assert callable(HTTPFactory.buildProtocol)
    serverlimit.install()
    # installed over daphne's: the body limit, then the slow-client deadlines around it (headers_in)
    assert WebRequest.gotLength.__name__ == "headers_in"
    assert HTTPFactory.buildProtocol.__name__ == "build_protocol"
    assert "_path" in inspect.getsource(__import__("twisted.web.http", fromlist=["HTTPChannel"]).HTTPChannel)


def test_channels_internals_of_runtime_layers() -> None:
    """runtime/layers.py: the in-memory layer's bookkeeping, and a consumer dispatch without the database hop."""
    assert version("channels") in {"4.3.2"}, "re-check runtime/layers.py against this channels"
    from channels.consumer import AsyncConsumer, get_handler_name
    from channels.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer()
    for name in ("channels", "groups", "expiry"):
        assert hasattr(layer, name), name
    for name in ("_clean_expired", "get_capacity", "require_valid_group_name", "require_valid_channel_name"):
        assert callable(getattr(layer, name)), name
    assert get_handler_name({"type": "chat.event"}) == "chat_event"
    # what the lean dispatch leaves out: channels' hop to close old connections before each handler
    assert "aclose_old_connections" in inspect.getsource(AsyncConsumer.dispatch)


def test_django_internals_of_infra() -> None:
    """infra/sqlite/base.py (transaction hooks), infra/sqlcache.py (the compiler), infra/dbpool.py (the pools
    of the PostgreSQL backend), infra/pgprepared.py (the server-binding cursor)."""
    assert version("django") in {"5.2.19"}, "re-check infra/ (sqlite, sqlcache, dbpool, pgprepared) against this Django"
    from django.db.backends.postgresql import base as postgresql
    from django.db.backends.sqlite3 import base as sqlite3
    from django.db.models.query import QuerySet, get_related_populators
    from django.db.models.sql.compiler import SQLCompiler
    from django.db.models.sql.subqueries import UpdateQuery

    # CachedUpdate builds what QuerySet.update builds, then compiles it itself
    assert "query.add_update_values(kwargs)" in inspect.getsource(QuerySet.update)
    assert callable(UpdateQuery.add_update_values)

    for hook in ("_start_transaction_under_autocommit", "_commit", "_rollback", "_close"):
        assert callable(getattr(sqlite3.DatabaseWrapper, hook)), hook
    # the cursor whose placeholder rewrite infra/sqlite keeps per statement (CursorWrapper, qmark)
    assert "factory=SQLiteCursorWrapper" in inspect.getsource(sqlite3.DatabaseWrapper.create_cursor)
    assert "self.convert_query(query, param_names=param_names)" in inspect.getsource(
        sqlite3.SQLiteCursorWrapper.execute
    )
    import sqlite3 as sqlite_module

    from infra.sqlite.base import CursorWrapper

    raw = sqlite_module.connect(":memory:")
    ours = raw.cursor(factory=CursorWrapper)
    django_cursor: Any = raw.cursor(factory=sqlite3.SQLiteCursorWrapper)  # convert_query: not in the stubs
    for query in (
        "SELECT %s, '%%s' FROM t WHERE a = %s",
        "UPDATE t SET b = %s",
        "SELECT 1",
        "x LIKE '%%a%%' OR y = %s",
    ):
        assert ours.convert_query(query) == django_cursor.convert_query(query), query
        assert ours.convert_query(query) == django_cursor.convert_query(query), query  # the kept one
    named = "SELECT %(a)s, %(b)s"
    assert ours.convert_query(named, param_names=["a", "b"]) == django_cursor.convert_query(
        named, param_names=["a", "b"]
    )
    raw.close()
    assert callable(get_related_populators)
    for name in ("get_converters", "apply_converters", "as_sql"):
        assert callable(getattr(SQLCompiler, name)), name
    assert "self.select, self.klass_info, self.annotation_col_map = self.get_select(" in inspect.getsource(
        SQLCompiler.setup_query
    )
    assert isinstance(postgresql.DatabaseWrapper._connection_pools, dict)
    assert postgresql.ServerBindingCursor is not None


def test_psycopg_internals_of_infra() -> None:
    """infra/dbpool.py: the pool's private ``_check`` (a failed check sweeps every idle connection);
    infra/pgprepared.py: psycopg's ``prepare_threshold`` and ``prepare=True``."""
    assert version("psycopg-pool") in {"3.3.3"}, "re-check infra/dbpool.py against this psycopg_pool"
    assert version("psycopg") in {"3.3.9"}, "re-check infra/pgprepared.py against this psycopg"
    from psycopg import Connection, Cursor
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool("", open=False, check=ConnectionPool.check_connection)
    assert pool._check is ConnectionPool.check_connection  # what sweep_on_failed_check replaces
    assert "self._check(conn)" in inspect.getsource(ConnectionPool)  # the pool calls it before lending
    assert "prepare_threshold" in dir(Connection)
    assert "prepare" in inspect.signature(Cursor.execute).parameters


def test_matplotlib_internals_of_analysis_plots() -> None:
    """analysis/plots.py: the property tables of artists' docstrings skipped at import (``artist.kwdoc``).
    In a fresh process, so that matplotlib's artists are imported while the skip is on."""
    assert version("matplotlib") in {"3.11.2"}, "re-check analysis/plots.py against this matplotlib"
    code = "import analysis.plots\nfrom matplotlib.lines import Line2D\nprint(Line2D.set.__doc__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "Properties: see the matplotlib documentation." in out  # matplotlib still builds them with kwdoc


def test_kombu_internals_of_runtime_tasks() -> None:
    """runtime/tasks.py: a failed ack's prefetch slot freed with the virtual transport's ``QoS.ack`` (the Redis
    transport's override asks Redis first; its channel counts unacknowledged messages in the virtual QoS)."""
    assert version("kombu") in {"5.7.0"}, "re-check runtime/tasks.py (free_prefetch_slot) against this kombu"
    from kombu.transport import redis as kombu_redis
    from kombu.transport.virtual import QoS

    assert issubclass(kombu_redis.QoS, QoS)
    assert "super().ack(delivery_tag)" in inspect.getsource(kombu_redis.QoS.ack)  # Redis first, then the count
    assert "_delivered" in inspect.getsource(QoS.can_consume)  # the count the prefetch window reads
