"""The researcher's per-worker quality page: QC test, attention checks, authenticity signals and timing."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from chat import pii
from chat.authenticity import FLAG_LABELS, PASTE_SHARE_FLAG, TYPING_CPS_FLAG, UNTYPED_SHARE_FLAG
from chat.quality import TOO_FAST_SD, median_minutes, silent_sessions, study_quality
from reports.queries import study_qc_arm
from reports.reporting import qc_waiting_text
from reports.views import _report
from studies.roles import researcher_required, study_for


@require_GET
@researcher_required
def quality(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug)
    records = study_quality(study)
    report = _report(request, study, None)  # the dashboard's unfiltered analysis (cached): its QC section
    qc: dict[str, Any] = (report.result or {}).get("qc") or {}
    reasons = qc.get("failed_reasons") or {}
    by_worker = {w["worker"]: w for w in qc.get("workers") or []}
    for r in records:
        entry = by_worker.get(r.worker)
        if entry is not None:
            r.qc = {"passed": entry["passed"], "p": entry["p"], "reason": reasons.get(r.worker, "")}
    if request.GET.get("flagged"):
        records = [r for r in records if r.reasons()]
    context = {
        "study": study,
        "records": records,
        "only_flagged": bool(request.GET.get("flagged")),
        "qc_arm": qc.get("arm") or study_qc_arm(study),
        "qc_waiting": qc_waiting_text(report.qc_waiting) if report.qc_waiting else "",
        "n_flagged": sum(1 for r in records if r.reasons()),
        "median_minutes": median_minutes(records),
        "silent": silent_sessions(study),
        "is_owner": study.is_owner(request.user),
        "privacy_events": study.privacy_events.select_related("by")[:50],
        "pii_flags": pii.study_flags(study.pk),
        "pii_unscanned": len(pii.unscanned_sessions(study.pk)) if study.flag_personal_data else 0,
        "can_change": study.can_change(request.user),
        "thresholds": {
            "paste": PASTE_SHARE_FLAG,
            "cps": TYPING_CPS_FLAG,
            "untyped": UNTYPED_SHARE_FLAG,
            "too_fast_sd": TOO_FAST_SD,
            "labels": FLAG_LABELS,
        },
    }
    return render(request, "reports/quality.html", context)
