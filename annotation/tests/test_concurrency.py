"""Assignment under real concurrency: 50 annotator threads on a real PostgreSQL.

SQLite ignores row locks, so this runs only in the PostgreSQL pass:
    MEMEVAL_PGPORT=55505 MEMEVAL_REDISPORT=56505 bash scripts/with-services.sh \
        .venv/bin/python -m pytest -m postgres annotation
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections import Counter

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from annotation import services
from annotation.models import Assignment, Item, Label, Queue
from annotation.sources import add_items

from .conftest import pair_spec

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 50


def run_threads(target, n: int) -> list[BaseException]:
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def wrapped(k: int) -> None:
        try:
            barrier.wait()
            target(k)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return errors


def test_it_runs_on_postgresql():
    assert connection.vendor == "postgresql"


def test_fifty_concurrent_annotators_leave_every_item_with_exactly_n_labels(make_annotators):
    queue = Queue.objects.create(name="Load", kind=Queue.Kind.PAIRS, labels_per_item=3)
    add_items(queue, [pair_spec(f"m{k}", f"s{k}") for k in range(120)])
    users = make_annotators(THREADS)
    claims: Counter[tuple[int, int]] = Counter()
    lock = threading.Lock()

    def work(k: int) -> None:
        user, rng = users[k], random.Random(k)
        while (a := services.claim_next_item(queue, user)) is not None:
            with lock:
                claims[(a.item_id, user.pk)] += 1
            if rng.random() < 0.1:
                services.skip_assignment(a.pk, annotator=user)
                continue
            services.submit_label(a.pk, annotator=user, op=rng.choice(["PASS", "REPLACE", "APPEND", "DELETE"]))
            if rng.random() < 0.2:  # a double click
                services.submit_label(a.pk, annotator=user, op="PASS")

    assert run_threads(work, THREADS) == []
    assert all(n == 1 for n in claims.values()), "an annotator was given the same item twice"
    per_item = Counter(Label.objects.filter(item__queue=queue).values_list("item_id", flat=True))
    assert len(per_item) == 120 and set(per_item.values()) == {3}
    pairs = list(Label.objects.filter(item__queue=queue).values_list("item_id", "annotator_id"))
    assert len(pairs) == len(set(pairs))
    assert not Item.objects.filter(queue=queue).exclude(in_flight=0).exists()
    assert not Item.objects.filter(queue=queue, status=Item.Status.OPEN).exists()


def test_simultaneous_claims_never_share_a_slot_and_expired_leases_come_back(make_annotators):
    queue = Queue.objects.create(name="Slots", kind=Queue.Kind.PAIRS, labels_per_item=2)
    add_items(queue, [pair_spec(f"m{k}", f"s{k}") for k in range(10)])  # 20 slots for 50 annotators
    users = make_annotators(THREADS)
    got: dict[int, int] = {}

    def claim(k: int) -> None:
        a = services.claim_next_item(queue, users[k])
        if a is not None:
            got[k] = a.pk

    assert run_threads(claim, THREADS) == []
    assert len(got) == 20
    for item in Item.objects.filter(queue=queue):
        assert item.in_flight == 2
    # every lease runs out: the slots return and the other 30 annotators can take them
    Assignment.objects.filter(queue=queue).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    got.clear()
    assert run_threads(claim, THREADS) == []
    assert len(got) == 20
    fresh = Assignment.objects.filter(queue=queue, status=Assignment.Status.OPEN)
    assert fresh.count() == 20
    assert Assignment.objects.filter(queue=queue, status=Assignment.Status.EXPIRED).count() == 20
    pairs = list(Assignment.objects.filter(queue=queue).values_list("item_id", "annotator_id"))
    assert len(pairs) == len(set(pairs))  # nobody got back an item they had held before


def test_one_annotator_in_two_tabs_holds_one_assignment(make_annotators):
    queue = Queue.objects.create(name="Tabs", kind=Queue.Kind.PAIRS)
    add_items(queue, [pair_spec(f"m{k}", f"s{k}") for k in range(5)])
    (user,) = make_annotators(1)
    got: list[int] = []

    def claim(_k: int) -> None:
        a = services.claim_next_item(queue, user)
        got.append(a.pk)

    assert run_threads(claim, 10) == []
    assert len(set(got)) == 1
    assert Assignment.objects.filter(queue=queue, status=Assignment.Status.OPEN).count() == 1


def test_a_chained_summary_queue_has_one_editor_per_item_at_a_time_under_load(make_annotators):
    queue = Queue.objects.create(name="Chain", kind=Queue.Kind.SUMMARIES, summary_mode=Queue.Mode.CHAIN)
    add_items(queue, [{"payload": {"summary": [f"Generated {k}."], "transcript": []}} for k in range(8)])
    users = make_annotators(THREADS)
    overlaps: list[int] = []

    def work(k: int) -> None:
        user = users[k]
        while (a := services.claim_next_item(queue, user)) is not None:
            live = Assignment.objects.filter(item_id=a.item_id, status=Assignment.Status.OPEN).count()
            if live != 1:
                overlaps.append(a.item_id)
            services.submit_summary(a.pk, annotator=user, text=f"Edited by {user.username}.")

    assert run_threads(work, THREADS) == []
    assert overlaps == []
    for item in Item.objects.filter(queue=queue):
        revisions = list(item.labels.order_by("revision"))
        assert [r.revision for r in revisions] == [1, 2, 3]
        assert [r.parent_id for r in revisions] == [None, revisions[0].pk, revisions[1].pk]


def test_the_completing_submit_counts_a_vote_committed_while_it_waited_for_the_item(make_annotators):
    """The last submit's statement reads the earlier votes from its snapshot. Here the second vote
    commits after that snapshot was taken (the last submit was waiting for that submit's lock on the
    item), so the snapshot holds one earlier vote where two exist: gold must still count all three."""
    queue = Queue.objects.create(name="Race", kind=Queue.Kind.PAIRS, labels_per_item=3, gold_min_votes=2)
    add_items(queue, [pair_spec("m", "s")])
    first, second, third = make_annotators(3, prefix="race")
    claimed = [services.claim_next_item(queue, user) for user in (first, second, third)]
    assert all(a is not None for a in claimed)
    services.submit_label(claimed[0].pk, annotator=first, op="APPEND")

    holding = threading.Event()
    release = threading.Event()

    def second_vote_in_an_open_transaction() -> None:
        try:
            with transaction.atomic():
                services.submit_label(claimed[1].pk, annotator=second, op="DELETE")
                holding.set()  # the item's row stays locked until this block commits
                assert release.wait(30)
        finally:
            connections.close_all()

    def release_once_the_third_submit_waits() -> None:
        try:
            waiting = False
            for _ in range(3000):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%%WITH done%%'"
                    )
                    waiting = cursor.fetchone()[0] > 0
                if waiting:
                    break
                time.sleep(0.01)
            assert waiting, "the third submit never waited for the item's lock"
        finally:
            release.set()
            connections.close_all()

    holder = threading.Thread(target=second_vote_in_an_open_transaction)
    holder.start()
    assert holding.wait(30)
    watcher = threading.Thread(target=release_once_the_third_submit_waits)
    watcher.start()
    result = services.submit_label(claimed[2].pk, annotator=third, op="DELETE")
    holder.join(30)
    watcher.join(30)

    assert result.label.revision == 3
    item = Item.objects.get(queue=queue)
    # APPEND, DELETE, DELETE: with only the vote the snapshot saw it would be a 1/1 tie (adjudication)
    assert (item.status, item.gold_label, item.gold_method) == (Item.Status.COMPLETE, "DELETE", "majority")
