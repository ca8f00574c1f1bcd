"""Agreement, gold statistics, operator accuracy and set-level F1 of a queue, and the exports."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from django.utils import timezone
from statsmodels.stats import inter_rater

from annotation import exports, measures, services
from annotation.models import Assignment, Item, Label, Queue
from annotation.sources import add_items

from .conftest import pair_spec

pytestmark = pytest.mark.django_db

CATS = ["PASS", "REPLACE", "APPEND", "DELETE", "FUSION"]


def put_labels(queue: Queue, table: list[list[Any]], users: list[Any]) -> list[Item]:
    """``table[rater][item]`` = category index (or None); labels stored straight, as a finished queue would."""
    n_items = len(table[0])
    add_items(queue, [pair_spec(f"m{k}", f"s{k}") for k in range(n_items)])
    items = list(queue.items.order_by("position"))
    now = timezone.now()
    for r, row in enumerate(table):
        for k, value in enumerate(row):
            if value is None:
                continue
            a = Assignment.objects.create(
                queue=queue, item=items[k], annotator=users[r], status="submitted", expires_at=now, submitted_at=now
            )
            op = CATS[value]
            Label.objects.create(
                item=items[k],
                annotator=users[r],
                assignment=a,
                op=op,
                fused_text="x" if op == "FUSION" else "",
                revision=r + 1,
            )
    for item in items:
        Item.objects.filter(pk=item.pk).update(done_count=item.labels.count())
    return list(queue.items.order_by("position"))


def test_fleiss_kappa_of_a_queue_matches_the_wikipedia_reference_value(make_annotators):
    # 10 subjects x 14 raters x 5 categories (statistics-and-reliability.md A6): kappa = 0.2099
    counts = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    table = [[None] * 10 for _ in range(14)]
    for k, row in enumerate(counts):
        raters = iter(range(14))
        for cat, n in enumerate(row):
            for _ in range(n):
                table[next(raters)][k] = cat
    queue = Queue.objects.create(name="Wiki", kind=Queue.Kind.PAIRS, labels_per_item=14, gold_min_votes=2)
    put_labels(queue, table, make_annotators(14))
    result = measures.agreement(queue)
    assert result["items_with_n_labels"] == 10
    assert result["fleiss_kappa"] == pytest.approx(0.2099, abs=5e-4)
    # one-vs-rest kappa of the first category, straight from statsmodels on the 2-column table
    first = [[row[0], 14 - row[0]] for row in counts]
    assert result["per_label_kappa"]["PASS"] == pytest.approx(inter_rater.fleiss_kappa(first), abs=1e-4)


def test_krippendorff_alpha_of_a_queue_matches_krippendorff_2011(make_annotators):
    # 4 coders x 12 units with gaps, Krippendorff (2011) p. 8: nominal alpha = 0.743
    n = None
    data = [
        [0, 1, 2, 2, 1, 0, 3, 0, 1, n, n, n],
        [0, 1, 2, 2, 1, 1, 3, 0, 1, 4, n, 2],
        [n, 2, 2, 2, 1, 2, 3, 1, 1, 4, 0, n],
        [0, 1, 2, 2, 1, 3, 3, 0, 1, 4, 0, n],
    ]
    queue = Queue.objects.create(name="K2011", kind=Queue.Kind.PAIRS, labels_per_item=4)
    put_labels(queue, data, make_annotators(4))
    assert measures.agreement(queue)["krippendorff_alpha"] == pytest.approx(0.743, abs=5e-4)


def test_gold_statistics_compare_with_table_2_and_score_annotators(make_annotators):
    a, b, c = make_annotators(3)
    queue = Queue.objects.create(name="Gold", kind=Queue.Kind.PAIRS)
    # items: PASS gold, APPEND gold, APPEND gold, no consensus
    put_labels(queue, [[0, 2, 2, 0], [0, 2, 2, 1], [1, 2, 3, 2]], [a, b, c])
    for item in queue.items.all():
        services._complete(item, timezone.now())
    gold = measures.gold_summary(queue)
    dist = {d["label"]: d for d in gold["distribution"]}
    assert (
        dist["PASS"]["count"] == 1 and dist["APPEND"]["count"] == 2 and dist["APPEND"]["percent"] == pytest.approx(66.7)
    )
    assert dist["APPEND"]["table2_percent"] == 44.6
    assert gold["awaiting_adjudication"] == 1 and gold["no_gold_percent"] == 25.0
    assert gold["table2_fit"]["reliable"] is False and 0 <= gold["table2_fit"]["p"] <= 1
    assert gold["individual_equals_gold_percent"] == pytest.approx(100 * 7 / 9, abs=0.01)
    by_name = {r["annotator"]: r for r in measures.per_annotator(queue)}
    assert by_name["ann0"]["agreement_with_gold"] == 1.0
    assert by_name["ann2"]["agreement_with_gold"] == pytest.approx(1 / 3, abs=1e-4)


def finished_unit_queue(
    users: list[Any],
    gold_ops: dict[tuple[int, int], str],
    operator: dict[tuple[int, int], str],
    M: list[str],
    S: list[str],
) -> Queue:
    queue = Queue.objects.create(name="Set", kind=Queue.Kind.PAIRS)
    add_items(
        queue,
        [
            pair_spec(M[i], S[j], op=operator[(i, j)], unit="u1", i=i, j=j, memory_before=M, summary=S)
            for i in range(len(M))
            for j in range(len(S))
        ],
    )
    for user in users:
        while (asg := services.claim_next_item(queue, user)) is not None:
            p = asg.item.payload
            services.submit_label(asg.pk, annotator=user, op=gold_ops[(p["i"], p["j"])])
    return queue


def test_operator_accuracy_and_set_level_f1_go_through_algorithm_1(make_annotators):
    M = ["Has a cold", "Has a dog"]
    S = ["Cold is all better now", "The dog likes carrots"]
    gold = {(0, 0): "DELETE", (0, 1): "APPEND", (1, 0): "APPEND", (1, 1): "APPEND"}
    operator = {(0, 0): "REPLACE", (0, 1): "APPEND", (1, 0): "APPEND", (1, 1): "APPEND"}
    queue = finished_unit_queue(make_annotators(3), gold, operator, M, S)
    acc = measures.operator_accuracy(queue)
    assert acc["pairs"] == 4 and acc["accuracy"] == 0.75 and acc["confusion"]["DELETE"]["REPLACE"] == 1
    f1 = measures.set_level_f1(queue)
    # gold M' = {dog, carrots}; operator M' = {dog, cold better, carrots}: P = 2/3, R = 1, F1 = 0.8
    assert f1["updates"] == 1 and f1["mean_f1"] == pytest.approx(0.8)
    assert f1["examples"][0]["gold"] == ["Has a dog", "The dog likes carrots"]


def test_set_level_f1_skips_updates_with_a_pair_lacking_gold(make_annotators):
    M, S = ["a"], ["b", "c"]
    gold = {(0, 0): "PASS", (0, 1): "APPEND"}
    queue = finished_unit_queue(make_annotators(3), gold, gold, M, S)
    item = queue.items.get(payload__j=1)
    Item.objects.filter(pk=item.pk).update(status=Item.Status.ADJUDICATION, gold_label="")
    assert measures.set_level_f1(queue) == {"updates": 0, "skipped_updates": 1, "mean_f1": None, "examples": []}


def test_sentence_f1_of_two_memories():
    assert measures.sentence_f1(["a", "b"], ["a", "b"]) == 1.0
    assert measures.sentence_f1([], []) == 1.0
    assert measures.sentence_f1(["a"], ["b"]) == 0.0
    assert measures.sentence_f1(["a", "b", "c"], ["a", "b"]) == pytest.approx(0.8)


def test_gold_pairs_export_in_the_appendix_b4_text_to_text_format(make_annotators):
    gold = {(0, 0): "PASS", (0, 1): "APPEND", (1, 0): "REPLACE", (1, 1): "DELETE"}
    queue = finished_unit_queue(make_annotators(3), gold, gold, ["m0", "m1"], ["s0", "s1"])
    rows = [json.loads(line) for line in exports.jsonl(exports.gold_pairs(queue))]
    assert [(r["input"], r["target"], r["label"]) for r in rows] == [
        ("sentence 1: m0 sentence 2: s0", "0", "PASS"),
        ("sentence 1: m0 sentence 2: s1", "1", "APPEND"),
        ("sentence 1: m1 sentence 2: s0", "2", "REPLACE"),
        ("sentence 1: m1 sentence 2: s1", "3", "DELETE"),
    ]


def test_fusion_pairs_leave_the_b4_export_unless_asked_for(make_annotators):
    queue = Queue.objects.create(name="F", kind=Queue.Kind.PAIRS)
    add_items(queue, [pair_spec("Back hurts", "Receiving physiotherapy")])
    for user in make_annotators(3):
        asg = services.claim_next_item(queue, user)
        services.submit_label(asg.pk, annotator=user, op="FUSION", fused_text="Physiotherapy for back pain")
    assert list(exports.gold_pairs(queue)) == []
    (row,) = exports.gold_pairs(queue, include_fusion=True)
    assert row["target"] is None and row["fused"] == "Physiotherapy for back pain"


def test_edited_summaries_export_keeps_every_revision(summary_queue, make_annotators):
    for k, user in enumerate(make_annotators(3)):
        asg = services.claim_next_item(summary_queue, user)
        services.submit_summary(asg.pk, annotator=user, text=f"Has a cold (v{k}).")
    (row,) = exports.edited_summaries(summary_queue)
    assert row["generated"] == ["Has a cold.", "Had three eggs for breakfast."]
    assert [r["sentences"] for r in row["revisions"]] == [
        ["Has a cold (v0)."],
        ["Has a cold (v1)."],
        ["Has a cold (v2)."],
    ]
    assert [r["parent_revision"] for r in row["revisions"]] == [None, 1, 2]
    assert row["final"] == ["Has a cold (v2)."]
    edits = measures.summary_edits(summary_queue)
    assert [e["changed"] for e in edits] == [1, 1, 1]


def test_agreement_is_undefined_rather_than_invented_with_too_little_data(pair_queue):
    result = measures.agreement(pair_queue)
    assert result["fleiss_kappa"] is None and result["krippendorff_alpha"] is None
    assert not math.isnan(result["labels"])
