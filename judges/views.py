"""The study's Automatic judges page: add a judge, run it, draw the judge sample, scan for blinding
breaches, and read the admission figures and the human-automatic table (also as JSON)."""

from __future__ import annotations

from typing import cast

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from judges import blinding, jobs
from judges.models import RUBRICS, BlindingBreach, Judge
from judges.report import study_judges_report
from judges.sample import MIN_LABELS, MIN_SAMPLE, SampleError, create_sample, sample_queue
from studies.models import Study
from studies.roles import researcher_required


class JudgeForm(forms.ModelForm[Judge]):
    sensitivity = forms.MultipleChoiceField(
        choices=[(r, r) for r in RUBRICS if r != "standard"],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Re-judge every session under these rubrics too (the report shows the range).",
    )

    class Meta:
        model = Judge
        fields = ["name", "base_url", "model", "api_key_env", "epsilon"]

    def save(self, commit: bool = True) -> Judge:
        judge = super().save(commit=False)
        judge.rubrics = list(self.cleaned_data.get("sensitivity") or [])
        if commit:
            judge.save()
        return judge


class SampleForm(forms.Form):
    size = forms.IntegerField(min_value=MIN_SAMPLE, max_value=2000, initial=60)
    labels_per_item = forms.IntegerField(min_value=MIN_LABELS, max_value=20, initial=MIN_LABELS)


def _study(request: HttpRequest, slug: str) -> Study:
    return get_object_or_404(Study.objects.visible_to(request.user), slug=slug)


@require_GET
@researcher_required
def judges_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    report = study_judges_report(study, n_boot=1000)
    context = {
        "study": study,
        "report": report,
        "form": JudgeForm(),
        "sample_form": SampleForm(),
        "queue": sample_queue(study),
        "breaches": BlindingBreach.objects.filter(session__episode__participant__study=study).select_related(
            "session__episode__arm"
        )[:200],
    }
    return render(request, "judges/study.html", context)


@require_GET
@researcher_required
def judges_json(request: HttpRequest, slug: str) -> JsonResponse:
    study = _study(request, slug)
    return JsonResponse(study_judges_report(study), json_dumps_params={"indent": 1})


@require_POST
@researcher_required
def add_judge(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    form = JudgeForm(request.POST, instance=Judge(study=study, created_by=cast(User, request.user)))
    if form.is_valid():
        if Judge.objects.filter(study=study, name=form.cleaned_data["name"]).exists():
            messages.error(request, "The study already has a judge with this name.")
        else:
            jobs.start(form.save())
            messages.success(request, "Judge added; it is scoring the study's finished sessions.")
    else:
        messages.error(request, "; ".join(f"{k}: {v[0]}" for k, v in form.errors.items()))
    return redirect("judges:study", slug=study.slug)


@require_POST
@researcher_required
def run_judge(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    study = _study(request, slug)
    judge = get_object_or_404(Judge, pk=pk, study=study)
    if jobs.start(judge):
        messages.success(request, f"{judge.name} is scoring the sessions it has not scored yet.")
    else:
        messages.info(request, f"{judge.name} is already running.")
    return redirect("judges:study", slug=study.slug)


@require_POST
@researcher_required
def draw_sample(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    form = SampleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(f"{k}: {v[0]}" for k, v in form.errors.items()))
        return redirect("judges:study", slug=study.slug)
    try:
        queue = create_sample(study, created_by=request.user, **form.cleaned_data)
    except SampleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Judge sample drawn: {queue.items.count()} sessions in queue {queue.name!r}.")
    return redirect("judges:study", slug=study.slug)


@require_POST
@researcher_required
def scan_blinding(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    found = blinding.scan_study(study)
    messages.success(request, f"Blinding scan done: {found} new breaches.")
    return redirect("judges:study", slug=study.slug)
