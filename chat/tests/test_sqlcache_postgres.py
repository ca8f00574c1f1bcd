"""The precompiled turn read on PostgreSQL, where it locks with ``FOR UPDATE OF``. (chat/tests/test_sqlcache.py
and the turn's query count, test_turn_cost.py, run on PostgreSQL too, through the ``each_database`` fixture.)

bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres chat/tests/test_sqlcache_postgres.py
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _on_postgres() -> None:
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh"


def test_the_precompiled_turn_read_locks_the_session_row_only() -> None:
    from chat import turns

    with transaction.atomic():  # where it is compiled: select_for_update needs a transaction
        sql = turns._LOCK.sql()
    assert sql.rstrip().endswith('FOR UPDATE OF "chat_chatsession"'), sql[-200:]
    # the state comes from chat.state's cache by state_version: the locked read never carries it
    assert '"chat_episode"."memory_state"' not in sql and '"chat_episode"."state_version"' in sql
