"""The researcher's pages for ACUTE-Eval comparisons: the list and the form on a study, a comparison's progress,
link and status, and its votes as CSV or JSON Lines."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from pairwise import exports, services
from pairwise.forms import ComparisonForm
from pairwise.models import Comparison
from studies.models import Study
from studies.roles import AuthenticatedHttpRequest, researcher_required, study_for


def _study(request: HttpRequest, slug: str) -> Study:
    return study_for(request, slug)  # a viewer of the study sees, and changes nothing (403)


@researcher_required
@require_http_methods(["GET", "POST"])
def comparisons(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    form = ComparisonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        form.instance.study = study
        form.instance.created_by = request.user
        comparison = form.save()
        messages.success(request, f"Comparison “{comparison.name}” created as a draft: open it when you are ready.")
        return redirect(comparison)
    items = [(c, services.progress(c)) for c in Comparison.objects.filter(study=study)]
    qc = study.qc_arm()
    return render(request, "pairwise/researcher/list.html", {"study": study, "form": form, "items": items,
                  "has_qc": qc is not None}, status=400 if form.errors else 200)  # fmt: skip


@researcher_required
def detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    study = _study(request, slug)
    comparison = get_object_or_404(Comparison, pk=pk, study=study)
    link = request.build_absolute_uri(reverse("pairwise:entry", args=[comparison.slug]))
    return render(request, "pairwise/researcher/detail.html", {
        "study": study, "comparison": comparison, "progress": services.progress(comparison),
        "prolific_link": link + "?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}",
        "annotator_link": request.build_absolute_uri(reverse("pairwise:annotate", args=[comparison.slug])),
        "statuses": Comparison.Status,
    })  # fmt: skip


@researcher_required
@require_POST
def set_status(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    study = _study(request, slug)
    comparison = get_object_or_404(Comparison, pk=pk, study=study)
    status = request.POST.get("status", "")
    if status not in Comparison.Status.values:
        messages.error(request, "Unknown status.")
    else:
        comparison.status = status
        comparison.save(update_fields=["status"])
        messages.success(request, f"The comparison is now {comparison.get_status_display().lower()}.")
    return redirect(comparison)


@researcher_required
def votes_export(request: HttpRequest, slug: str, pk: int, fmt: str) -> HttpResponse:
    study = _study(request, slug)
    comparison = get_object_or_404(Comparison, pk=pk, study=study)
    rows = exports.acute_votes(study, comparison)
    if fmt == "csv":
        response = HttpResponse(exports.to_csv(rows), content_type="text/csv; charset=utf-8")
    elif fmt == "jsonl":
        response = HttpResponse(exports.to_jsonl(rows), content_type="application/x-ndjson; charset=utf-8")
    else:
        return HttpResponse("unknown format", status=404, content_type="text/plain")
    response["Content-Disposition"] = f'attachment; filename="{comparison.slug}-votes.{fmt}"'
    return response
