"""The researcher's form for a new ACUTE-Eval comparison."""

from __future__ import annotations

from typing import Any

from django import forms

from pairwise.models import Comparison
from pairwise.questions import DEFAULT_QUESTIONS, QUESTION_CHOICES


class ComparisonForm(forms.ModelForm[Comparison]):
    prolific_completion_url = forms.URLField(
        required=False,
        assume_scheme="https",
        label="Prolific completion URL",
        help_text="Defaults to https://app.prolific.com/submissions/complete?cc=<code>.",
    )
    question_keys = forms.MultipleChoiceField(
        choices=QUESTION_CHOICES,
        initial=DEFAULT_QUESTIONS,
        widget=forms.CheckboxSelectMultiple,
        label="Questions",
        help_text="The first four are ACUTE-Eval's, verbatim; each answer needs a one-line reason.",
    )

    class Meta:
        model = Comparison
        fields = [
            "name", "audience", "pairs_per_judge", "checks_per_judge", "check_threshold", "target_per_pair", "quota",
            "instructions", "consent_text", "prolific_completion_url",
        ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and self.instance.questions:
            self.initial["question_keys"] = list(self.instance.questions)

    def save(self, commit: bool = True) -> Comparison:
        self.instance.questions = [k for k, _ in QUESTION_CHOICES if k in self.cleaned_data["question_keys"]]
        return super().save(commit=commit)
