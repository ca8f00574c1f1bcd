"""Scorers more than one arm uses: memory-operation labels against Keep Me Updated's calibration
labels (``memory_update``, ``mem0``), what an arm wrote from a calibration dialogue (``mem0``'s
facts, ``memgpt``'s human block and archive), and one summary per dialogue (``ld_agent``'s event
summaries, ``memorybank``'s day summaries)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memory.readiness.core import (
    Check,
    bounded,
    copies,
    dialogue_text,
    facts_kept,
    failed,
    fallback_reasons,
    informative_dialogues,
    mentions,
    rate,
)

#: Keep Me Updated's memory operations, the labels of the calibration pairs.
OPERATIONS = ("PASS", "REPLACE", "APPEND", "DELETE")

OPERATION_THRESHOLDS = {"operation_accuracy": 0.70, "operation_balanced_recall": 0.60, "operation_answered": 0.95}


def operation_checks(
    records: list[dict[str, Any]], items: list[dict[str, Any]], labels: Sequence[str] = OPERATIONS
) -> list[Check]:
    """Accuracy, balanced recall and answer rate of operation labels against the calibration labels.

    ``records[i]`` holds the arm's label (``op``) and whether it fell back for ``items[i]``; a pair
    whose call failed counts as wrong and unanswered."""
    pairs = list(zip(records, items, strict=False))
    right = [not failed(r) and r["op"] == pair["label"] and not r["fallback"] for r, pair in pairs]
    answered = [not failed(r) and not r["fallback"] for r, _ in pairs]
    given = Counter(r["op"] if not r["fallback"] else "no label" for r, _ in pairs if not failed(r))
    given_text = ", ".join(f"{k} {v}" for k, v in given.most_common())
    wrong = [
        {"m": r["m"], "s": r["s"], "expected": r["gold"], "got": r["op"], "raw": r["raw"][:120]}
        for (r, _), ok in zip(pairs, right, strict=True)
        if not ok and not failed(r)
    ]
    errors = sum(failed(r) for r, _ in pairs)
    note = f"; {errors} call(s) failed" if errors else ""
    # Balanced recall: the mean over the labels of the share of each label's pairs labelled right.
    planned = Counter(pair["label"] for pair in items)
    seen = Counter(pair["label"] for _, pair in pairs)
    hits = Counter(pair["label"] for (_, pair), ok in zip(pairs, right, strict=True) if ok)
    recall = {label: hits[label] / seen[label] if seen[label] else 0.0 for label in labels}
    lo = sum(hits[label] / planned[label] if planned[label] else 0.0 for label in labels) / len(labels)
    hi = sum(
        (hits[label] + planned[label] - seen[label]) / planned[label] if planned[label] else 0.0 for label in labels
    ) / len(labels)
    complete = len(pairs) >= len(items)
    return [
        rate(
            "operation_accuracy",
            OPERATION_THRESHOLDS["operation_accuracy"],
            [float(ok) for ok in right],
            len(items),
            f"{sum(right)} of {len(pairs)} labelled pairs right (answers: {given_text}){note}",
            wrong,
        ),
        bounded(
            "operation_balanced_recall",
            OPERATION_THRESHOLDS["operation_balanced_recall"],
            lo if complete else sum(recall.values()) / len(labels),
            lo,
            hi,
            len(pairs),
            len(items),
            f"mean recall over {'/'.join(labels)}: "
            + ", ".join(f"{label} {recall[label]:.2f}" for label in labels)
            + f" (one label for every pair scores {1 / len(labels):.2f})",
            wrong,
        ),
        rate(
            "operation_answered",
            OPERATION_THRESHOLDS["operation_answered"],
            [float(ok) for ok in answered],
            len(items),
            f"{sum(answered)} of {len(pairs)} replies had an operation label",
            [w for w in wrong if w["got"] == "APPEND"][:3],
        ),
    ]


def written_checks(
    records: list[dict[str, Any]], items: list[dict[str, Any]], noun: str, names: dict[str, tuple[str, float]]
) -> list[Check]:
    """For what an arm wrote from each calibration dialogue (``record["written"]``, a list of texts),
    like the summary checks. ``names`` maps "not_empty", "kept", "copy", "no_bot" to the (check name,
    threshold) to run; ``items`` are the calibration dialogues."""
    n_inf = len(informative_dialogues())
    informative = [(r, d) for r, d in zip(records, items, strict=False) if d["facts"]]

    def text(r: dict[str, Any]) -> str:
        return "\n".join(r["written"])

    def stored(r: dict[str, Any]) -> bool:
        return not failed(r) and bool(r["written"])

    def example(r: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
        if failed(r):
            return {"dialogue": d["id"], "error": r["error"]}
        return {
            "dialogue": d["id"],
            "written": r["written"][:5],
            "rejected": r["trace"].get("rejected", [])[:3],
            "fallbacks": fallback_reasons(r["trace"]),
        }

    kept = [facts_kept(text(r), d["facts"]) if stored(r) else 0.0 for r, d in informative]
    clean = [stored(r) and not copies(text(r), dialogue_text(d)) for r, d in informative]
    no_bot = [stored(r) and not any(mentions(text(r), [b]) for b in d["bot_facts"]) for r, d in informative]
    seen = len(informative)
    checks = []
    if "not_empty" in names:
        name, threshold = names["not_empty"]
        made = [stored(r) for r, _ in informative]
        checks.append(
            rate(
                name,
                threshold,
                [float(x) for x in made],
                n_inf,
                f"{sum(made)} of {seen} informative dialogues left {noun} after validation",
                [example(r, d) for (r, d), ok in zip(informative, made, strict=True) if not ok],
            )
        )
    name, threshold = names["kept"]
    checks.append(
        rate(
            name,
            threshold,
            kept,
            n_inf,
            f"mean share of the labelled facts found in {noun}: {sum(kept) / max(1, seen):.2f}",
            [example(r, d) for (r, d), k in zip(informative, kept, strict=True) if k < 1],
            binary=False,
        )
    )
    if "copy" in names:
        name, threshold = names["copy"]
        checks.append(
            rate(
                name,
                threshold,
                [float(x) for x in clean],
                n_inf,
                f"{sum(clean)} of {seen} dialogues have {noun} that does not copy the dialogue",
                [example(r, d) for (r, d), ok in zip(informative, clean, strict=True) if not ok],
            )
        )
    name, threshold = names["no_bot"]
    checks.append(
        rate(
            name,
            threshold,
            [float(x) for x in no_bot],
            n_inf,
            f"{sum(no_bot)} of {seen} dialogues have {noun} that does not give what the bot said about itself "
            "as facts about the user",
            [example(r, d) for (r, d), ok in zip(informative, no_bot, strict=True) if not ok],
        )
    )
    return checks


def summary_checks(
    records: Sequence[dict[str, Any]],
    items: Sequence[dict[str, Any]],
    *,
    names: tuple[str, str, str],
    thresholds: Mapping[str, float],
    noun: tuple[str, str],
    text: Callable[[dict[str, Any]], str],
    usable: Callable[[dict[str, Any]], bool],
    example: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
    unusable: str = "",
) -> list[Check]:
    """The checks "not empty", "facts kept" and "not a copy" of one summary per calibration dialogue
    (LD-Agent's event summaries, MemoryBank's day summaries).

    ``names`` are the three checks' names in that order, each with its threshold in ``thresholds``;
    ``noun`` is the summary's (singular, plural) name in the checks' explanations; ``text(record)`` is
    the summary, ``usable(record)`` whether the arm produced one (not failed, not a fallback);
    ``example(record, dialogue)`` is what a failing item shows; ``unusable`` ends the first check's
    explanation (what the arm stores instead). Every planned item counts: one not yet run or failed
    scores 0."""
    one, many = noun
    not_empty, kept_name, not_a_copy = names
    n = len(items)
    pairs = list(zip(records, items, strict=False))
    made = [usable(r) for r, _ in pairs]
    kept = [facts_kept(text(r), d["facts"]) if ok else 0.0 for (r, d), ok in zip(pairs, made, strict=True)]
    clean = [ok and not copies(text(r), dialogue_text(d)) for (r, d), ok in zip(pairs, made, strict=True)]
    return [
        rate(
            not_empty,
            thresholds[not_empty],
            [float(x) for x in made],
            n,
            f"{sum(made)} of {len(pairs)} {many} were usable{unusable}",
            [example(r, d) for (r, d), ok in zip(pairs, made, strict=True) if not ok],
        ),
        rate(
            kept_name,
            thresholds[kept_name],
            kept,
            n,
            f"mean share of the labelled facts in the {one}: {sum(kept) / max(1, len(pairs)):.2f}",
            [example(r, d) for (r, d), k, ok in zip(pairs, kept, made, strict=True) if ok and k < 1],
            binary=False,
        ),
        rate(
            not_a_copy,
            thresholds[not_a_copy],
            [float(x) for x in clean],
            n,
            f"{sum(clean)} of {len(pairs)} {many} are usable and do not copy the dialogue",
            [example(r, d) for (r, d), ok in zip(pairs, clean, strict=True) if not ok],
        ),
    ]
