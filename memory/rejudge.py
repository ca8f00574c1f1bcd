"""Judge sensitivity of ``python -m memory eval``: the run's stored answers re-judged under other rubrics and by a
second judge model, with each judge's false-acceptance rate on the leniency control set beside its scores.

``--rejudge lenient,strict`` re-labels every answer under the rubric files ``answer-{rubric}-v1.txt``
(memory/judgeprompts.py; ``standard`` is there too) with the run's judge model; ``--second-judge-model M``
labels them with model M (same backend and endpoint) under the run's own prompt (mem0's) and under each
``--rejudge`` rubric. No answer is generated again: the answers are the run's items (from its results file
when it is resumed), and every verdict is written to the results file as it is made, so a re-run asks the
judge only for what is missing. Questions whose right answer is an abstention (LoCoMo's adversarial category,
GVD's unanswerable) are judged with the abstention rubric (memory/evalscore.py) under every variant: the
rubrics differ in how they read an answer against a gold answer.

Each variant (judge model x rubric) gives J per category and overall (the headline categories, as the run's),
its unreadable verdicts (counted as WRONG, as the run's), and its leniency: the control set's 30 gold and 30
wrong-but-on-topic answers (memory/leniency.py) under the same prompt. ``range`` is the lowest and highest J
per category and overall over the variants.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memory import leniency
from memory.evaljournal import EvaluationStopped, Journal
from memory.evalscore import ABSTENTION_PROMPT, EXCLUDED_FROM_HEADLINE, JUDGE_PROMPT, ask_label
from memory.judgeprompts import Prompt, load, of_text
from memory.llm import LLM, LLMError

RUBRICS = ("standard", "lenient", "strict")  # the answer-*-v1.txt prompt files
RUN_RUBRIC = "mem0"  # the run's own judge prompt (mem0's ACCURACY_PROMPT)
RUN_PROMPT = of_text("mem0 ACCURACY_PROMPT (memory/evalscore.py JUDGE_PROMPT)", JUDGE_PROMPT)
ABSTENTION = of_text("memeval abstention rubric (memory/evalscore.py ABSTENTION_PROMPT)", ABSTENTION_PROMPT)
NOTE = (
    "Every answer of the run re-judged (no answer generated again): J per variant (judge model x rubric), the range "
    "per category and overall, and each variant's false-acceptance rate on the leniency control set (30 wrong but "
    "on-topic answers; gold acceptance beside it). Abstention questions keep the abstention rubric in every variant."
)
Progress = Callable[[int, int, str], None]


def parse_rubrics(text: str | Sequence[str]) -> list[str]:
    """``"lenient,strict"`` as a list, checked against :data:`RUBRICS` (ValueError naming the unknown ones)."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    unknown = [n for n in names if n not in RUBRICS]
    if unknown:
        raise ValueError(f"unknown rubric(s) {unknown} for --rejudge: choose from {', '.join(RUBRICS)}")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Variant:
    model: str
    rubric: str  # RUN_RUBRIC or one of RUBRICS
    judge: LLM | None  # None: the run's own verdicts (nothing to call but the control set)

    @property
    def prompt(self) -> Prompt:
        return RUN_PROMPT if self.rubric == RUN_RUBRIC else load("answer", self.rubric)

    def text(self, question: str, gold: str, answer: str, *, abstain: bool, trap: str) -> str:
        if abstain:
            return ABSTENTION.render(question=question, trap=trap or "(none given)", generated_answer=answer)
        if self.rubric == RUN_RUBRIC:
            return self.prompt.render(question=question, gold_answer=gold, generated_answer=answer)
        return self.prompt.render(question=question, gold=gold, answer=answer)


def _label(judge: LLM, text: str) -> tuple[int | None, str]:
    return ask_label(judge, text, purpose="rejudge")


def _control_labeller(variant: Variant, model: LLM) -> Callable[[leniency.ControlCase], int | None]:
    """The verdict of ``model`` under ``variant``'s prompt on one case of the leniency control set."""

    def label(case: leniency.ControlCase) -> int | None:
        return _label(model, variant.text(case.question, case.gold, case.answer, abstain=False, trap=""))[0]

    return label


def _j(labels: Sequence[int | None]) -> float | None:
    return round(sum(v or 0 for v in labels) / len(labels), 4) if labels else None


def _span(values: Sequence[float | None]) -> dict[str, Any] | None:
    got = [v for v in values if v is not None]
    if not got:
        return None
    return {"min": min(got), "max": max(got), "spread": round(max(got) - min(got), 4), "variants": len(got)}


def sensitivity(
    result: dict[str, Any],
    journal: Journal,
    *,
    judge: LLM,
    judge_model: str,
    rubrics: Sequence[str],
    second: LLM | None = None,
    second_model: str = "",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The ``sensitivity`` section of a finished run's ``result`` (its ``items`` are the answers). ``judge`` is
    the run's judge model (named ``judge_model``), ``second`` the second judge (``second_model``); ``rubrics``
    the rubric files to re-judge under. Raises :class:`EvaluationStopped` (with the journal, which keeps every
    verdict made) when a judge call fails after its retries."""
    variants = [Variant(judge_model, RUN_RUBRIC, None)] + [Variant(judge_model, r, judge) for r in rubrics]
    if second is not None:
        variants += [Variant(second_model, r, second) for r in (RUN_RUBRIC, *rubrics)]
    items = result.get("items", [])
    done = {
        (r["model"], r["prompt_sha256"], r["dialogue"], r["qid"]): r
        for r in journal.records
        if r.get("kind") == "rejudge"
    }
    controls = {(r["model"], r["prompt_sha256"]): r["leniency"] for r in journal.records if r.get("kind") == "control"}
    cases = leniency.control_cases()
    calls_total = sum(len(items) for v in variants if v.judge is not None) + len(variants) * len(cases)
    calls = 0
    out: list[dict[str, Any]] = []
    try:
        for v in variants:
            labels: dict[str, list[int | None]] = defaultdict(list)
            headline: list[int | None] = []
            unparsed = 0
            for item in items:
                abstain = item.get("judge_rubric") == "abstention"
                if v.judge is None:  # the run's own verdict
                    label: int | None = item.get("judge") if item.get("judge_parsed", True) else None
                else:
                    key = (v.model, v.prompt.sha256, item["dialogue"], item["qid"])
                    if key not in done:
                        text = v.text(item["question"], item["gold"], item.get("scored_answer", item["answer"]),
                                      abstain=abstain, trap=item.get("trap", ""))  # fmt: skip
                        got, raw = _label(v.judge, text)
                        done[key] = {"kind": "rejudge", "model": v.model, "rubric": v.rubric,
                                     "prompt": v.prompt.name, "prompt_sha256": v.prompt.sha256,
                                     "dialogue": item["dialogue"], "qid": item["qid"], "label": got,
                                     "raw": raw[:2000]}  # fmt: skip
                        journal.add(done[key])
                        calls += 1
                        if progress:
                            progress(calls, calls_total, f"re-judged {item['qid']} ({v.model}, {v.rubric})")
                    label = done[key]["label"]
                unparsed += label is None
                labels[item["category"]].append(label)
                if item["category"] not in EXCLUDED_FROM_HEADLINE:
                    headline.append(label)
            control_key = (v.model, v.prompt.sha256)
            if control_key not in controls:
                controls[control_key] = leniency.leniency(_control_labeller(v, v.judge or judge), cases)
                journal.add({"kind": "control", "model": v.model, "rubric": v.rubric,
                             "prompt_sha256": v.prompt.sha256, "leniency": controls[control_key]})  # fmt: skip
                calls += len(cases)
                if progress:
                    progress(calls, calls_total, f"leniency control set ({v.model}, {v.rubric})")
            out.append({
                "judge_model": v.model, "rubric": v.rubric, "prompt": v.prompt.name,
                "prompt_sha256": v.prompt.sha256, "source": "run" if v.judge is None else "re-judged",
                "overall": _j(headline), "categories": {c: _j(ls) for c, ls in sorted(labels.items())},
                "unparsed": unparsed, "leniency": controls[control_key],
            })  # fmt: skip
    except LLMError as exc:
        raise EvaluationStopped(
            f"re-judging stopped after {calls} of {calls_total} judge calls: {type(exc).__name__}: {exc}",
            journal=journal, done=calls, total=calls_total,
        ) from exc  # fmt: skip
    categories = sorted({c for v in out for c in v["categories"]})
    return {
        "rubrics": list(rubrics),
        "judge_model": judge_model,
        "second_judge_model": second_model or None,
        "note": NOTE,
        "variants": out,
        "range": {
            "overall": _span([v["overall"] for v in out]),
            "categories": {c: _span([v["categories"].get(c) for v in out]) for c in categories},
        },
    }


def render_markdown(section: dict[str, Any]) -> str:
    """The sensitivity section as Markdown: one row per variant (J per category and overall, the control
    set's false-acceptance rate beside it), then the range."""

    def fmt(x: Any) -> str:
        return "-" if x is None else f"{x:.3f}"

    def rate(a: dict[str, Any]) -> str:
        if a.get("rate") is None:
            return "-"
        return f"{a['rate']:.2f} [{a['ci_low']:.2f}, {a['ci_high']:.2f}]"

    categories = list(section["range"]["categories"])
    head = ["judge model", "rubric", "prompt sha256", *categories, "overall", "unread", "false acceptance (95% CI)",
            "gold accepted"]  # fmt: skip
    lines = ["", "## Judge sensitivity", "", section["note"], "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]  # fmt: skip
    for v in section["variants"]:
        cells = [v["judge_model"], v["rubric"] + (" (the run's)" if v["source"] == "run" else ""),
                 v["prompt_sha256"][:12], *(fmt(v["categories"].get(c)) for c in categories), fmt(v["overall"]),
                 str(v["unparsed"]), rate(v["leniency"]["false_acceptance"]),
                 rate(v["leniency"]["gold_acceptance"])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    span = section["range"]

    def cell(s: dict[str, Any] | None) -> str:
        return "-" if s is None else f"{s['min']:.3f}-{s['max']:.3f}"

    lines.append("| **range** | | | " + " | ".join(cell(span["categories"][c]) for c in categories)
                 + f" | {cell(span['overall'])} | | | |")  # fmt: skip
    return "\n".join(lines) + "\n"
