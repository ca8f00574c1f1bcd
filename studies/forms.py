"""Researcher forms: a study with inline formsets for its arms and metrics, and the design checks."""

from __future__ import annotations

import json
import secrets
from typing import Any, cast

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.forms import BaseInlineFormSet, inlineformset_factory
from django.forms.formsets import DELETION_FIELD_NAME

from analysis.qc import best_attainable_p
from analysis.spec import ALPHA
from memory import cards
from memory.registry import MEMORY_SYSTEMS
from studies import personas, questions
from studies.cardbank import CardBank
from studies.invitations import StudyInvitation
from studies.models import Arm, AttentionCheck, Metric, Study, arm_is_qc

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
    "max_messages_per_minute",
    "max_turns_per_session",
    "max_stored_chars",
    "simulated_start",
    "instructions",
    "consent_text",
    "completion_code",
    "prolific_completion_url",
    "invite_max_age_days",
    "estimated_minutes",
    "session_time_limit_minutes",
    "abandon_after_minutes",
    "block_paste",
    "side_by_side",
    "side_by_side_sliders",
    "prolific_decline_code",
    "persona_cards",
    "card_bank",
    "card_script",
    "wave_sessions",
    "pace_replies",
    "pace_min_seconds",
    "pace_chars_per_second",
    "retention_days",
    "retention_action",
    "flag_personal_data",
    "comprehension_attempts",
    "comprehension_fail_action",
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
    "persona_cards",
    "card_bank",
    "card_script",
    # when each arm's replies appear (chat/pacing.py): workers of one data set should see one schedule
    "pace_replies",
    "pace_min_seconds",
    "pace_chars_per_second",
    # live side by side: one data set is either one chatbot per episode or two
    "side_by_side",
    "side_by_side_sliders",
)

# Optional in the form: a form posted without them (an older page, a script) keeps the study's value, so that
# pacing stays on by default (a checkbox could not tell "off" from "not posted": pace_replies is a choice).
OPTIONAL_KEPT = (
    "abandon_after_minutes",
    "pace_replies",
    "pace_min_seconds",
    "pace_chars_per_second",
    "retention_action",
    "comprehension_attempts",
    "comprehension_fail_action",
)


class ScriptField(forms.JSONField):
    """The event script as JSON; empty = the default script."""

    widget = forms.Textarea(attrs={"rows": 6, "class": "mono", "placeholder": "empty = the default script"})

    def to_python(self, value: Any) -> Any:
        if value is None or value == "" or value == "{}" or value == {}:  # {} too: JSONField makes it None
            return {}
        return super().to_python(value)

    def prepare_value(self, value: Any) -> Any:
        return "" if value in (None, {}) else super().prepare_value(value)


def persona_problems(data: dict[str, Any]) -> dict[str, list[str]]:
    """What is wrong with a study's persona cards settings, by field: a script that does not parse, that the
    bank cannot play, or that has more sessions than an episode."""
    if not data.get("persona_cards"):
        return {}
    bank_row: CardBank | None = data.get("card_bank")
    try:
        bank = bank_row.bank() if bank_row is not None else cards.load_bank()
    except cards.CardError as exc:
        return {"card_bank": [str(exc)]}
    try:
        script = cards.parse_script(data["card_script"]) if data.get("card_script") else cards.load_script()
    except cards.CardError as exc:
        return {"card_script": [str(exc)]}
    problems = cards.check_script(script, bank)
    sessions = data.get("sessions_per_episode")
    if sessions and script.sessions > sessions:
        problems.append(f"the script has {script.sessions} sessions, an episode {sessions}")
    return {"card_script": problems} if problems else {}


class StudyForm(forms.ModelForm[Study]):
    card_script = ScriptField(
        required=False,
        label="Event script",
        help_text=Study._meta.get_field("card_script").help_text
        + " Format: docs/memory-systems.md, “Persona cards and probes”.",
    )
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
            "max_messages_per_minute": "Max. messages per minute",
            "max_turns_per_session": "Max. user turns per session",
            "max_stored_chars": "Max. characters stored per participant",
            "simulated_start": "Bot's clock at the first session",
            "invite_max_age_days": "Invite links valid for (days)",
            "quota": "Quota (participants)",
            "estimated_minutes": "Estimated time (minutes)",
            "session_time_limit_minutes": "Time limit per session (minutes)",
            "abandon_after_minutes": "Abandoned after (minutes away)",
            "block_paste": "Block pasting into the chat",
            "side_by_side": "Live side by side (two chatbots, A and B, and a vote per session)",
            "side_by_side_sliders": "Side by side: also rate each chatbot on the sliders",
            "prolific_decline_code": "Prolific code for declined consent",
            "persona_cards": "Workers chat as persona cards",
            "card_bank": "Card bank",
            "wave_sessions": "Waves end after session no.",
            "pace_min_seconds": "Pacing: minimum delay (seconds)",
            "pace_chars_per_second": "Pacing: typing speed (characters/s)",
            "flag_personal_data": "Flag personal data in messages",
            "comprehension_attempts": "Tries",
            "comprehension_fail_action": "After the last failed try",
        }
        help_texts = {
            "instructions": "Workers see the sentence “Between sessions, some time passes for the chatbot (for "
            "example one week).” with this study’s gap instead (e.g. “… for the chatbot: 3 days.”, a range "
            "or the same day); anything else exactly as written here.",
        }
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "instructions": forms.Textarea(attrs={"rows": 4}),
            "consent_text": forms.Textarea(attrs={"rows": 4}),
            "simulated_start": forms.DateTimeInput(attrs={"placeholder": "2026-01-05 10:00"}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "pace_replies" in self.fields:
            self.fields["pace_replies"] = forms.TypedChoiceField(
                label="Reply pacing (blinding by timing)",
                choices=[
                    ("True", "On: every arm's reply appears no sooner than the schedule below"),
                    ("False", "Off: each reply appears as fast as its arm writes it"),
                ],
                coerce=lambda v: v == "True",
                empty_value=None,
                required=False,
                initial=str(self.instance.pace_replies),
                help_text=Study._meta.get_field("pace_replies").help_text,
            )
        # Optional in the form (a form posted without them keeps the study's value). Absent when the admin shows the
        # study read-only (a user with the view permission only).
        for name in OPTIONAL_KEPT:
            if name in self.fields:
                self.fields[name].required = False

    def _kept(self, name: str) -> Any:
        """The posted value, or (not posted) the study's own."""
        value = self.cleaned_data.get(name)
        return getattr(self.instance, name) if value is None else value

    def clean_abandon_after_minutes(self) -> int:
        value = self.cleaned_data.get("abandon_after_minutes")
        if value is None:
            return int(self.instance.abandon_after_minutes or Study._meta.get_field("abandon_after_minutes").default)
        return int(value)

    def clean_pace_replies(self) -> bool:
        return bool(self._kept("pace_replies"))

    def clean_pace_min_seconds(self) -> float:
        return float(self._kept("pace_min_seconds"))

    def clean_pace_chars_per_second(self) -> float:
        return float(self._kept("pace_chars_per_second"))

    def clean_retention_action(self) -> str:
        return str(self._kept("retention_action") or self.instance.retention_action)

    def clean_comprehension_attempts(self) -> int:
        return int(self._kept("comprehension_attempts"))

    def clean_comprehension_fail_action(self) -> str:
        return str(self._kept("comprehension_fail_action") or self.instance.comprehension_fail_action)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if self.instance.pk and self.instance.has_episodes():
            for name in STUDY_FROZEN_FIELDS:
                # (an optional field not posted keeps its value: it shows as changed data but is not a change)
                if name in self.changed_data and data.get(name) != getattr(self.instance, name):
                    self.add_error(name, "Workers have already started episodes: this cannot change any more.")
        if self.instance.pk and questions.frozen(self.instance):
            for name in ("comprehension_attempts", "comprehension_fail_action"):
                if name in self.changed_data and data.get(name) != getattr(self.instance, name):
                    self.add_error(name, "Workers have already answered the questions: this cannot change any more.")
        low, high = data.get("min_user_turns"), data.get("max_turns_per_session")
        if low is not None and high is not None and high < low:
            self.add_error("max_turns_per_session", f"Must be at least the minimum of {low} user turns.")
        low, high = data.get("gap_days"), data.get("gap_max_days")
        if low is not None and high is not None and high < low:
            self.add_error("gap_max_days", f"The longest gap must be at least the shortest ({low:g} days).")
        if "persona_cards" in self.fields:
            for name, problems in persona_problems(data).items():
                for problem in problems:
                    self.add_error(name, problem[0].upper() + problem[1:] + ("" if problem.endswith(".") else "."))
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

    def has_changed(self, initial: Any, data: Any) -> bool:
        # A blank extra arm row posts the "{}" it was rendered with while its initial is None: without
        # this, the row counts as filled in and fails on its empty name ("This field is required").
        if initial in (None, "", {}):
            try:
                return bool(self.to_python(data) != {})
            except ValidationError:
                return True  # not JSON: the row was typed into, and its error must be shown
        return bool(super().has_changed(initial, data))


class NewStudyForm(StudyForm):
    add_default_metrics = forms.BooleanField(
        required=False,
        initial=True,
        label="Add the five default metrics (Keep Me Updated, Appendix E)",
    )


class ArmForm(forms.ModelForm[Arm]):
    params = ParamsField(required=False, help_text="JSON overrides of the system's defaults.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Say what "empty" means on this site now, not "the site default".
        # (The fields are absent when the admin shows the arm read-only: a user with the view permission only.)
        site = Arm(llm_backend="", llm_model="")
        if "llm_backend" in self.fields:
            self.fields["llm_backend"].help_text = f"Empty = the site's LLM_BACKEND, now {site.resolved_backend}."
        if "llm_model" in self.fields:
            self.fields[
                "llm_model"
            ].help_text = (
                f"Empty = the site's LLM_MODEL, now {site.resolved_model or '(none set)'} on {site.resolved_backend}."
            )

    class Meta:
        model = Arm
        # No "is QC" box: Arm.is_qc follows the memory system (the degraded ``qc`` bot), see Arm.save.
        fields = ["name", "memory_system", "params", "llm_backend", "llm_model", "active"]
        labels = {"llm_backend": "LLM backend", "llm_model": "LLM model"}

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
        study = self.instance
        # An open study's arms are its design while workers are drawn to them (the admin refuses the same).
        gated = bool(study.pk) and study.is_open_for_real
        for form in self.forms:
            if gated and self._becomes_qc(form):
                # A QC arm needs no readiness check, so the open gate let it through; but turning an arm into
                # the degraded bot (or adding one) changes the design under the workers (the admin refuses too).
                raise ValidationError(
                    f"Arm “{form.cleaned_data.get('name') or form.instance.name}” cannot become a quality-control arm "
                    "while the study is open (not a pilot): close the study first."
                )
            if not self._deleting_saved(form):
                continue
            if form.instance.episodes.exists():
                raise ValidationError(
                    f"Arm “{form.instance.name}” has episodes and cannot be deleted; untick “active” instead."
                )
            if gated:
                raise ValidationError(
                    f"Arm “{form.instance.name}” cannot be deleted while the study is open (not a pilot): untick "
                    "“active” to stop drawing it, or close the study first."
                )

    def _becomes_qc(self, form: forms.ModelForm[Any]) -> bool:
        """A kept form whose arm would be a QC arm and was not one before (changed, or new)."""
        if form not in self._kept_forms() or not arm_is_qc(str(form.cleaned_data.get("memory_system") or "")):
            return False
        return not (form.instance.pk and arm_is_qc(Arm.objects.get(pk=form.instance.pk).memory_system))

    def active_arm_count(self) -> int:
        return sum(1 for f in self._kept_forms() if f.cleaned_data.get("active"))

    def active_qc_arm_count(self) -> int:
        return sum(
            1
            for f in self._kept_forms()
            if f.cleaned_data.get("active") and arm_is_qc(str(f.cleaned_data.get("memory_system") or ""))
        )


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

    def positive_metric_count(self) -> int:
        """Metrics that are not reversed: the ones the QC test uses (all of them if every one is reversed)."""
        kept = self._kept_forms()
        return sum(1 for f in kept if not f.cleaned_data.get("reversed")) or len(kept)


class AttentionCheckForm(forms.ModelForm[AttentionCheck]):
    class Meta:
        model = AttentionCheck
        fields = ["statement", "target", "tolerance", "position", "low_label", "high_label"]
        labels = {
            "position": "After session no.",
            "target": "Target (0-100)",
            "tolerance": "Tolerance (±)",
            "low_label": "Label at 0",
            "high_label": "Label at 100",
        }
        widgets = {
            "target": forms.NumberInput(attrs={"min": 0, "max": 100, "style": "width:5rem"}),
            "tolerance": forms.NumberInput(attrs={"min": 0, "max": 50, "style": "width:5rem"}),
            "position": forms.NumberInput(attrs={"min": 1, "style": "width:5rem"}),
        }

    def has_changed(self) -> bool:
        """A new check counts as changed even when it is saved exactly as the page pre-filled it: the formset
        has no blank rows (``extra=0``), so a new row exists only because the researcher pressed "Add an
        attention check", and Django would otherwise drop an extra form left at its initial values (what the
        researcher saw would not be what was saved). Its Delete box takes it back."""
        return self.instance.pk is None or super().has_changed()

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        target, tolerance = data.get("target"), data.get("tolerance")
        if target is not None and tolerance is not None and tolerance >= 50:
            self.add_error("tolerance", "A tolerance of 50 or more lets almost any slider position pass.")
        if target is not None and not 0 <= target <= 100:
            self.add_error("target", "The target must be between 0 and 100.")
        return data


class BaseAttentionFormSet(DesignFormSet):
    def clean(self) -> None:
        super().clean()
        for form in self.forms:
            if self._deleting_saved(form) and form.instance.responses.exists():
                raise ValidationError(
                    "An attention check that workers have already answered cannot be deleted (its results would "
                    "be lost)."
                )

    def positions(self) -> list[int]:
        return [int(f.cleaned_data["position"]) for f in self._kept_forms() if f.cleaned_data.get("position")]


# The factory returns a subclass of the formset= class; its stub only says BaseInlineFormSet.
ArmFormSet = cast(
    type[BaseArmFormSet],
    inlineformset_factory(Study, Arm, form=ArmForm, formset=BaseArmFormSet, extra=1, can_delete=True),
)
MetricFormSet = cast(
    type[BaseMetricFormSet],
    inlineformset_factory(Study, Metric, form=MetricForm, formset=BaseMetricFormSet, extra=1, can_delete=True),
)
AttentionFormSet = cast(
    type[BaseAttentionFormSet],
    inlineformset_factory(
        Study, AttentionCheck, form=AttentionCheckForm, formset=BaseAttentionFormSet, extra=0, can_delete=True
    ),
)

# Below this best attainable QC p-value the design is fine; between it and alpha the form warns (only a worker
# who rates every QC session below every other one can pass, and real ratings have ties).
QC_COMFORTABLE_P = ALPHA / 10


def qc_design_problem(*, qc_arms: int, episodes_per_worker: int, sessions: int, qc_metrics: int) -> str:
    """Why the design cannot run the per-worker QC test (Ji et al.), or "" when it can.

    A worker meets the QC arm in one whole episode (``chat.assignment.assign_episode``); the test compares the
    worker's ratings of that episode with the same worker's ratings of their other episodes."""
    if qc_arms == 0:
        return ""
    if qc_arms > 1:
        return "A study has at most one active quality-control arm (the analysis tests against one)."
    if episodes_per_worker < 2:
        return (
            "With a quality-control arm every worker meets it in one of their episodes, so they need at least 2 "
            "episodes per worker: the QC test compares a worker's QC ratings with their ratings of another arm."
        )
    n_qc = sessions * qc_metrics
    best = best_attainable_p(n_qc, n_qc * (episodes_per_worker - 1))
    if best >= ALPHA:
        return (
            f"With {sessions} session(s) per episode and {qc_metrics} QC metric(s) a worker gives the QC arm only "
            f"{n_qc} rating(s): the QC test's smallest possible p-value is {best:.3g}, not below {ALPHA}, so nobody "
            "could pass. Add sessions, metrics or episodes per worker."
        )
    return ""


def side_by_side_problem(*, side_by_side: bool, real_arms: int, qc_arms: int, episodes_per_worker: int) -> str:
    """Why a live side-by-side design cannot run (chat/sidebyside.py), or "" when it can: each of a worker's
    episodes is a pair of arms they have not met, and the QC arm is never drawn."""
    if not side_by_side:
        return ""
    if qc_arms:
        return (
            "A live side-by-side study draws no quality-control arm (a worker would see it beside a real arm every "
            "session): make the QC arm inactive, or judge it in an ACUTE-Eval comparison's check pairs."
        )
    if real_arms < 2 * episodes_per_worker:
        return (
            f"Live side by side: {episodes_per_worker} episode(s) per worker need {2 * episodes_per_worker} active "
            f"arms (each episode is a pair of arms the worker has not met); this study has {real_arms}."
        )
    return ""


def check_design(
    study_form: StudyForm,
    arms: BaseArmFormSet,
    metrics: BaseMetricFormSet,
    attention: BaseAttentionFormSet | None = None,
) -> bool:
    """Cross-form rules that neither form can check alone. Adds errors to the study form."""
    ok = True
    data = study_form.cleaned_data
    per_worker = data.get("episodes_per_worker")
    active = arms.active_arm_count()
    if per_worker and per_worker > active:
        study_form.add_error(
            "episodes_per_worker",
            f"{per_worker} episodes per worker need at least {per_worker} active arms (a worker's episodes use "
            f"different arms); this study has {active}.",
        )
        ok = False
    if metrics.metric_count() == 0 and not data.get("add_default_metrics"):
        study_form.add_error(None, "Add at least one metric (or the five default ones).")
        ok = False
    pair_problem = side_by_side_problem(
        side_by_side=bool(data.get("side_by_side")), real_arms=active - arms.active_qc_arm_count(),
        qc_arms=arms.active_qc_arm_count(), episodes_per_worker=per_worker or 1,
    )  # fmt: skip
    if pair_problem:
        study_form.add_error("side_by_side", pair_problem)
        ok = False
    sessions = data.get("sessions_per_episode")
    if per_worker and sessions:
        n_metrics = metrics.positive_metric_count() or (5 if data.get("add_default_metrics") else 0)
        problem = qc_design_problem(
            qc_arms=arms.active_qc_arm_count(),
            episodes_per_worker=per_worker,
            sessions=sessions,
            qc_metrics=n_metrics,
        )
        if problem:
            study_form.add_error(None, problem)
            ok = False
        if attention is not None:
            total = per_worker * sessions
            late = sorted({p for p in attention.positions() if p > total})
            if late:
                study_form.add_error(
                    None,
                    f"Attention check(s) placed after session {', '.join(map(str, late))}, but a worker has only "
                    f"{total} session(s).",
                )
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
    qc = qc_design_problem(
        qc_arms=study.arms.filter(active=True, is_qc=True).count(),
        episodes_per_worker=study.episodes_per_worker,
        sessions=study.sessions_per_episode,
        qc_metrics=study.metrics.filter(reversed=False).count() or study.metrics.count(),
    )
    if qc:
        problems.append(qc[0].lower() + qc[1:].rstrip("."))
    qc_arms = study.arms.filter(active=True, is_qc=True).count()
    pair = side_by_side_problem(
        side_by_side=study.side_by_side, real_arms=active - qc_arms, qc_arms=qc_arms,
        episodes_per_worker=study.episodes_per_worker,
    )  # fmt: skip
    if pair:
        problems.append(pair[0].lower() + pair[1:].rstrip("."))
    return problems


# Prolific: one attention check for studies under 5 minutes, two or more for longer ones (a rejection may
# only rest on failing two of them in a longer study).
PROLIFIC_SHORT_STUDY_MINUTES = 5


def design_warnings(study: Study) -> list[str]:
    """What a saved study can run with but a researcher should know (shown on the study and edit pages)."""
    out = []
    qc = study.qc_arm()
    n_metrics = study.metrics.filter(reversed=False).count() or study.metrics.count()
    if qc is None:
        out.append(
            "No quality-control arm: the per-worker QC test (Ji et al. 2022) cannot run. Add an arm with the "
            "memory system qc to have every worker meet a degraded bot in one of their episodes."
        )
    elif study.episodes_per_worker >= 2 and n_metrics:
        n_qc = study.sessions_per_episode * n_metrics
        best = best_attainable_p(n_qc, n_qc * (study.episodes_per_worker - 1))
        if QC_COMFORTABLE_P <= best < ALPHA:
            out.append(
                f"The QC test has little room: even a worker who rates every QC session below every other one gets "
                f"p = {best:.3g} at best (it must be below {ALPHA}); ties make it larger. Consider more sessions "
                "or metrics."
            )
    out += personas.persona_warnings(study)
    checks = study.attention_checks.count()
    needed = 1 if study.estimated_time_minutes < PROLIFIC_SHORT_STUDY_MINUTES else 2
    if checks < needed:
        out.append(
            f"{checks} attention check(s): Prolific expects one for studies under {PROLIFIC_SHORT_STUDY_MINUTES} "
            "minutes and two or more for longer ones before a failed check can count."
        )
    return out


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


class TeamInviteForm(forms.Form):
    """The owner's invitation of a co-researcher (studies/team.py)."""

    role = forms.ChoiceField(choices=StudyInvitation.Role.choices, initial=StudyInvitation.Role.EDITOR)
    note = forms.CharField(max_length=200, required=False, label="For", help_text="Whom it is for (only you see this).")


class SharingForm(forms.ModelForm[Study]):
    """Which other researchers (active staff users) may see and change the study (editors), or only see it (viewers)."""

    class Meta:
        model = Study
        fields = ["shared_with", "viewers"]
        widgets = {"shared_with": forms.CheckboxSelectMultiple, "viewers": forms.CheckboxSelectMultiple}
        labels = {"shared_with": "Editors", "viewers": "Viewers"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        researchers = User.objects.filter(is_active=True, is_staff=True).order_by("username")
        if self.instance.created_by_id is not None:
            researchers = researchers.exclude(id=self.instance.created_by_id)
        for name in ("shared_with", "viewers"):
            if name in self.fields:
                cast("forms.ModelMultipleChoiceField[User]", self.fields[name]).queryset = researchers
                self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        both = set(data.get("shared_with") or []) & set(data.get("viewers") or [])
        if both:
            names = ", ".join(sorted(u.username for u in both))
            raise forms.ValidationError(f"One role each: {names} cannot be both an editor and a viewer.")
        return data
