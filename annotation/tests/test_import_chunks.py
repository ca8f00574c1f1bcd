"""A large item import writes in chunks, each its own transaction: between two chunks another connection (a
worker's chat message) can write, and a failure removes what the import added but never a label."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from annotation import services, sources
from annotation.models import Item, Queue
from annotation.tests.conftest import pair_spec
from reports.tests.conftest import in_another_connection


def specs(n: int) -> list[dict[str, Any]]:
    return [pair_spec(f"memory {k}", f"summary {k}") for k in range(n)]


@pytest.mark.django_db(transaction=True)
def test_between_chunks_another_connection_writes_and_sees_the_committed_items(
    pair_queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "IMPORT_CHUNK_ROWS", 3)
    seen: list[tuple[int, int]] = []

    def meanwhile() -> None:
        def chat_write() -> tuple[int, int]:
            # refused ("database is locked") if the import still held the write lock
            User.objects.create_user(f"meanwhile-{len(seen)}")
            return pair_queue.items.count(), User.objects.filter(username__startswith="meanwhile").count()

        seen.append(in_another_connection(chat_write))

    monkeypatch.setattr(sources, "_between_chunks", meanwhile)
    assert sources.add_items(pair_queue, specs(7)) == 7
    assert seen == [(4 + 3, 1), (4 + 6, 2)]  # 4 items were there; 7 more, 3 per chunk
    assert list(pair_queue.items.values_list("position", flat=True)) == list(range(1, 12))


@pytest.mark.django_db
def test_an_import_that_fails_half_way_removes_its_items_but_keeps_one_already_labelled(
    researcher: User, annotator: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = Queue.objects.create(name="Big import", kind=Queue.Kind.PAIRS, created_by=researcher)
    monkeypatch.setattr(sources, "IMPORT_CHUNK_ROWS", 2)
    calls: list[int] = []

    def labelled_then_the_disk_is_full() -> None:
        calls.append(1)
        if len(calls) == 1:  # the first chunk is claimable: an annotator labels an item of it
            assignment = services.claim_next_item(queue, annotator)
            assert assignment is not None
            services.submit_label(assignment.pk, annotator=annotator, op="PASS")
        else:
            raise OSError("the disk is full")

    monkeypatch.setattr(sources, "_between_chunks", labelled_then_the_disk_is_full)
    with pytest.raises(OSError, match="disk is full"):
        sources.add_items(queue, specs(6))
    (kept,) = Item.objects.filter(queue=queue)
    assert kept.labels.count() == 1 and kept.position == 1


@pytest.mark.django_db
def test_a_small_import_does_not_pause(pair_queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    def pause() -> None:
        raise AssertionError("paused after the only chunk")

    monkeypatch.setattr(sources, "_between_chunks", pause)
    assert sources.add_items(pair_queue, specs(3)) == 3 and pair_queue.items.count() == 7


@pytest.mark.django_db(transaction=True)
def test_an_import_started_between_two_chunks_of_another_gets_positions_of_its_own(
    pair_queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a researcher's double click on "Import": the second file is written while the first pauses
    monkeypatch.setattr(sources, "IMPORT_CHUNK_ROWS", 2)
    first_pause = [True]

    def the_second_import_runs() -> None:
        if first_pause.pop() if first_pause else False:
            second = [pair_spec(f"second {k}", f"s {k}") for k in range(2)]
            in_another_connection(lambda: sources.add_items(Queue.objects.get(pk=pair_queue.pk), second))

    monkeypatch.setattr(sources, "_between_chunks", the_second_import_runs)
    sources.add_items(pair_queue, [pair_spec(f"first {k}", f"f {k}") for k in range(4)])
    positions = list(pair_queue.items.values_list("position", flat=True))
    assert len(positions) == len(set(positions)) == 10
    ordered = [item.payload["m"] for item in pair_queue.items.order_by("position")][4:]
    assert [m for m in ordered if m.startswith("first")] == [f"first {k}" for k in range(4)]
    assert [m for m in ordered if m.startswith("second")] == ["second 0", "second 1"]
