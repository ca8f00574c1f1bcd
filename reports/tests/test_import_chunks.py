"""A large ratings import writes in chunks, each its own transaction: between two chunks another connection
(a worker's chat message) can write, the dataset stays hidden until it is complete, and a failure leaves
nothing behind."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from reports import queries
from reports.models import ImportedDataset, ImportedRating
from reports.tests.conftest import WIDE, in_another_connection, upload
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


def test_between_chunks_another_connection_writes_and_sees_the_committed_ratings_but_not_the_dataset(
    researcher_client: Client, study: Study, monkeypatch: Any
) -> None:
    monkeypatch.setattr(queries, "IMPORT_CHUNK_ROWS", 4)
    seen: list[tuple[int, bool, int]] = []

    def meanwhile() -> None:
        def chat_write() -> tuple[int, bool, int]:
            # a write of another connection while the import is running: refused if the import held the lock
            User.objects.create_user(f"meanwhile-{len(seen)}")
            dataset = ImportedDataset.objects.get()
            listed = dataset in queries.datasets_for_study(study)
            return ImportedRating.objects.count(), listed, User.objects.filter(username__startswith="meanwhile").count()

        seen.append(in_another_connection(chat_write))

    monkeypatch.setattr(queries, "_between_chunks", meanwhile)
    response = upload(researcher_client, study, WIDE, metrics="good,bad", session="session")
    assert response.status_code == 302
    assert seen == [(4, False, 1), (8, False, 2), (12, False, 3), (16, False, 4)]  # 16 ratings, 4 per chunk
    dataset = ImportedDataset.objects.get()
    assert dataset.complete and dataset in queries.datasets_for_study(study)


def test_an_import_that_fails_half_way_leaves_nothing_behind(
    researcher_client: Client, study: Study, monkeypatch: Any
) -> None:
    monkeypatch.setattr(queries, "IMPORT_CHUNK_ROWS", 4)
    calls = {"n": 0}

    def fail_on_the_second_chunk() -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("the disk is full")

    monkeypatch.setattr(queries, "_between_chunks", fail_on_the_second_chunk)
    with pytest.raises(RuntimeError):
        upload(researcher_client, study, WIDE, metrics="good,bad", session="session")
    assert not ImportedDataset.objects.exists() and not ImportedRating.objects.exists()


def test_an_incomplete_dataset_is_not_found_by_its_pages(researcher_client: Client, study: Study) -> None:
    upload(researcher_client, study, WIDE, metrics="good,bad", session="session")
    dataset = ImportedDataset.objects.get()
    ImportedDataset.objects.filter(pk=dataset.pk).update(complete=False)
    assert researcher_client.get(dataset.get_absolute_url()).status_code == 404
