"""Judges drawing pairs at the same moment against a real PostgreSQL: the comparison row's lock makes each draw
see the others' pairs, so the pairs of arms stay balanced; the same Prolific ID arriving twice at once is one
judge; a judge's double-clicked "next" gives one open pair.

Run inside scripts/with-services.sh:
    bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres pairwise/tests/test_postgres_drawing.py
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from itertools import combinations
from typing import Any

import pytest
from django.db import connection

from pairwise import services
from pairwise.models import Comparison, Judge, Judgement

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def at_once(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run the functions in threads released together (each with its own connection); their results in order."""
    barrier = threading.Barrier(len(fns))
    out: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def run(k: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=30)
            out[k] = fn()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(k, fn)) for k, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return out


def test_the_same_prolific_id_arriving_at_once_is_one_judge(comparison: Comparison) -> None:
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh (DATABASE_URL=postgres://...)"
    judges = at_once([lambda: services.join_crowd(comparison, "SAME").pk for _ in range(4)])
    assert len(set(judges)) == 1 and Judge.objects.filter(comparison=comparison).count() == 1


def test_a_judge_asking_twice_at_once_gets_one_open_pair(comparison: Comparison) -> None:
    judge = services.join_crowd(comparison, "TWICE")
    pairs = at_once([lambda: services.next_judgement(Judge.objects.get(pk=judge.pk)).pk for _ in range(3)])
    assert len(set(pairs)) == 1 and judge.judgements.count() == 1


def test_judges_drawing_at_once_keep_the_pairs_of_arms_balanced(comparison: Comparison) -> None:
    comparison.checks_per_judge = 0
    comparison.save()
    judges = [services.join_crowd(comparison, f"C{n}") for n in range(6)]

    def judge_all(judge_id: int, seed: int) -> int:
        judge = Judge.objects.select_related("comparison").get(pk=judge_id)
        rng = random.Random(seed)
        n = 0
        while (j := services.next_judgement(judge, rng)) is not None:
            side = rng.choice(["left", "right"])
            data = {}
            for q in judge.comparison.questions:
                data[f"side_{q}"], data[f"reason_{q}"] = side, "it remembered what I said"
            assert services.submit(j, data) == {}
            n += 1
        return n

    counts = at_once([lambda j=j, s=s: judge_all(j.pk, s) for s, j in enumerate(judges)])
    assert counts == [comparison.slots_per_judge] * len(judges)
    load = Counter(tuple(sorted((j.left_arm_id, j.right_arm_id))) for j in Judgement.objects.all())
    real = sorted(comparison.study.arms.filter(is_qc=False).values_list("pk", flat=True))
    per_pair = [load[p] for p in combinations(real, 2)]
    assert sum(per_pair) == 6 * comparison.pairs_per_judge
    assert max(per_pair) - min(per_pair) <= 1, per_pair
    for judge in judges:  # nobody saw an episode twice
        seen = [e for pair in judge.judgements.values_list("left_id", "right_id") for e in pair]
        assert len(seen) == len(set(seen))
