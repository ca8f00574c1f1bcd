"""The result of ``python -m memory eval``: scores per category and overall, costs, and the report.

:func:`summarize` builds the JSON-serialisable result from a run's journal (what every session and
question recorded); :func:`render_markdown` prints it. Warnings come first: a stand-in model's scores
measure nothing about the arm, and GVD's gold answers are memeval's own.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memory import locomo
from memory.evalscore import EXCLUDED_FROM_HEADLINE, RUBRICS
from memory.llm import LLM

if TYPE_CHECKING:
    from memory.evaluation import EvalDialogue, Journal, Question, Scoring


GVD_GOLD_NOTE = (
    "GVD's gold answers were written for memeval (memory/data/gvd/answers_en.jsonl); MemoryBank scored its "
    "probing questions with human annotators, so these scores are not comparable with MemoryBank's."
)

F1_NAMES = {
    "f1": "set F1: set-based token F1 of mem0's and A-Mem's LoCoMo scripts (evaluation/metrics/utils.py)",
    "locomo_f1": f"LoCoMo F1: LoCoMo's reference scorer ({locomo.REFERENCE}): normalised, Porter-stemmed token F1, "
    "multi-hop answers split on commas, adversarial answers right when they abstain",
}

GVD_CATEGORY_SOURCE = "memory/data/gvd/README.md: categories assigned by memeval with its gold answers"


def stand_in_warning(backend: str, model: str) -> str | None:
    """The warning for scores from a model that cannot do the task, or None for a real model."""
    if backend == "scripted":
        return (
            "Stand-in model (scripted: it echoes the question, and the judge is F1 >= 0.5): these scores "
            "measure nothing about the arm."
        )
    if backend == "local":
        return (
            f"Embedded demo model ({model}): it cannot do the arms' memory tasks or judge answers, so these "
            "scores measure nothing about the arm."
        )
    return None


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 1)


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """n, both F1s and J of some answers; an unreadable verdict counts as WRONG (``judge_unparsed``)."""
    parsed = sum(1 for r in rows if r.get("judge_parsed", r.get("judge") is not None))
    return {
        "n": len(rows),
        "f1": _mean([r["f1"] for r in rows]),
        "locomo_f1": _mean([r["locomo_f1"] for r in rows if r.get("locomo_f1") is not None]),
        "judge": _mean([r["judge"] or 0 for r in rows]),
        "judged": parsed,
        "judge_unparsed": len(rows) - parsed,
    }


def _cost(calls: list[dict[str, Any]]) -> dict[str, Any]:
    reported = [c["prompt_tokens"] for c in calls if c.get("prompt_tokens")]
    completion = [c["completion_tokens"] for c in calls if c.get("completion_tokens")]
    return {
        "calls": len(calls),
        "errors": sum(1 for c in calls if c.get("error")),
        "prompt_tokens": sum(reported) if reported else None,
        "completion_tokens": sum(completion) if completion else None,
        "approx_prompt_tokens": sum(c.get("approx_prompt_tokens") or 0 for c in calls),
    }


def _group(calls: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in calls:
        groups[c[key]].append(c)
    return {k: _cost(v) for k, v in sorted(groups.items())}


def _category_map(dataset: str, name: str, questions: list[Question]) -> dict[str, Any]:
    counts: dict[Any, int] = defaultdict(int)
    if dataset == "locomo":
        for q in questions:
            counts[q.code] += 1
        spec = locomo.CATEGORY_MAPS[name]
        rows = [
            {"code": code, "name": spec["names"].get(code, str(code)), "count": counts[code]}
            for code in sorted(c for c in counts if c is not None)
        ]
        return {"name": name, "source": spec["source"], "categories": rows}
    for q in questions:
        counts[q.category] += 1
    return {
        "name": "gvd",
        "source": GVD_CATEGORY_SOURCE,
        "categories": [{"name": c, "count": n} for c, n in sorted(counts.items())],
    }


def summarize(
    journal: Journal,
    plan: Sequence[tuple[EvalDialogue, Sequence[Any], Sequence[Question]]],
    *,
    arm: str,
    dataset: str,
    judge: LLM | None,
    info: dict[str, Any],
    scoring: Scoring,
) -> dict[str, Any]:
    """The result dict of a finished run (docs/memory-systems.md, "Automatic evaluation")."""
    info = dict(info)
    answered = {(r["dialogue"], r["qid"]): r for r in journal.records if r.get("kind") == "question"}
    sessions = {(r["dialogue"], r["session"]): r for r in journal.records if r.get("kind") == "session"}
    items: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    questions: list[Question] = []
    for d, replayed, asked in plan:
        steps += [sessions[(d.name, k)] for k in range(len(replayed)) if (d.name, k) in sessions]
        for q in asked:
            record = answered[(d.name, q.qid)]
            items.append(record["item"])
            steps.append(record)
            questions.append(q)
    session_steps = [s for s in steps if s.get("kind") == "session"]
    calls = [c for s in steps for c in s.get("calls", [])]
    turn_tokens = [t for s in steps for t in s.get("turn_tokens", [])]
    update_ms = [s["update_ms"] for s in session_steps]
    memory_calls = sum(1 for c in calls if c["phase"] in ("memory_turn", "memory_session"))

    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_category[item["category"]].append(item)
    headline = [r for r in items if r["category"] not in EXCLUDED_FROM_HEADLINE]
    primary = "locomo_f1" if scoring.primary == "locomo" else "f1"
    stand_in = info.pop("stand_in", None)
    warnings = [w for w in (stand_in, info["dataset_check"].get("warning")) if w]
    if dataset == "gvd":
        warnings.append(GVD_GOLD_NOTE)
    retries = info.pop("retries", [])
    exclusions = info.pop("gold_exclusions", {"files": [], "ids": 0})
    category_map = _category_map(dataset, info.pop("category_map", "locomo"), questions)
    result: dict[str, Any] = {
        "arm": arm,
        "dataset": dataset,
        "warnings": warnings,
        "stand_in_model": stand_in is not None,
        **info,
        "memory_update_fallbacks": sum(int(s.get("fallbacks", 0)) for s in session_steps),
        "judge": {
            "model": getattr(judge, "model", None),
            "stand_in": judge is None,
            "prompt": "mem0 ACCURACY_PROMPT (evaluation/metrics/llm_judge.py)",
            "prompts": RUBRICS,
            "unparsed": sum(1 for r in items if not r.get("judge_parsed", True)),
        },
        "f1_metrics": {"primary": primary, **F1_NAMES},
        "category_map": category_map,
        "dialogues": len({r["dialogue"] for r in items}),
        "questions": len(items),
        "overall": scores(headline),
        "all_questions": scores(items),
        "excluded_from_overall": sorted(EXCLUDED_FROM_HEADLINE & set(by_category)),
        "categories": {c: scores(rows) for c, rows in sorted(by_category.items())},
        "tokens_per_turn": {
            "mean": _mean(turn_tokens),
            "p95": percentile(turn_tokens, 0.95),
            "turns": len(turn_tokens),
        },
        "latency_ms": {
            "answer": {
                "p50": percentile([r["latency_ms"] for r in items], 0.5),
                "p95": percentile([r["latency_ms"] for r in items], 0.95),
            },
            "memory_update": {"p50": percentile(update_ms, 0.5), "p95": percentile(update_ms, 0.95)},
        },
        "memory_llm_calls_per_session": round(memory_calls / len(session_steps), 4) if session_steps else None,
        "llm_calls": {
            "by_phase": _group(calls, "phase"),
            "by_purpose": _group(calls, "purpose"),
            "total": _cost(calls),
            "retries": {
                "retries": int(sum(s["retries"] for s in retries)),
                "calls_retried": int(sum(s["calls_retried"] for s in retries)),
                "waited_s": round(sum(s["waited_s"] for s in retries), 1),
            },
        },
        "gold_exclusions": {
            **exclusions,
            "matched": sum(1 for r in items if r.get("excluded_gold")),
        },
        "items": items,
    }
    if exclusions["ids"]:
        clean = [r for r in items if not r.get("excluded_gold")]
        result["overall_without_excluded_gold"] = scores([r for r in headline if not r.get("excluded_gold")])
        result["categories_without_excluded_gold"] = {
            c: scores([r for r in rows if not r.get("excluded_gold")]) for c, rows in sorted(by_category.items())
        }
        result["all_questions_without_excluded_gold"] = scores(clean)
    if dataset == "gvd":
        result["gold_note"] = GVD_GOLD_NOTE
    return result


def render_markdown(result: dict[str, Any]) -> str:
    """A short Markdown report of a result dict; its first line is the stand-in warning when there is one."""

    def fmt(x: Any) -> str:
        return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)

    judge = result["judge"]
    primary = result.get("f1_metrics", {}).get("primary", "f1")
    other = "f1" if primary == "locomo_f1" else "locomo_f1"
    label = {"f1": "set F1", "locomo_f1": "LoCoMo F1"}
    lines = [f"**Warning: {w}**" for w in result.get("warnings", []) if w and w != result.get("gold_note")]
    if lines:
        lines.append("")
    lines += [f"# {result['arm']} on {result['dataset']}", ""]
    if result.get("gold_note"):
        lines += [f"Note: {result['gold_note']}", ""]
    check = result.get("dataset_check") or {}
    for f in check.get("files", []):
        lines.append(f"Data: `{f['file']}` sha256 {f['sha256'][:16]}… ({f['release'] or 'not a known release'}).")
    cmap = result.get("category_map") or {}
    if cmap:
        cats = ", ".join(
            (f"{c['code']} = {c['name']}" if "code" in c else c["name"]) + f" ({c['count']})"
            for c in cmap.get("categories", [])
        )
        lines.append(f"Category map `{cmap.get('name')}`: {cats}. Source: {cmap.get('source')}.")
    judge_text = "stand-in (F1 >= 0.5, no model)" if judge["stand_in"] else judge["model"]
    lines += [
        "",
        f"{result['dialogues']} dialogues, {result['questions']} questions. Answer model: "
        f"{result.get('model', '-')}; judge: {judge_text}; embedder: {result.get('embedder', '-')}.",
        f"Scores: **{label[primary]}** (headline) = {F1_NAMES[primary]}; {label[other]} beside it = "
        f"{F1_NAMES[other]}. J = share judged CORRECT ({RUBRICS['answer']}; adversarial and unanswerable "
        f"questions: {RUBRICS['abstention']}); {judge.get('unparsed', 0)} verdicts could not be read and count "
        "as WRONG.",
        "",
        f"| category | n | {label[primary]} | {label[other]} | J | J unread |",
        "|---|---|---|---|---|---|",
    ]

    def row(name: str, s: dict[str, Any]) -> str:
        return (
            f"| {name} | {s['n']} | {fmt(s.get(primary))} | {fmt(s.get(other))} | {fmt(s['judge'])} | "
            f"{s.get('judge_unparsed', 0)} |"
        )

    for name, s in result["categories"].items():
        lines.append(row(name, s))
    excluded = ", ".join(result["excluded_from_overall"]) or "none"
    lines.append(row(f"**overall** (without {excluded})", result["overall"]))
    ex = result.get("gold_exclusions") or {}
    if result.get("overall_without_excluded_gold"):
        lines.append(
            row(f"**overall without known-wrong gold** ({ex.get('matched', 0)} questions left out)",
                result["overall_without_excluded_gold"])
        )  # fmt: skip
    calls = result.get("llm_calls") or {}
    tokens = result["tokens_per_turn"]
    lines += [
        "",
        f"Reply prompt: {fmt(tokens['mean'])} tokens per turn (mean, ~4 characters per token; p95 {fmt(tokens['p95'])}).",
        f"Latency: answer p50 {fmt(result['latency_ms']['answer']['p50'])} ms, p95 "
        f"{fmt(result['latency_ms']['answer']['p95'])} ms; memory update p50 "
        f"{fmt(result['latency_ms']['memory_update']['p50'])} ms, p95 {fmt(result['latency_ms']['memory_update']['p95'])} ms; "
        f"{fmt(result['memory_llm_calls_per_session'])} memory LLM calls per session (after turns and at the end).",
    ]
    if calls:
        lines += [
            "",
            "| LLM calls | calls | errors | prompt tokens (reported) | prompt tokens (~4 chars) |",
            "|---|---|---|---|---|",
        ]
        for group in ("by_phase", "by_purpose"):
            for name, c in calls[group].items():
                lines.append(
                    f"| {group[3:]}: {name} | {c['calls']} | {c['errors']} | {fmt(c['prompt_tokens'])} | "
                    f"{c['approx_prompt_tokens']} |"
                )
        r = calls.get("retries") or {}
        lines.append(
            f"\nRetries of transient LLM errors: {r.get('retries', 0)} (on {r.get('calls_retried', 0)} calls, "
            f"{fmt(r.get('waited_s', 0.0))} s waited)."
        )
    text = "\n".join(lines) + "\n"
    if result.get("sensitivity"):
        from memory.rejudge import render_markdown as sensitivity_markdown  # memory.rejudge imports this module

        text += sensitivity_markdown(result["sensitivity"])
    return text
