"""What a claim and a submit cost in SQL statements, so the cost cannot creep back (issue 12, item 6).

A claim used to be 10 statements and swept the queue's expired leases every time. The counts below
include BEGIN/COMMIT (Django logs them) and are the whole cost as a view pays it: ``transaction=True``
so no test transaction wraps the calls in savepoints. PostgreSQL takes the one-statement paths of
``annotation.services``; SQLite the ORM path.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotation import services
from annotation.models import Assignment, Item, Queue
from annotation.sources import add_items

from .conftest import pair_spec

# statements per call, BEGIN/COMMIT included
CLAIM = {"postgresql": 1, "sqlite": 5}
SUBMIT = {"postgresql": 1, "sqlite": 6}
# the submit that brings an item to N labels also stores gold (PostgreSQL: the submit statement reads
# the earlier votes itself; SQLite reads them in a query of their own)
SUBMIT_COMPLETING = {"postgresql": 2, "sqlite": 7}


def statements(call: Callable[[], Any]) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as ctx:
        result = call()
    return result, [q["sql"] for q in ctx.captured_queries]


def queue_with_stale_leases(make_annotators: Callable[..., list[User]], n_items: int, n_stale: int) -> Queue:
    """A pairs queue (N=3) where ``n_stale`` other annotators hold leases that expired a minute ago.

    The queue was swept a moment ago, so no claim is due to sweep it for another SWEEP_INTERVAL.
    """
    queue = Queue.objects.create(name=f"{n_items} items", kind=Queue.Kind.PAIRS, labels_per_item=3)
    add_items(queue, [pair_spec(f"m{k}", f"s{k}") for k in range(n_items)])
    holders = make_annotators(n_stale, prefix=f"holder{n_items}-")
    for user in holders:
        assert services.claim_next_item(queue, user) is not None
    Assignment.objects.filter(queue=queue).update(expires_at=timezone.now() - dt.timedelta(minutes=1))
    Queue.objects.filter(pk=queue.pk).update(swept_at=timezone.now())
    queue.refresh_from_db()
    return queue


def expected(counts: dict[str, int]) -> int:
    if connection.vendor not in counts:
        pytest.skip(f"no statement budget recorded for {connection.vendor}")
    return counts[connection.vendor]


@pytest.mark.django_db(transaction=True)
class ClaimCost:
    def test_a_claim_costs_the_same_few_statements_however_many_leases_have_expired(self, make_annotators):
        for n_items, n_stale in ((5, 1), (40, 30)):
            queue = queue_with_stale_leases(make_annotators, n_items, n_stale)
            (user,) = make_annotators(1, prefix=f"new{n_items}-")
            assignment, sql = statements(lambda q=queue, u=user: services.claim_next_item(q, u))
            assert assignment is not None
            assert len(sql) == expected(CLAIM), "\n".join(sql)
            # the stale leases were left for the next due sweep, not swept on this claim's path
            assert Assignment.objects.filter(queue=queue, status=Assignment.Status.EXPIRED).count() == 0

    def test_asking_again_for_the_held_item_is_cheap_too(self, make_annotators):
        queue = queue_with_stale_leases(make_annotators, 5, 1)
        (user,) = make_annotators(1, prefix="again-")
        first = services.claim_next_item(queue, user)
        again, sql = statements(lambda: services.claim_next_item(queue, user))
        assert again.pk == first.pk
        assert len(sql) <= expected(CLAIM) + 1, "\n".join(sql)

    def test_a_pair_submit_costs_a_fixed_number_of_statements(self, make_annotators):
        queue = queue_with_stale_leases(make_annotators, 5, 0)
        first, second, third = make_annotators(3, prefix="sub-")
        held = [services.claim_next_item(queue, u) for u in (first, second, third)]
        assert len({a.item_id for a in held}) == 1  # breadth-first: all three on the same item
        for user, assignment in ((first, held[0]), (second, held[1])):
            _, sql = statements(lambda u=user, a=assignment: services.submit_label(a.pk, annotator=u, op="APPEND"))
            assert len(sql) == expected(SUBMIT), "\n".join(sql)
        result, sql = statements(lambda: services.submit_label(held[2].pk, annotator=third, op="APPEND"))
        assert len(sql) == expected(SUBMIT_COMPLETING), "\n".join(sql)
        item = Item.objects.get(pk=held[2].item_id)
        assert (item.status, item.gold_label, item.done_count, item.in_flight) == ("complete", "APPEND", 3, 0)
        assert result.created and result.label.revision == 3


# The same class runs in the SQLite pass and, marked, in the PostgreSQL pass.
class TestClaimCostOnTheDefaultDatabase(ClaimCost):
    pass


@pytest.mark.postgres
class TestClaimCostOnPostgres(ClaimCost):
    def test_it_runs_on_postgresql(self):
        assert connection.vendor == "postgresql"

    def prepared(self) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return [row[0] for row in cursor.fetchall()]

    def test_the_claim_and_the_submit_are_prepared_statements_on_postgresql(self, make_annotators):
        # Django turns psycopg's preparing off, which silently ignores prepare=True too: this checks
        # that PostgreSQL really holds them, not only that the code asks for it
        queue = queue_with_stale_leases(make_annotators, 5, 0)
        (user,) = make_annotators(1, prefix="prep-")
        assignment = services.claim_next_item(queue, user)
        services.submit_label(assignment.pk, annotator=user, op="PASS")
        held = self.prepared()
        assert any("WITH candidate" in sql for sql in held), held
        assert any("WITH done" in sql for sql in held), held

    def test_with_prepared_statements_off_the_same_calls_work_unprepared(self, make_annotators, settings):
        settings.ANNOTATION_PREPARED_STATEMENTS = False
        # nothing prepared by the tests before: the pool hands a closed connection back with its prepared
        # statements, so they are dropped here (psycopg clears its own cache on DEALLOCATE ALL)
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
        queue = queue_with_stale_leases(make_annotators, 5, 0)
        users = make_annotators(3, prefix="unprep-")
        held = [services.claim_next_item(queue, u) for u in users]
        for user, assignment in zip(users, held, strict=True):
            _, sql = statements(lambda u=user, a=assignment: services.submit_label(a.pk, annotator=u, op="DELETE"))
            assert len(sql) <= expected(SUBMIT_COMPLETING)
        item = Item.objects.get(pk=held[0].item_id)
        assert held[0].item.payload["m"] == "m0"  # the JSON payload decoded on this path too
        assert (item.status, item.gold_label, item.done_count) == ("complete", "DELETE", 3)
        assert self.prepared() == []

    def test_the_claims_generic_plan_probes_each_candidate_rather_than_reading_the_annotators_history(
        self, make_annotators
    ):
        # A prepared statement settles on a generic plan after five calls. Planned as an anti join,
        # "not seen by this annotator" read every assignment the annotator ever had, on every claim.
        queue = queue_with_stale_leases(make_annotators, 5, 0)
        (user,) = make_annotators(1, prefix="plan-")
        with connection.cursor() as cursor:
            cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            assert services.claim_next_item(queue, user) is not None
            with connection.cursor() as cursor:
                cursor.execute("SELECT name FROM pg_prepared_statements WHERE statement LIKE '%%WITH candidate%%'")
                (name,) = cursor.fetchone()
                now = timezone.now()
                # parameters in order of first use in _CLAIM_SQL: queue, user, now, expires
                cursor.execute(
                    f"EXPLAIN EXECUTE {name}(%s, %s, %s, %s)", [queue.pk, user.pk, now, now + dt.timedelta(minutes=5)]
                )
                plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET plan_cache_mode")
        assert "Anti Join" not in plan, plan
        assert "Index Cond: ((item_id = i.id) AND (annotator_id = $2))" in plan, plan
