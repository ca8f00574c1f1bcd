"""The study's Automatic judges page: add a judge, run it, draw the judge sample, scan for blinding
breaches, and read the admission figures and the human-automatic table (also as JSON)."""

from __future__ import annotations

from typing import cast
from urllib.parse import urlsplit

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from judges import blinding, jobs
from judges.models import API_KEY_ENV, RUBRICS, BlindingBreach, Judge
from judges.report import study_judges_report
from judges.sample import MIN_LABELS, MIN_SAMPLE, SampleError, create_sample, sample_queue
from studies.models import Study
from studies.roles import researcher_required, study_for


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

    def clean_api_key_env(self) -> str:
        name = str(self.cleaned_data.get("api_key_env") or "").strip()
        if name and not API_KEY_ENV.fullmatch(name):
            raise forms.ValidationError(
                "Name an API key's variable (capitals, ending in _API_KEY, e.g. OPENAI_API_KEY): the judge sends its "
                "value to the base URL."
            )
        return name

    def clean_base_url(self) -> str:
        url = str(self.cleaned_data.get("base_url") or "").strip()
        if url and urlsplit(url).scheme not in ("http", "https"):
            raise forms.ValidationError("An endpoint's address starts with http:// or https://.")
        return url

    def save(self, commit: bool = True) -> Judge:
        judge = super().save(commit=False)
        judge.rubrics = list(self.cleaned_data.get("sensitivity") or [])
        if commit:
            judge.save()
        return judge


class SampleForm(forms.Form):
    size = forms.IntegerField(min_value=MIN_SAMPLE, max_value=2000, initial=60)
    labels_per_item = forms.IntegerField(min_value=MIN_LABELS, max_value=20, initial=MIN_LABELS)
    probe_size = forms.IntegerField(
        min_value=0, max_value=2000, initial=60, required=False, label="Probe answers",
        help_text="Persona-card probe answers to label too, stratified by arm, free-text facts first (all there are "
        "when fewer; 0: none). The judge is admitted for probe answers on these.",
    )  # fmt: skip


def _study(request: HttpRequest, slug: str) -> Study:
    """The study if the user may see it (404 otherwise); a POST (adding, running a judge, drawing a sample, the
    blinding scan) needs the owner's or an editor's role: a viewer of the team gets 403 (studies.roles.study_for)."""
    return study_for(request, slug)


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
        messages.success(request, f"Judge sample drawn: {queue.items.count()} items in queue {queue.name!r}.")
    return redirect("judges:study", slug=study.slug)


@require_POST
@researcher_required
def scan_blinding(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    found = blinding.scan_study(study)
    messages.success(request, f"Blinding scan done: {found} new breaches.")
    return redirect("judges:study", slug=study.slug)
