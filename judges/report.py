"""The study's automatic-judges report: each judge's admission figures, its scores (only when admitted),
their sensitivity (rubrics, a second judge model, the leniency control set), the blinding breaches, and
the human and automatic orderings of the arms side by side with Kendall's tau and bootstrap CIs.

``study_judges_report(study)`` returns a JSON-ready dict (its keys are documented in docs/analysis.md,
"Automatic judges"); the page and the JSON download show the same dict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.judging import arm_order_tau, sensitivity_range
from annotation.models import Item
from chat.models import Rating
from judges.admission import admission_of, judge_scores, probe_verdicts
from judges.blinding import non_blind_per_arm, non_blind_sessions
from judges.jobs import rubrics_of
from judges.models import Judge
from judges.prompts import load
from judges.sample import sample_queue
from reports.queries import automatic_scores
from studies.models import Study


def human_sessions(study: Study, *, exclude: set[int]) -> pd.DataFrame:
    """Per rated session outside the QC arm: its arm and the worker's mean z-score over the statements
    (each worker's scores standardised over all they gave, reversed statements flipped), silent and
    non-blind sessions left out."""
    rows = Rating.objects.filter(session__episode__participant__study=study).values_list(
        "session_id", "session__episode__participant_id", "session__episode__arm__name", "session__episode__arm__is_qc",
        "metric__reversed", "value", "session__silent",
    )  # fmt: skip
    frame = pd.DataFrame(list(rows), columns=["session", "worker", "arm", "qc", "reversed", "score", "silent"])
    if frame.empty:
        return pd.DataFrame(columns=["session", "arm", "human"])
    frame["score"] = np.where(frame["reversed"], 100 - frame["score"].astype(float), frame["score"].astype(float))
    moments = frame.groupby("worker")["score"].agg(["mean", "std"])
    frame["z"] = (frame["score"] - frame["worker"].map(moments["mean"])) / (frame["worker"].map(moments["std"]) + 1e-6)
    kept = frame[~frame["qc"] & ~frame["silent"] & ~frame["session"].isin(exclude)]
    out = kept.groupby(["session", "arm"])["z"].mean().reset_index(name="human")
    return out


def _overall(scores: pd.DataFrame, reversed_keys: set[str]) -> pd.DataFrame:
    """Per session, the judge's mean over statements (reversed ones flipped, as the human side)."""
    if scores.empty:
        return pd.DataFrame(columns=["session", "arm", "judge"])
    s = scores.dropna(subset=["score"]).copy()
    s["score"] = np.where(s["metric"].isin(reversed_keys), 100 - s["score"], s["score"])
    out = s.groupby(["session", "arm"])["score"].mean().reset_index(name="judge")
    return out


def study_judges_report(study: Study, *, n_boot: int = 2000, include_non_blind: bool = False) -> dict[str, Any]:
    queue = sample_queue(study)
    reversed_keys = set(study.metrics.filter(reversed=True).values_list("key", flat=True))
    excluded = set() if include_non_blind else non_blind_sessions(study)
    humans = human_sessions(study, exclude=excluded)
    judges_out = []
    table_rows: dict[str, dict[str, Any]] = {arm: {"arm": arm} for arm in sorted(humans["arm"].unique())}
    for arm, z in humans.groupby("arm")["human"].mean().items():
        table_rows[str(arm)]["human_z"] = float(z)
        table_rows[str(arm)]["human_sessions"] = int((humans["arm"] == arm).sum())
    orderings = []
    for judge in Judge.objects.filter(study=study).order_by("created_at", "id"):
        verdict = admission_of(judge, queue, n_boot=n_boot)
        entry: dict[str, Any] = {
            "id": judge.pk, "name": judge.name, "model": judge.model, "base_url": judge.base_url,
            "status": judge.status, "progress": judge.progress, "error": judge.error,
            "admission": verdict, "leniency": judge.leniency, "admitted": verdict["admitted"],
        }  # fmt: skip
        means_by_rubric: dict[str, dict[str, float]] = {}
        for rubric in rubrics_of(judge):
            per_session = _overall(judge_scores(judge, rubric), reversed_keys)
            per_session = per_session[~per_session["session"].isin(excluded)]
            if len(per_session):
                means_by_rubric[rubric] = {
                    str(a): float(m) for a, m in per_session.groupby("arm")["judge"].mean().items()
                }
            if rubric == "standard" and verdict["admitted"] and len(per_session):
                both = humans.merge(per_session, on=["session", "arm"])
                tau = arm_order_tau(both, "human", "judge", n_boot=n_boot)
                orderings.append({"automatic": f"judge {judge.name}", "tau": tau})
                for arm, mean in means_by_rubric[rubric].items():
                    table_rows.setdefault(arm, {"arm": arm})[f"judge {judge.name}"] = mean
        entry["scores"] = means_by_rubric if verdict["admitted"] else None  # only an admitted judge's scores
        verdicts = probe_verdicts(judge)
        entry["probes"] = {
            "admitted": verdict["probes_admitted"], "admission": verdict["probes"], "judged": len(verdicts),
            "unreadable": sum(1 for v in verdicts.values() if v is None), "prompt": load("probe", "standard").name,
        }  # fmt: skip
        entry["sensitivity"] = sensitivity_range(means_by_rubric) if verdict["admitted"] else None
        judges_out.append(entry)
    for row in automatic_scores(study):
        arm = row["arm"]
        for key in ("f1", "judge"):
            if row.get(key) is not None:
                column = f"memory eval {row.get('dataset') or ''} {key}".replace("  ", " ")
                table_rows.setdefault(arm, {"arm": arm})[column] = float(row[key])
    columns = sorted({c for r in table_rows.values() for c in r} - {"arm", "human_z", "human_sessions"})
    for column in columns:
        if column.startswith("memory eval"):
            fixed = {arm: r[column] for arm, r in table_rows.items() if column in r}
            frame = humans[humans["arm"].isin(fixed)]
            frame = frame.assign(auto=frame["arm"].map(fixed))
            orderings.append({"automatic": column, "tau": arm_order_tau(frame, "human", "auto", n_boot=n_boot)})
    second = [j for j in judges_out if j["admitted"] and j["scores"]]
    return {
        "study": study.pk,
        "sample_queue": queue.pk if queue else None,
        "sample_probes": Item.objects.filter(queue=queue, meta__has_key="probe").count() if queue else 0,
        "judges": judges_out,
        "table": {"columns": ["arm", "human_z", "human_sessions", *columns], "rows": list(table_rows.values())},
        "orderings": orderings,
        "judge_models": sensitivity_range(
            {j["name"]: j["scores"]["standard"] for j in second if "standard" in j["scores"]}
        ),
        "non_blind": {
            "excluded": not include_non_blind,
            "sessions": len(non_blind_sessions(study)),
            "per_arm": non_blind_per_arm(study),
        },  # fmt: skip
    }
