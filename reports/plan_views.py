"""Planning before launch: the power simulation page and pre-registrations (services in reports.planning)."""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from analysis.spec import Family, RatingsError, Test
from reports import planning, queries
from reports.forms import PairwisePlanForm, PlanForm, RegisterForm
from reports.models import ImportedDataset, Preregistration
from studies.models import Study
from studies.roles import researcher_required, study_for


def _context(
    request: HttpRequest, study: Study, form: PlanForm, job: str | None, pairwise_form: PairwisePlanForm | None = None
) -> dict[str, Any]:
    state = planning.plan_status_for(study, job) if job else None
    design = planning.study_design(study)
    return {
        "study": study,
        "plan_cpu_minutes": max(1, round(settings.PLAN_CPU_SECONDS / 60)),
        "design": design,
        "form": form,
        "pairwise_form": pairwise_form or PairwisePlanForm(arms=design.arms),
        "job": job if state is not None else None,
        "pairwise_job": bool(job and state is not None and planning.is_pairwise_key(job)),
        "state": state,
        "register_form": RegisterForm(
            initial={"job": job or "", **_plan_choices(state)}, persona_cards=study.persona_cards
        ),
        "registrations": queries.preregistrations_for_study(study),
    }


def _plan_choices(state: dict[str, Any] | None) -> dict[str, Any]:
    if state and state.get("status") == "done" and "plan" in state:  # a pairwise plan chooses no test
        return {"test": state["plan"]["test"], "family": state["plan"]["family"]}
    return {}


def _datasets(study: Study) -> list[tuple[int, str]]:
    return [(d.pk, d.name) for d in queries.datasets_for_study(study)]


@require_http_methods(["GET", "POST"])
@researcher_required
def plan(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug)
    if request.method == "POST" and request.POST.get("design") == "pairwise":
        return _plan_pairwise(request, study)
    form = PlanForm(request.POST or None, datasets=_datasets(study))
    if request.method == "POST" and form.is_valid():
        try:
            key = planning.start_plan(study, form.settings())
        except (RatingsError, ImportedDataset.DoesNotExist, planning.PlanBusy) as exc:
            form.add_error(None, f"The simulation could not start: {exc}")
        else:
            return redirect(f"{reverse('reports:study_plan', args=[study.slug])}?job={key}#plan-result")
    return render(request, "reports/plan.html", _context(request, study, form, request.GET.get("job")))


def _plan_pairwise(request: HttpRequest, study: Study) -> HttpResponse:
    """The pairwise design's simulation: the judges needed (``python -m analysis plan-pairwise``), as a job."""
    form = PairwisePlanForm(request.POST, arms=planning.study_design(study).arms)
    if form.is_valid():
        try:
            key = planning.start_pairwise_plan(study, form.settings())
        except planning.PlanBusy as exc:
            form.add_error(None, f"The simulation could not start: {exc}")
        else:
            return redirect(f"{reverse('reports:study_plan', args=[study.slug])}?job={key}#plan-result")
    ctx = _context(request, study, PlanForm(datasets=_datasets(study)), None, pairwise_form=form)
    return render(request, "reports/plan.html", ctx)


def _study_of_plan(request: HttpRequest, slug: str, key: str) -> Study:
    """The study the researcher may see, if ``key`` is one of its power simulations (404 otherwise)."""
    study = study_for(request, slug)
    if planning.plan_status_for(study, key) is None:
        raise Http404("no such simulation (it may have expired)")
    return study


@require_GET
@researcher_required
def plan_job(request: HttpRequest, slug: str, key: str) -> HttpResponse:
    """The result part of the page (polled by htmx while the simulation runs)."""
    study = _study_of_plan(request, slug, key)
    ctx = _context(request, study, PlanForm(datasets=_datasets(study)), key)
    return render(request, "reports/plan.html#result", ctx)


@require_POST
@researcher_required
def plan_cancel(request: HttpRequest, slug: str, key: str) -> HttpResponse:
    """Stop a queued or running power simulation of this study."""
    study = _study_of_plan(request, slug, key)
    if planning.cancel_plan(key):
        messages.info(request, "The simulation was cancelled.")
    return redirect(f"{reverse('reports:study_plan', args=[study.slug])}?job={key}#plan-result")


@require_POST
@researcher_required
def register(request: HttpRequest, slug: str) -> HttpResponse:
    """Freeze a pre-registration. A refusal (a forged choice, notes over their cap, a design the analysis cannot
    read) is the plan page again, 400, with the error above the form and everything written and ticked kept."""
    study = study_for(request, slug)
    form = RegisterForm(request.POST, persona_cards=study.persona_cards)
    if not form.is_valid():
        return _register_refused(request, study, form, "; ".join(form.errors.as_text().splitlines()))
    state = planning.plan_status_for(study, form.cleaned_data["job"]) if form.cleaned_data["job"] else None
    plan_result = state.get("plan") if state and state.get("status") == "done" else None
    try:
        document = planning.preregistration_document(
            study,
            test=cast(Test, form.cleaned_data["test"]),
            family=cast(Family, form.cleaned_data["family"]),
            notes=form.cleaned_data["notes"],
            plan=plan_result,
            probe_primary=form.cleaned_data.get("probe_primary") or [],
        )
    except RatingsError as exc:
        return _register_refused(request, study, form, str(exc))
    entry = planning.register(study, document, request.user)
    messages.success(
        request,
        f"Registered {entry.sha256[:12]}. The study's analysis is now checked against it; download it and deposit "
        "it (e.g. on OSF) before launch.",
    )
    return redirect("reports:study_plan", study.slug)


def _register_refused(request: HttpRequest, study: Study, form: RegisterForm, why: str) -> HttpResponse:
    job = str(request.POST.get("job") or "") or None
    ctx = _context(request, study, PlanForm(datasets=_datasets(study)), job)
    ctx["register_form"] = form
    ctx["register_error"] = f"The registration could not be made: {why}"
    return render(request, "reports/plan.html", ctx, status=400)


@require_GET
@researcher_required
def preregistration_file(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    study = study_for(request, slug)
    entry = get_object_or_404(Preregistration, study=study, pk=pk)
    response = JsonResponse(entry.content, json_dumps_params={"indent": 1, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-preregistration-{entry.sha256[:12]}.json"'
    return response
