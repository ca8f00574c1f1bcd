"""Agreement, gold statistics and the memory system's own accuracy for one queue.

The statistics come from ``analysis.agreement`` (statsmodels' Fleiss' kappa, the ``krippendorff``
package); Algorithm 1 comes from ``memory.systems.memory_update.apply_operations``. This module only
turns queue rows into their inputs.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter, defaultdict
from typing import Any

from django.db.models import Count, Max, Min
from django.utils import timezone
from scipy.stats import chisquare

from analysis.agreement import counts_from_labels, fleiss_kappa, krippendorff_alpha, per_category_kappa
from annotation.models import (
    FUSION,
    OPERATIONS,
    PAIR_LABELS,
    TABLE2_DISTRIBUTION,
    TABLE2_HUMAN_ACCURACY,
    TABLE2_NO_GOLD,
    Assignment,
    Item,
    Label,
    Queue,
)
from memory.systems.memory_update import apply_operations


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 4)


def agreement(queue: Queue) -> dict[str, Any]:
    """Fleiss' kappa (items with exactly N labels) and Krippendorff's alpha (nominal, all items with >= 2)."""
    labels = list(Label.objects.filter(item__queue=queue).values_list("item_id", "annotator_id", "op"))
    per_item: dict[int, list[str]] = defaultdict(list)
    for item_id, _who, op in labels:
        per_item[item_id].append(op)
    n = queue.labels_per_item
    full = [ops for ops in per_item.values() if len(ops) == n]
    out: dict[str, Any] = {
        "items_with_n_labels": len(full),
        "labels": len(labels),
        "fleiss_kappa": None,
        "per_label_kappa": {},
        "krippendorff_alpha": None,
    }
    if len(full) >= 2 and n >= 2:
        counts = counts_from_labels(full, PAIR_LABELS)
        out["fleiss_kappa"] = _num(fleiss_kappa(counts))
        # one-vs-rest: operation classes are imbalanced, and a rare class (DELETE) can be the unreliable one
        out["per_label_kappa"] = {k: _num(v) for k, v in per_category_kappa(counts, PAIR_LABELS).items()}
    annotators = sorted({who for _, who, _ in labels})
    items = sorted(k for k, ops in per_item.items() if len(ops) >= 2)
    if len(annotators) >= 2 and items:
        col = {item_id: k for k, item_id in enumerate(items)}
        row = {who: k for k, who in enumerate(annotators)}
        matrix: list[list[Any]] = [[None] * len(items) for _ in annotators]
        for item_id, who, op in labels:
            if item_id in col:
                matrix[row[who]][col[item_id]] = op
        try:
            out["krippendorff_alpha"] = _num(krippendorff_alpha(matrix, level="nominal"))
        except ValueError:
            out["krippendorff_alpha"] = None
    return out


def gold_summary(queue: Queue) -> dict[str, Any]:
    """Gold label distribution against the seed's Table 2, and how often an individual label equals gold."""
    finished = Item.objects.filter(queue=queue, done_count__gte=1).exclude(status=Item.Status.OPEN)
    by_status = Counter(finished.values_list("status", flat=True))
    gold = Counter(Item.objects.filter(queue=queue, status=Item.Status.COMPLETE).values_list("gold_label", flat=True))
    four = sum(gold[op] for op in OPERATIONS)
    total_finished = sum(by_status.values())
    no_gold = by_status[Item.Status.ADJUDICATION] + by_status[Item.Status.DISCARDED]
    distribution = [
        {
            "label": op,
            "count": gold[op],
            "percent": round(100 * gold[op] / four, 1) if four else None,
            "table2_percent": TABLE2_DISTRIBUTION[op],
        }
        for op in OPERATIONS
    ]
    gold_pairs = list(
        Label.objects.filter(item__queue=queue, item__status=Item.Status.COMPLETE).values_list("op", "item__gold_label")
    )
    match = sum(1 for op, g in gold_pairs if op == g)
    fit = None
    if four:
        # goodness of fit of our gold distribution to Table 2's (scipy); only trustworthy when every
        # expected count is at least 5, i.e. from about 100 gold pairs (DELETE is 5.1%)
        expected = [TABLE2_DISTRIBUTION[op] / 100 * four for op in OPERATIONS]
        expected = [e * four / sum(expected) for e in expected]
        test = chisquare([gold[op] for op in OPERATIONS], f_exp=expected)
        fit = {"chi2": _num(test.statistic), "p": _num(test.pvalue), "reliable": min(expected) >= 5}
    return {
        "table2_fit": fit,
        "finished_items": total_finished,
        "gold_items": sum(gold.values()),
        "fusion_gold": gold[FUSION],
        "fusion_percent": round(100 * gold[FUSION] / total_finished, 2) if total_finished else None,
        "awaiting_adjudication": by_status[Item.Status.ADJUDICATION],
        "no_gold_percent": round(100 * no_gold / total_finished, 2) if total_finished else None,
        "table2_no_gold_percent": TABLE2_NO_GOLD,
        "individual_equals_gold_percent": round(100 * match / len(gold_pairs), 2) if gold_pairs else None,
        "table2_individual_equals_gold_percent": TABLE2_HUMAN_ACCURACY,
        "distribution": distribution,
    }


def per_annotator(queue: Queue) -> list[dict[str, Any]]:
    """Labels, agreement with gold (on items that got gold) and speed, per annotator."""
    rows: dict[int, dict[str, Any]] = {}
    assignments = (
        Assignment.objects.filter(queue=queue, status=Assignment.Status.SUBMITTED)
        .select_related("annotator")
        .values_list("annotator_id", "annotator__username", "created_at", "submitted_at")
    )
    for who, name, start, end in assignments:
        if end is None:  # submitted without a time: cannot be timed (never written by submit_*)
            continue
        r = rows.setdefault(who, {"annotator": name, "labels": 0, "seconds": [], "first": end, "last": end})
        r["labels"] += 1
        r["seconds"].append((end - start).total_seconds())
        r["first"], r["last"] = min(r["first"], end), max(r["last"], end)
    if queue.is_pairs:
        for who, op, gold in Label.objects.filter(item__queue=queue, item__status=Item.Status.COMPLETE).values_list(
            "annotator_id", "op", "item__gold_label"
        ):
            if who in rows:
                rows[who].setdefault("gold_n", 0)
                rows[who].setdefault("gold_match", 0)
                rows[who]["gold_n"] += 1
                rows[who]["gold_match"] += int(op == gold)
    out = []
    for r in rows.values():
        secs = sorted(r.pop("seconds"))
        gold_n = r.pop("gold_n", 0)
        gold_match = r.pop("gold_match", 0)
        r["median_seconds"] = round(secs[len(secs) // 2], 1) if secs else None
        r["agreement_with_gold"] = round(gold_match / gold_n, 4) if gold_n else None
        r["gold_items"] = gold_n
        out.append(r)
    return sorted(out, key=lambda r: (-r["labels"], r["annotator"]))


def queue_progress(queue: Queue) -> dict[str, Any]:
    items = Item.objects.filter(queue=queue)
    agg = items.aggregate(n=Count("id"))
    by_status = Counter(items.values_list("status", flat=True))
    labels = Label.objects.filter(item__queue=queue)
    span = labels.aggregate(first=Min("created_at"), last=Max("created_at"))
    n_labels = labels.count()
    required = agg["n"] * queue.labels_per_item
    hours = (span["last"] - span["first"]).total_seconds() / 3600 if span["first"] and span["last"] else 0
    return {
        "items": agg["n"],
        "complete": by_status[Item.Status.COMPLETE],
        "adjudication": by_status[Item.Status.ADJUDICATION],
        "discarded": by_status[Item.Status.DISCARDED],
        "open": by_status[Item.Status.OPEN],
        "labels": n_labels,
        "labels_required": required,
        "percent": round(100 * n_labels / required) if required else 100,
        "in_flight": Assignment.objects.filter(queue=queue, status=Assignment.Status.OPEN).count(),
        # a rate over a few seconds is noise: report it once labelling has gone on for 10 minutes
        "labels_per_hour": round(n_labels / hours, 1) if hours >= 1 / 6 else None,
        "labels_last_hour": labels.filter(created_at__gte=timezone.now() - dt.timedelta(hours=1)).count(),
        "first_label": span["first"],
        "last_label": span["last"],
    }


def operator_accuracy(queue: Queue) -> dict[str, Any]:
    """4-class accuracy of the memory system's own decisions (``operator_op``) against gold (Table 3)."""
    pairs = [
        (item.payload.get("operator_op"), item.gold_label)
        for item in Item.objects.filter(queue=queue, status=Item.Status.COMPLETE, gold_label__in=OPERATIONS)
        if item.payload.get("operator_op") in OPERATIONS
    ]
    confusion = {g: dict.fromkeys(OPERATIONS, 0) for g in OPERATIONS}
    for pred, gold in pairs:
        confusion[gold][pred] += 1
    correct = sum(1 for p, g in pairs if p == g)
    return {
        "pairs": len(pairs),
        "accuracy": round(correct / len(pairs), 4) if pairs else None,
        "confusion": confusion,  # rows: gold, columns: operator
    }


def sentence_f1(predicted: list[str], gold: list[str]) -> float:
    """Sentence-level F1 between two memories (exact sentence match, as sets)."""
    p, g = set(predicted), set(gold)
    if not p and not g:
        return 1.0
    tp = len(p & g)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(p), tp / len(g)
    return 2 * precision * recall / (precision + recall)


def set_level_f1(queue: Queue) -> dict[str, Any]:
    """Table 3's set evaluation: M' from the operator's decisions vs M' from gold, through Algorithm 1.

    Only updates (units) whose every pair has a 4-class gold label and an operator decision count;
    the others (a FUSION or no-consensus pair, a pair not in the queue) are reported as skipped.
    """
    units: dict[str, list[Item]] = defaultdict(list)
    for item in Item.objects.filter(queue=queue).exclude(unit=""):
        units[item.unit].append(item)
    scores: list[float] = []
    skipped = 0
    examples: list[dict[str, Any]] = []
    for unit, items in units.items():
        first = items[0].payload
        M, S = list(first.get("memory_before") or []), list(first.get("summary") or [])
        pred: dict[tuple[int, int], str] = {}
        gold: dict[tuple[int, int], str] = {}
        ok = bool(M and S)
        for item in items:
            p = item.payload
            i, j = p.get("i"), p.get("j")
            if i is None and p.get("m") in M:
                i = M.index(p["m"])
            if j is None and p.get("s") in S:
                j = S.index(p["s"])
            if (
                i is None
                or j is None
                or item.status != Item.Status.COMPLETE
                or item.gold_label not in OPERATIONS
                or p.get("operator_op") not in OPERATIONS
            ):
                ok = False
                break
            pred[(i, j)], gold[(i, j)] = p["operator_op"], item.gold_label
        if not ok or len(gold) != len(M) * len(S):
            skipped += 1
            continue
        m_pred, m_gold = apply_operations(M, S, pred), apply_operations(M, S, gold)
        f1 = sentence_f1(m_pred, m_gold)
        scores.append(f1)
        if len(examples) < 5:
            examples.append({"unit": unit, "predicted": m_pred, "gold": m_gold, "f1": round(f1, 4)})
    return {
        "updates": len(scores),
        "skipped_updates": skipped,
        "mean_f1": round(sum(scores) / len(scores), 4) if scores else None,
        "examples": examples,
    }


def summary_edits(queue: Queue) -> list[dict[str, Any]]:
    """Per revision step: how many revisions and how many changed the text they started from.

    The seed reports that only 1.4% of summaries were edited by the third group: this is that figure.
    """
    rows: Counter[int] = Counter()
    changed: Counter[int] = Counter()
    for revision, was_changed in Label.objects.filter(item__queue=queue).values_list("revision", "changed"):
        rows[revision] += 1
        changed[revision] += int(was_changed)
    return [
        {
            "step": k,
            "revisions": rows[k],
            "changed": changed[k],
            "percent_changed": round(100 * changed[k] / rows[k], 1),
        }
        for k in sorted(rows)
    ]


def queue_report(queue: Queue) -> dict[str, Any]:
    report: dict[str, Any] = {"progress": queue_progress(queue), "annotators": per_annotator(queue)}
    if queue.is_pairs:
        report.update(
            agreement=agreement(queue),
            gold=gold_summary(queue),
            operator=operator_accuracy(queue),
            set_f1=set_level_f1(queue),
        )
    elif queue.is_scores:
        report["scores"] = score_agreement(queue)
    else:
        report["edits"] = summary_edits(queue)
    return report


def score_agreement(queue: Queue) -> list[dict[str, Any]]:
    """Scores queues: per statement, the labels given and the annotators' Krippendorff alpha (interval)."""
    cells: dict[str, dict[int, dict[int, float]]] = {}
    for item_id, who, scores in Label.objects.filter(item__queue=queue).values_list(
        "item_id", "annotator_id", "scores"
    ):
        for key, value in (scores or {}).items():
            cells.setdefault(str(key), {}).setdefault(who, {})[item_id] = float(value)
    out = []
    for key, by_annotator in sorted(cells.items()):
        items = sorted({i for row in by_annotator.values() for i in row})
        matrix = [[row.get(i, float("nan")) for i in items] for row in by_annotator.values()]
        try:
            alpha: float | None = krippendorff_alpha(matrix, level="interval") if len(matrix) >= 2 else None
        except ValueError:
            alpha = None
        out.append(
            {
                "statement": key,
                "labels": sum(len(r) for r in by_annotator.values()),
                "alpha": None if alpha is None or alpha != alpha else round(alpha, 4),
            }
        )
    return out
