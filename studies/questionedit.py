"""The researcher's editor of a study's question blocks (studies/questions.py), on the study's Edit page: add a
question to a block, remove one. htmx posts swap the editor in place (``#questions``); without htmx the page is
loaded again. Owners and editors only (a viewer gets 403); frozen once a worker has answered (400, said why)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Max
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from studies import questions
from studies.models import Study
from studies.questions import LIKERT_LABELS, MAX_CHOICE_CHARS, MAX_CHOICES, Question
from studies.roles import AuthenticatedHttpRequest, researcher_required, study_for

FROZEN_TEXT = "Workers have already answered: the questions cannot change any more (one data set, one questionnaire)."


class QuestionForm(forms.ModelForm[Question]):
    options = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        label="Options (one per line)",
        help_text="Single choice and comprehension: at least two. Likert: the points' labels, or empty for the "
        "standard agreement labels.",
    )
    points = forms.TypedChoiceField(
        choices=[(5, "5 points"), (7, "7 points")],
        coerce=int,
        initial=5,
        required=False,
        label="Likert points (when no options are given)",
    )
    right_option = forms.IntegerField(
        min_value=1, required=False, label="Right option (comprehension: its number, 1 = the first)"
    )

    class Meta:
        model = Question
        fields = ["block", "kind", "text", "required", "max_chars"]
        labels = {"text": "Question", "max_chars": "Free text: at most (characters)", "required": "Required"}
        widgets = {"text": forms.TextInput(attrs={"maxlength": 500})}

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        block, kind = data.get("block"), data.get("kind")
        labels = [line.strip() for line in str(data.get("options") or "").splitlines() if line.strip()]
        if len(labels) > MAX_CHOICES:
            self.add_error("options", f"At most {MAX_CHOICES} options.")
        if any(len(label) > MAX_CHOICE_CHARS for label in labels):
            self.add_error("options", f"Each option at most {MAX_CHOICE_CHARS} characters.")
        if len(set(labels)) != len(labels):
            self.add_error("options", "Two options are the same.")
        if block == Question.Block.CHECK:
            if kind != Question.Kind.CHOICE:
                self.add_error("kind", "A comprehension question is a single choice with a right answer.")
            right = data.get("right_option")
            if right is None or not 1 <= right <= len(labels):
                self.add_error("right_option", "Give the number of the right option (1 = the first).")
            data["required"] = True
        if kind == Question.Kind.CHOICE and len(labels) < 2:
            self.add_error("options", "Give at least two options, one per line.")
        if kind == Question.Kind.LIKERT:
            if not labels:
                labels = list(LIKERT_LABELS[int(data.get("points") or 5)])
            elif not 3 <= len(labels) <= 11:
                self.add_error("options", "A Likert scale has 3 to 11 labelled points.")
        if kind == Question.Kind.TEXT:
            labels = []
        data["labels"] = labels
        return data

    def save(self, commit: bool = True) -> Question:
        question = super().save(commit=False)
        question.choices = self.cleaned_data["labels"]
        right = self.cleaned_data.get("right_option")
        question.correct = right - 1 if question.block == Question.Block.CHECK and right else None
        if commit:
            question.save()
        return question


def editor_context(study: Study, form: QuestionForm | None = None, error: str = "") -> dict[str, Any]:
    """What the editor (templates/studies/researcher/_questions.html) shows."""
    blocks = [
        {"block": block, "label": label, "questions": questions.block_questions(study, block)}
        for block, label in Question.Block.choices
    ]
    return {
        "study": study,
        "question_blocks": blocks,
        "questions_frozen": questions.frozen(study),
        "question_form": form or QuestionForm(),
        "question_error": error,
    }


def _answer(
    request: AuthenticatedHttpRequest, study: Study, form: QuestionForm | None = None, error: str = ""
) -> HttpResponse:
    """htmx: the editor again, errors inline, always 200 (htmx 2 does not swap a 4xx response into the page, and
    django-htmx's debug handler would show it as the whole page); otherwise back to the Edit page with a message."""
    if request.htmx:
        return render(request, "studies/researcher/_questions.html", editor_context(study, form, error))
    if form is not None and form.errors:
        error = "Question not added: " + "; ".join(
            str(e) if name == "__all__" else f"{form.fields[name].label}: {e}"
            for name, errs in form.errors.items()
            for e in errs
        )
    if error:
        messages.error(request, error)
    return redirect(reverse("studies:edit", args=[study.slug]) + "#questions")


@require_POST
@researcher_required
def add(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug, change=True)
    if questions.frozen(study):
        return _answer(request, study, error=FROZEN_TEXT)
    form = QuestionForm(request.POST, instance=Question(study=study))
    if not form.is_valid():
        return _answer(request, study, form)
    question = form.save(commit=False)
    last = study.questions.filter(block=question.block).aggregate(n=Max("order"))["n"]
    question.order = 0 if last is None else last + 1
    question.save()
    if not request.htmx:
        messages.success(request, "Question added.")
    return _answer(request, study)


@require_POST
@researcher_required
def delete(request: AuthenticatedHttpRequest, slug: str, pk: int) -> HttpResponse:
    study = study_for(request, slug, change=True)
    question = get_object_or_404(Question, pk=pk, study=study)
    if questions.frozen(study):
        return _answer(request, study, error=FROZEN_TEXT)
    question.delete()
    return _answer(request, study)
