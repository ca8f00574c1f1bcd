"""Arm assignment under real concurrency: PostgreSQL row locks, real threads (SQLite ignores locks).

bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres chat/tests/test_assignment_postgres.py
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection

from chat import assignment
from chat.models import Episode
from studies.models import Arm, Participant, Study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_thirty_workers_starting_at_once_are_spread_evenly_over_the_arms(study: Study) -> None:
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh"
    Arm.objects.create(study=study, name="Third", memory_system="none", llm_backend="scripted")
    participants = [Participant.objects.create(study=study, external_id=f"w{i}", source="prolific") for i in range(30)]
    barrier = threading.Barrier(len(participants))
    errors: list[BaseException] = []

    def start(p: Participant) -> None:
        try:
            barrier.wait()
            assignment.assign_episode(p)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(p,)) for p in participants]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = Counter(Episode.objects.values_list("arm_id", flat=True))
    assert sorted(counts.values()) == [10, 10, 10]  # without the study lock, racing counts would skew this


def test_a_worker_opening_two_tabs_at_once_gets_one_episode(study: Study) -> None:
    p = Participant.objects.create(study=study, external_id="twotabs", source="prolific")
    barrier = threading.Barrier(2)
    got: list[int] = []

    def start() -> None:
        barrier.wait()
        got.append(assignment.assign_episode(p).pk)
        connection.close()

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and Episode.objects.filter(participant=p).count() == 1


def test_the_abandonment_sweep_runs_on_postgresql_and_frees_the_arm_balance(study: Study) -> None:
    import datetime as dt

    from django.utils import timezone

    from chat.timing import sweep_abandoned

    assert connection.vendor == "postgresql", "run with scripts/with-services.sh"
    p = Participant.objects.create(study=study, external_id="gone", source="prolific", consented_at=timezone.now())
    episode = assignment.assign_episode(p)
    Participant.objects.filter(pk=p.pk).update(last_seen_at=timezone.now() - dt.timedelta(days=1))
    result = sweep_abandoned()
    assert (result.participants, result.episodes) == (1, 1)
    episode.refresh_from_db()
    assert episode.status == Episode.Status.ABANDONED
    assert sweep_abandoned().participants == 0


def test_side_by_side_workers_starting_at_once_get_pairs_of_arms_balanced_and_one_pair_each(study: Study) -> None:
    """Live side by side (chat/sidebyside.py): the pair of arms is drawn under the same study lock."""
    study.side_by_side = True
    study.episodes_per_worker = 1
    study.save()
    Arm.objects.create(study=study, name="Third", memory_system="none", llm_backend="scripted")
    participants = [Participant.objects.create(study=study, external_id=f"p{i}", source="prolific") for i in range(12)]
    barrier = threading.Barrier(len(participants) + 1)  # one of them twice: two tabs at once
    errors: list[BaseException] = []

    def start(p: Participant) -> None:
        try:
            barrier.wait()
            assignment.assign_episode(p)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(p,)) for p in [*participants, participants[0]]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Episode.objects.filter(side="a").count() == Episode.objects.filter(side="b").count() == 12
    assert sorted(assignment.pair_load(study).values()) == [4, 4, 4]  # without the study lock this would skew
