"""A judge's admission test on its study's judge sample, and the figures the report shows with its scores.

For each slider statement, the sample's annotators' scores and the judge's (standard rubric, the newest
prompt text it scored with) become one long table (item, rater, score, arm) for
:func:`analysis.judging.admission`: the alt-test with Benjamini-Yekutieli over annotators, Krippendorff's
alpha of the humans and of the judge, and Kendall's tau of the two arm orderings with a bootstrap CI.
A judge is admitted for a statement when that statement's test passes; it is admitted for the study when
it is admitted for every statement. Reversed statements are compared as scored (the judge saw the same
wording as the annotators).

Probe answers are a task of their own, tested apart (``probes`` in the verdict): the sample's probe answers,
labelled by the annotators 0-100 on :data:`judges.sample.PROBE_STATEMENT` and by the judge CORRECT (100) or
WRONG (0) with the probe prompt, go through the same test; a judge is admitted for probe answers
(``probes_admitted``) when that test passes, whatever its verdict on sessions, and only then are its verdicts
on free-text facts used in the study's probe tables.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.judging import JUDGE, admission
from annotation.models import Label, Queue
from judges.models import Judge, JudgeScore, ProbeJudgement
from judges.prompts import load
from judges.sample import PROBE_METRIC


def human_scores(queue: Queue) -> pd.DataFrame:
    """The sample's labels of sessions: one row per (session, annotator, statement)."""
    rows = []
    for meta, who, scores in Label.objects.filter(item__queue=queue).values_list(
        "item__meta", "annotator_id", "scores"
    ):
        if "probe" in meta:
            continue
        for key, value in (scores or {}).items():
            rows.append({"session": meta.get("session"), "arm": meta.get("arm", ""), "rater": f"a{who}",
                         "metric": key, "score": float(value)})  # fmt: skip
    return pd.DataFrame(rows, columns=["session", "arm", "rater", "metric", "score"])


def human_probe_scores(queue: Queue) -> pd.DataFrame:
    """The sample's labels of probe answers: one row per (probe, annotator), the score 0-100."""
    rows = []
    for meta, who, scores in Label.objects.filter(item__queue=queue, item__meta__has_key="probe").values_list(
        "item__meta", "annotator_id", "scores"
    ):
        if PROBE_METRIC in (scores or {}):
            rows.append({"item": f"probe-{meta['probe']}", "arm": meta.get("arm", ""), "rater": f"a{who}",
                         "score": float(scores[PROBE_METRIC])})  # fmt: skip
    return pd.DataFrame(rows, columns=["item", "arm", "rater", "score"])


def probe_verdicts(judge: Judge) -> dict[int, bool | None]:
    """The judge's verdicts on probe answers under the current probe prompt text: probe id -> label."""
    prompt = load("probe", "standard")
    return dict(
        ProbeJudgement.objects.filter(judge=judge, prompt_sha256=prompt.sha256).values_list("probe_id", "label")
    )


def probe_admission(judge: Judge, queue: Queue | None, *, n_boot: int = 2000) -> dict[str, Any] | None:
    """The admission test on the sample's probe answers (None when the sample has none labelled)."""
    if queue is None:
        return None
    humans = human_probe_scores(queue)
    if humans.empty:
        return None
    verdicts = probe_verdicts(judge)
    arms = dict(zip(humans["item"], humans["arm"], strict=True))
    labels = {item: verdicts.get(int(item.removeprefix("probe-"))) for item in arms}
    judged = [{"item": item, "arm": arms[item], "rater": JUDGE, "score": 100.0 if label else 0.0}
              for item, label in labels.items() if label is not None]  # fmt: skip
    table = pd.concat([humans, pd.DataFrame(judged, columns=["item", "arm", "rater", "score"])], ignore_index=True)
    result = admission(table, epsilon=judge.epsilon, n_boot=n_boot)
    result["prompt"] = load("probe", "standard").name
    return result


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
                "statements": {}, "probes": None, "probes_admitted": False}  # fmt: skip
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
    probes = probe_admission(judge, queue, n_boot=n_boot)
    return {"admitted": bool(per) and not reasons, "reasons": reasons, "statements": per,
            "queue": queue.pk, "epsilon": judge.epsilon, "probes": probes,
            "probes_admitted": bool(probes and probes["admitted"])}  # fmt: skip
