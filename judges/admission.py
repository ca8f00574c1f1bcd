"""A judge's admission test on its study's judge sample, and the figures the report shows with its scores.

For each slider statement, the sample's annotators' scores and the judge's (standard rubric, the newest
prompt text it scored with) become one long table (item, rater, score, arm) for
:func:`analysis.judging.admission`: the alt-test with Benjamini-Yekutieli over annotators, Krippendorff's
alpha of the humans and of the judge, and Kendall's tau of the two arm orderings with a bootstrap CI.
A judge is admitted for a statement when that statement's test passes; it is admitted for the study when
it is admitted for every statement. Reversed statements are compared as scored (the judge saw the same
wording as the annotators).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.judging import JUDGE, admission
from annotation.models import Label, Queue
from judges.models import Judge, JudgeScore
from judges.prompts import load


def human_scores(queue: Queue) -> pd.DataFrame:
    """The sample's labels: one row per (session, annotator, statement)."""
    rows = []
    for meta, who, scores in Label.objects.filter(item__queue=queue).values_list(
        "item__meta", "annotator_id", "scores"
    ):
        for key, value in (scores or {}).items():
            rows.append({"session": meta.get("session"), "arm": meta.get("arm", ""), "rater": f"a{who}",
                         "metric": key, "score": float(value)})  # fmt: skip
    return pd.DataFrame(rows, columns=["session", "arm", "rater", "metric", "score"])


def judge_scores(judge: Judge, rubric: str = "standard", sessions: set[int] | None = None) -> pd.DataFrame:
    """The judge's scores under ``rubric`` with the current prompt text (one per session and statement)."""
    prompt = load("session", rubric)
    qs = JudgeScore.objects.filter(judge=judge, rubric=rubric, prompt_sha256=prompt.sha256)
    if sessions is not None:
        qs = qs.filter(session_id__in=sessions)
    rows = qs.values_list("session_id", "session__episode__arm__name", "metric", "score")
    return pd.DataFrame(list(rows), columns=["session", "arm", "metric", "score"])


def admission_of(judge: Judge, queue: Queue | None, *, n_boot: int = 2000) -> dict[str, Any]:
    """Per statement, the admission dict of analysis.judging.admission; ``admitted`` overall."""
    if queue is None:
        return {"admitted": False, "reasons": ["the study has no judge sample yet (draw one on this page)"],
                "statements": {}}  # fmt: skip
    humans = human_scores(queue)
    sessions = {int(s) for s in humans["session"].dropna().unique()}
    judged = judge_scores(judge, sessions=sessions)
    metrics = sorted(set(humans["metric"]) | set(judged["metric"]))
    per: dict[str, Any] = {}
    for metric in metrics:
        h = humans[humans["metric"] == metric][["session", "arm", "rater", "score"]]
        j = judged[judged["metric"] == metric][["session", "arm", "score"]].assign(rater=JUDGE)
        table = pd.concat([h, j], ignore_index=True).rename(columns={"session": "item"})
        table["item"] = table["item"].astype(str)
        per[metric] = admission(table, epsilon=judge.epsilon, n_boot=n_boot)
    reasons = [f"{m}: {r}" for m, result in per.items() for r in result["reasons"]]
    if not per:
        reasons.append("the judge sample has no labels yet")
    return {"admitted": bool(per) and not reasons, "reasons": reasons, "statements": per,
            "queue": queue.pk, "epsilon": judge.epsilon}  # fmt: skip
