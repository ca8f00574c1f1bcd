"""chat/tests/test_sqlcache.py and the turn's query count (test_turn_cost.py) again on PostgreSQL, where the
precompiled statements differ (``FOR UPDATE OF``, ``RETURNING``, JSON adaptation):

bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres chat/tests/test_sqlcache_postgres.py
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from chat.tests.test_sqlcache import (  # noqa: F401 (collected here again, marked postgres)
    test_a_cached_query_returns_what_its_queryset_returns_for_every_parameter_value,
    test_a_parameter_that_does_not_reach_the_query_is_refused_when_it_is_compiled,
    test_an_insert_writes_what_create_would_write,
    test_an_update_where_is_a_compare_and_set,
    test_cached_model_instances_carry_their_related_instances_and_annotations,
)
from chat.tests.test_turn_cost import (  # noqa: F401
    pushed,
    test_a_resent_message_costs_no_write_and_is_acknowledged_again,
    test_a_turn_makes_the_same_few_queries_at_turn_2_and_at_turn_200,
)

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
