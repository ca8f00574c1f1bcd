"""The study's judge of free-text probe answers, for the probe tables of the study report (reports/probejudging.py).

Of the study's judges that scored probe answers, the one admitted on the judge sample's probe answers with the
highest advantage probability (the alt-test's rho) is chosen; when none is admitted, the newest one, reported as
not admitted with its reasons (its verdicts are then kept out of recall).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max

from annotation.models import Label
from judges.admission import probe_admission, probe_verdicts
from judges.models import Judge, ProbeJudgement
from judges.prompts import load
from judges.sample import sample_queue
from studies.models import Study


def figures(admission: dict[str, Any] | None) -> dict[str, Any]:
    """The admission figures shown beside judge-scored probe results."""
    if not admission:
        return {}
    alt = admission.get("alt_test") or {}
    return {
        "items": admission.get("items_complete"),
        "annotators": admission.get("annotators"),
        "alpha_humans": (admission.get("alpha") or {}).get("humans"),
        "alpha_judge_vs_mean": (admission.get("alpha") or {}).get("judge_vs_mean"),
        "winning_rate": alt.get("winning_rate"),
        "advantage_probability": alt.get("advantage_probability"),
        "epsilon": alt.get("epsilon"),
    }


class StudyProbeJudging:
    def judging(self, study: Study) -> dict[str, Any] | None:
        prompt = load("probe", "standard")
        judges = list(
            Judge.objects.filter(study=study, probe_judgements__prompt_sha256=prompt.sha256)
            .distinct()
            .order_by("-created_at", "-id")
        )
        if not judges:
            return None
        queue = sample_queue(study)
        tested = [(judge, probe_admission(judge, queue, n_boot=0)) for judge in judges]
        admitted = [(j, a) for j, a in tested if a and a["admitted"]]
        admission: dict[str, Any] | None
        if admitted:
            judge, admission = max(
                admitted, key=lambda ja: (ja[1].get("alt_test") or {}).get("advantage_probability") or 0
            )
        else:
            judge, admission = tested[0]
        reasons = (admission or {}).get("reasons") or (
            ["the judge sample has no labelled probe answers (draw a sample on the Automatic judges page)"]
        )
        return {
            "judge": judge.name,
            "model": judge.model,
            "prompt": prompt.name,
            "prompt_sha256": prompt.sha256,
            "admitted": bool(admission and admission["admitted"]),
            "admission": figures(admission),
            "reasons": [] if admission and admission["admitted"] else reasons,
            "verdicts": probe_verdicts(judge),
        }

    def version(self, study: Study) -> str:
        judged = ProbeJudgement.objects.filter(judge__study=study).aggregate(n=Count("id"), m=Max("id"))
        labels = Label.objects.filter(item__queue__study=study, item__meta__has_key="probe").aggregate(
            n=Count("id"), m=Max("id")
        )
        return f"j{judged['n']}-{judged['m']}-l{labels['n']}-{labels['m']}"
