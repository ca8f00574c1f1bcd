"""Researcher forms: a study with inline formsets for its arms and metrics, and the design checks."""

from __future__ import annotations

import json
import secrets
from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.forms import BaseInlineFormSet, inlineformset_factory
from django.forms.formsets import DELETION_FIELD_NAME

from memory.registry import MEMORY_SYSTEMS
from studies.models import Arm, Metric, Study

STUDY_FIELDS = [
    "name",
    "description",
    "sessions_per_episode",
    "gap_days",
    "gap_max_days",
    "bot_opens_sessions",
    "min_user_turns",
    "episodes_per_worker",
    "quota",
    "max_message_chars",
    "simulated_start",
    "instructions",
    "consent_text",
    "completion_code",
    "prolific_completion_url",
    "invite_max_age_days",
]

# Changing these on an arm that already has episodes would silently mix two systems under one name.
ARM_FROZEN_FIELDS = ("memory_system", "params", "llm_backend", "llm_model")


# Changing these once workers have started would mix two designs in one data set.
STUDY_FROZEN_FIELDS = (
    "sessions_per_episode",
    "episodes_per_worker",
    "gap_days",
    "gap_max_days",
    "bot_opens_sessions",
    "simulated_start",
)


class StudyForm(forms.ModelForm[Study]):
    prolific_completion_url = forms.URLField(
        required=False,
        assume_scheme="https",
        label="Prolific completion URL",
        help_text=Study._meta.get_field("prolific_completion_url").help_text,
    )

    class Meta:
        model = Study
        fields: list[str] | str = STUDY_FIELDS
        labels = {
            "gap_days": "Gap between sessions (days; the shortest if a range)",
            "gap_max_days": "Longest gap between sessions (days)",
            "bot_opens_sessions": "The bot opens each session after the first",
            "min_user_turns": "Min. user turns per session",
            "max_message_chars": "Max. message length (characters)",
            "simulated_start": "Bot's clock at the first session",
            "invite_max_age_days": "Invite links valid for (days)",
            "quota": "Quota (participants)",
        }
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "instructions": forms.Textarea(attrs={"rows": 4}),
            "consent_text": forms.Textarea(attrs={"rows": 4}),
            "simulated_start": forms.DateTimeInput(attrs={"placeholder": "2026-01-05 10:00"}),
        }

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if self.instance.pk and self.instance.has_episodes():
            for name in STUDY_FROZEN_FIELDS:
                if name in self.changed_data:
                    self.add_error(name, "Workers have already started episodes: this cannot change any more.")
        low, high = data.get("gap_days"), data.get("gap_max_days")
        if low is not None and high is not None and high < low:
            self.add_error("gap_max_days", f"The longest gap must be at least the shortest ({low:g} days).")
        return data


def check_params(memory_system: str, params: Any) -> dict[str, Any]:
    """Validate an arm's parameter overrides against the system's declared ``Param``s."""
    if not isinstance(params, dict):
        raise ValidationError('Parameters must be a JSON object, e.g. {"k": 5}.')
    spec = MEMORY_SYSTEMS[memory_system].params
    unknown = sorted(set(params) - set(spec))
    if unknown:
        known = ", ".join(sorted(spec)) or "none (this system has no parameters)"
        raise ValidationError(f"Unknown parameter(s) for {memory_system}: {', '.join(unknown)}. Known: {known}.")
    errors = []
    for key, value in params.items():
        default = spec[key].default
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int | float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if ok and isinstance(default, int) and not isinstance(default, bool) and isinstance(value, float):
                ok = value.is_integer()
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            errors.append(f"{key} must be a {type(default).__name__} like its default {json.dumps(default)}")
    if errors:
        raise ValidationError("; ".join(errors) + ".")
    return params


class ParamsField(forms.JSONField):
    widget = forms.Textarea(attrs={"rows": 2, "class": "mono", "placeholder": "{}"})

    def to_python(self, value: Any) -> Any:
        if value in (None, ""):
            return {}
        return super().to_python(value)

    def prepare_value(self, value: Any) -> Any:
        return "{}" if value is None else super().prepare_value(value)


class NewStudyForm(StudyForm):
    add_default_metrics = forms.BooleanField(
        required=False,
        initial=True,
        label="Add the five default metrics (Keep Me Updated, Appendix E)",
    )


class ArmForm(forms.ModelForm[Arm]):
    params = ParamsField(required=False, help_text="JSON overrides of the system's defaults.")

    class Meta:
        model = Arm
        fields = ["name", "memory_system", "params", "llm_backend", "llm_model", "is_qc", "active"]
        labels = {"llm_backend": "LLM backend", "llm_model": "LLM model", "is_qc": "Quality-control arm"}

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        system = data.get("memory_system")
        if system in MEMORY_SYSTEMS and "params" in data:
            try:
                data["params"] = check_params(system, data["params"])
            except ValidationError as exc:
                self.add_error("params", exc)
        if self.instance.pk and self.instance.episodes.exists():
            frozen = [f for f in ARM_FROZEN_FIELDS if f in self.changed_data]
            if frozen:
                raise ValidationError(
                    f"This arm already has episodes: its {', '.join(frozen)} cannot change. "
                    "Deactivate it and add a new arm instead."
                )
        return data


class DesignFormSet(BaseInlineFormSet[Any, Study, Any]):
    """The arms or the metrics of a study: which of the forms will exist after saving."""

    def _kept_forms(self) -> list[forms.ModelForm[Any]]:
        """The forms that will exist after saving: filled in (or already saved) and not marked for deletion."""
        return [f for f in self.forms if (f.has_changed() or f.instance.pk) and not self._marked_for_deletion(f)]

    def _deleting_saved(self, form: forms.ModelForm[Any]) -> bool:
        return self._marked_for_deletion(form) and bool(form.instance.pk)

    def _marked_for_deletion(self, form: forms.ModelForm[Any]) -> bool:
        # What Django's private BaseFormSet._should_delete_form reads.
        return bool(self.can_delete and getattr(form, "cleaned_data", {}).get(DELETION_FIELD_NAME))


class BaseArmFormSet(DesignFormSet):
    def clean(self) -> None:
        super().clean()
        for form in self.forms:
            if self._deleting_saved(form) and form.instance.episodes.exists():
                raise ValidationError(
                    f"Arm “{form.instance.name}” has episodes and cannot be deleted; untick “active” instead."
                )

    def active_arm_count(self) -> int:
        return sum(1 for f in self._kept_forms() if f.cleaned_data.get("active"))


class MetricForm(forms.ModelForm[Metric]):
    class Meta:
        model = Metric
        fields = ["key", "statement", "low_label", "high_label", "reversed", "order"]
        labels = {"low_label": "Label at 0", "high_label": "Label at 100", "reversed": "Reversed"}
        widgets = {"order": forms.NumberInput(attrs={"min": 0, "style": "width:4.5rem"})}


class BaseMetricFormSet(DesignFormSet):
    def clean(self) -> None:
        super().clean()
        for form in self.forms:
            if self._deleting_saved(form) and form.instance.ratings.exists():
                raise ValidationError(f"Metric “{form.instance.key}” already has ratings and cannot be deleted.")

    def metric_count(self) -> int:
        return len(self._kept_forms())


# The factory returns a subclass of the formset= class; its stub only says BaseInlineFormSet.
ArmFormSet = cast(
    type[BaseArmFormSet],
    inlineformset_factory(Study, Arm, form=ArmForm, formset=BaseArmFormSet, extra=1, can_delete=True),
)
MetricFormSet = cast(
    type[BaseMetricFormSet],
    inlineformset_factory(Study, Metric, form=MetricForm, formset=BaseMetricFormSet, extra=1, can_delete=True),
)


def check_design(study_form: StudyForm, arms: BaseArmFormSet, metrics: BaseMetricFormSet) -> bool:
    """Cross-form rules that neither form can check alone. Adds errors to the study form."""
    ok = True
    per_worker = study_form.cleaned_data.get("episodes_per_worker")
    active = arms.active_arm_count()
    if per_worker and per_worker > active:
        study_form.add_error(
            "episodes_per_worker",
            f"{per_worker} episodes per worker need at least {per_worker} active arms (a worker's episodes use "
            f"different arms); this study has {active}.",
        )
        ok = False
    if metrics.metric_count() == 0 and not study_form.cleaned_data.get("add_default_metrics"):
        study_form.add_error(None, "Add at least one metric (or the five default ones).")
        ok = False
    return ok


def open_problems(study: Study) -> list[str]:
    """Why a saved study cannot be opened to workers yet (empty list = it can)."""
    problems = []
    active = study.arms.filter(active=True).count()
    if active == 0:
        problems.append("it has no active arm")
    elif study.episodes_per_worker > active:
        problems.append(f"{study.episodes_per_worker} episodes per worker need {study.episodes_per_worker} active arms")
    if not study.metrics.exists():
        problems.append("it has no metric")
    return problems


class InviteForm(forms.Form):
    invite_id = forms.SlugField(
        max_length=64,
        required=False,
        label="Invite id",
        widget=forms.TextInput(attrs={"placeholder": "an id of yours, e.g. lab-07"}),
        help_text="Your own id for the person (e.g. lab-07); leave empty for random ones.",
    )
    count = forms.IntegerField(
        min_value=1,
        max_value=500,
        required=False,
        initial=1,
        label="How many random links",
        widget=forms.NumberInput(attrs={"class": "count", "min": 1, "max": 500}),
    )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("invite_id") and (data.get("count") or 1) > 1:
            self.add_error("count", "One id makes one link: leave the id empty to make several.")
        return data

    def ids(self) -> list[str]:
        """The invite ids to sign: the one given, or fresh random ones."""
        if self.cleaned_data["invite_id"]:
            return [self.cleaned_data["invite_id"]]
        return [f"inv-{secrets.token_hex(4)}" for _ in range(self.cleaned_data["count"] or 1)]
