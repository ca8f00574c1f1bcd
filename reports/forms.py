from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.conf import settings

from analysis.spec import DEFAULT_FAMILY, DEFAULT_TEST, FAMILIES, TESTS, Family, Test
from chat.quality import DEFAULT_ROW_FILTERS
from reports.imports import Mapping, split_names

if TYPE_CHECKING:
    from reports.planning import PairwisePlanSettings, PlanSettings

TEST_CHOICES = [
    ("cluster-t", "t-test, worker-clustered standard errors (default)"),
    ("mwu-greater", "Mann-Whitney U, one-sided (Ji et al. replication)"),
    ("mwu-two-sided", "Mann-Whitney U, two-sided"),
    ("welch", "Welch's t-test"),
]
assert {c for c, _ in TEST_CHOICES} == set(TESTS)
FAMILY_CHOICES = [
    ("metric", "Holm within each metric (default)"),
    ("all-metrics", "Holm across all metrics"),
    ("all", "Holm across every test"),
]
assert {c for c, _ in FAMILY_CHOICES} == set(FAMILIES)


# The live dashboard's exclusion filters: columns of the study's ratings frame (chat.quality.SIGNAL_COLUMNS).
# "unfinished" removes rows (the ratings of episodes not finished); the others remove the whole worker.
EXCLUSION_CHOICES = [
    ("unfinished", "Unfinished episodes (their ratings)"),
    ("attention_failed", "Workers who failed an attention check"),
    ("flag_paste", "Workers flagged for pasting"),
    ("authenticity_flagged", "Workers with any authenticity flag"),
    ("too_fast", "Workers with a session more than 3 SD too fast"),
    ("silent_session", "Sessions the chatbot did not answer (their ratings; on by default)"),
    ("non_blind", "Non-blind sessions: a bot turn named an arm, vendor or memory tool (their ratings; on by default)"),
]
ROW_EXCLUSIONS = ("unfinished", "silent_session", "non_blind")
DEFAULT_EXCLUSIONS = DEFAULT_ROW_FILTERS  # unless the page's filters say otherwise (chat.quality)
# The filter form posts this marker with its boxes, so that unticking a default filter is told from a link
# that names no filter at all (which gets the defaults).
FILTERS_CHOSEN = "filters"


def chosen_exclusions(
    values: Sequence[str], *, chosen_on_page: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ticked filters, split into worker-level (``exclude``) and row-level (``exclude_rows``) columns, in the
    page's order; unknown names are ignored (a stale bookmark still opens the page). Unless the filters were
    chosen on the page (``chosen_on_page``), the :data:`DEFAULT_EXCLUSIONS` apply as well."""
    wanted = set(values) if chosen_on_page else {*values, *DEFAULT_EXCLUSIONS}
    chosen = [c for c, _ in EXCLUSION_CHOICES if c in wanted]
    return (
        tuple(c for c in chosen if c not in ROW_EXCLUSIONS),
        tuple(c for c in chosen if c in ROW_EXCLUSIONS),
    )


class AnalysisOptionsForm(forms.Form):
    """The options of the analysis page (GET)."""

    test = forms.ChoiceField(choices=TEST_CHOICES, required=False, initial=DEFAULT_TEST)
    family = forms.ChoiceField(choices=FAMILY_CHOICES, required=False, initial=DEFAULT_FAMILY)

    def chosen_test(self) -> Test:
        if self.is_valid() and self.cleaned_data.get("test"):
            return cast(Test, self.cleaned_data["test"])
        return DEFAULT_TEST

    def chosen_family(self) -> Family:
        if self.is_valid() and self.cleaned_data.get("family"):
            return cast(Family, self.cleaned_data["family"])
        return DEFAULT_FAMILY


class ImportRatingsForm(forms.Form):
    """Upload a ratings CSV and say which columns hold what."""

    name = forms.CharField(max_length=200, help_text="A label for this dataset, e.g. 'Ji et al. 2022, run 1'.")
    file = forms.FileField(help_text="CSV with a header row, UTF-8.")
    layout = forms.ChoiceField(
        choices=[("wide", "Wide: one column per metric"), ("long", "Long: a metric column and a score column")],
        initial="wide",
        widget=forms.RadioSelect,
    )
    # The column inputs offer the uploaded file's header as suggestions (a <datalist> filled in the browser).
    worker = forms.CharField(max_length=200, label="Worker column")
    unit = forms.CharField(max_length=200, label="Unit column", help_text="The rated conversation/episode/HIT.")
    arm = forms.CharField(max_length=200, label="Arm column", help_text="The system that was rated.")
    session = forms.CharField(max_length=200, required=False, label="Session column (optional)")
    metrics = forms.CharField(
        required=False,
        label="Metrics",
        help_text="Wide: the metric columns, comma-separated. Long: the metric names to keep (empty = all).",
    )
    metric_column = forms.CharField(max_length=200, required=False, initial="metric", label="Metric column (long)")
    score_column = forms.CharField(max_length=200, required=False, initial="score", label="Score column (long)")
    reverse = forms.CharField(
        required=False, label="Reversed metrics", help_text="Higher is worse: analysed as 100 - score."
    )
    qc_arm = forms.CharField(
        max_length=200,
        required=False,
        label="QC arm (optional)",
        help_text="The value of the arm column that marks the degraded quality-control bot.",
    )
    qc_metrics = forms.CharField(
        required=False,
        label="QC metrics",
        help_text="The metrics the QC test uses (the positive ones). Empty = all metrics.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("worker", "unit", "arm", "session", "metric_column", "score_column"):
            self.fields[name].widget.attrs.update({"list": "csv-columns", "autocomplete": "off"})

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        # Larger requests are refused before they are read (evalsite.bodylimit); this names the file's own limit.
        limit = settings.MAX_UPLOAD_BYTES
        if upload.size > limit:
            raise forms.ValidationError(f"The file is larger than {limit / 2**20:g} MB (MAX_UPLOAD_MB).")
        return upload

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("layout") == "wide" and not split_names(data.get("metrics") or ""):
            self.add_error("metrics", "Name the metric columns of the wide table.")
        if split_names(data.get("qc_metrics") or "") and not (data.get("qc_arm") or "").strip():
            self.add_error("qc_arm", "QC metrics are given but no QC arm.")
        return data

    def mapping(self) -> Mapping:
        d = self.cleaned_data
        long = d["layout"] == "long"
        return Mapping(
            worker=d["worker"].strip(),
            unit=d["unit"].strip(),
            arm=d["arm"].strip(),
            layout=d["layout"],
            session=(d.get("session") or "").strip() or None,
            metrics=split_names(d.get("metrics") or ""),
            metric_column=((d.get("metric_column") or "").strip() or "metric") if long else None,
            score_column=((d.get("score_column") or "").strip() or "score") if long else None,
            reverse=split_names(d.get("reverse") or ""),
            qc_arm=(d.get("qc_arm") or "").strip() or None,
            qc_metrics=split_names(d.get("qc_metrics") or ""),
        )


class PlanForm(forms.Form):
    """The planning page: where the variance components come from, the smallest effect, the target power."""

    pilot = forms.ChoiceField(label="Variance components from", widget=forms.RadioSelect)
    worker_sd = forms.FloatField(min_value=0, label="Worker leniency SD (points)")
    scale_sd = forms.FloatField(min_value=0, max_value=2, label="SD of log range use")
    episode_sd = forms.FloatField(min_value=0, label="Episode SD (points)")
    session_sd = forms.FloatField(min_value=0, label="Session SD (points)")
    residual_sd = forms.FloatField(min_value=0, label="Single rating SD (points)")
    careless_rate = forms.FloatField(min_value=0, max_value=0.9, label="Share of careless workers")
    effect = forms.FloatField(min_value=0.01, initial=0.3, label="Smallest effect of interest")
    effect_unit = forms.ChoiceField(
        choices=[("latent", "latent SD"), ("points", "slider points")],
        initial="latent",
        help_text="A latent SD is the SD of one rating around its arm's mean for a typical worker.",
    )
    target = forms.FloatField(min_value=0.5, max_value=0.99, initial=0.8, label="Target power")
    test = forms.ChoiceField(choices=TEST_CHOICES, initial=DEFAULT_TEST)
    family = forms.ChoiceField(choices=FAMILY_CHOICES, initial=DEFAULT_FAMILY, label="Holm family")
    studies = forms.IntegerField(min_value=20, max_value=1000, initial=100, label="Simulated studies per size")
    max_workers = forms.IntegerField(min_value=4, max_value=2000, initial=400, label="Largest study to try")

    def __init__(self, *args: Any, datasets: Sequence[tuple[int, str]] = (), **kwargs: Any) -> None:
        from analysis.synthetic import VarianceComponents

        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["pilot"]).choices = [
            ("assumed", "the values below"),
            ("study", "this study's ratings so far, as a pilot"),
            *((f"dataset:{pk}", f"the imported dataset “{name}”, as a pilot") for pk, name in datasets),
        ]
        self.fields["pilot"].initial = "assumed"
        defaults = VarianceComponents()
        for name in ("worker_sd", "scale_sd", "episode_sd", "session_sd", "residual_sd", "careless_rate"):
            self.fields[name].initial = getattr(defaults, name)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if all(data.get(n) == 0 for n in ("episode_sd", "session_sd", "residual_sd")):
            self.add_error("residual_sd", "Episode, session and rating SD cannot all be 0.")
        return data

    def settings(self) -> PlanSettings:
        """The settings of a valid form."""
        from analysis.synthetic import VarianceComponents
        from reports.planning import PlanSettings

        d = self.cleaned_data
        components = VarianceComponents(
            worker_sd=d["worker_sd"],
            scale_sd=d["scale_sd"],
            episode_sd=d["episode_sd"],
            session_sd=d["session_sd"],
            residual_sd=d["residual_sd"],
            careless_rate=d["careless_rate"],
        )
        return PlanSettings(
            pilot=d["pilot"],
            components=components,
            effect=d["effect"],
            effect_unit=d["effect_unit"],
            target=d["target"],
            test=cast(Test, d["test"]),
            family=cast(Family, d["family"]),
            studies=d["studies"],
            max_workers=d["max_workers"],
        )


class PairwisePlanForm(forms.Form):
    """The planning page's pairwise design: the options of ``python -m analysis plan-pairwise``, with its
    defaults (the arms default to the study's real arms). Prefixed ``pw`` beside the ratings' form."""

    prefix = "pw"

    arms = forms.IntegerField(min_value=2, max_value=20, label="Arms compared",
                              help_text="The QC arm of the check pairs is not counted.")  # fmt: skip
    judges = forms.IntegerField(min_value=4, max_value=2000, initial=20, label="Fewest judges tried")
    votes_per_judge = forms.IntegerField(min_value=1, max_value=200, initial=10, label="Votes per judge",
                                         help_text="Pairs (ACUTE-Eval) or live sessions each judge votes on.")  # fmt: skip
    win_rate = forms.FloatField(min_value=0.51, max_value=0.99, initial=0.6, label="Smallest effect: win rate",
                                help_text="How often the best arm wins a decided vote against each other arm.")  # fmt: skip
    judge_sd = forms.FloatField(min_value=0, max_value=3, initial=0.5, label="SD of a judge's own taste (log-odds)")
    tie_rate = forms.FloatField(min_value=0, max_value=0.9, initial=0.1, label="Share of ties and 'both bad'")
    position = forms.FloatField(min_value=-2, max_value=2, initial=0.0, label="Advantage of the first side (log-odds)")
    careless = forms.FloatField(min_value=0, max_value=0.9, initial=0.0, label="Share of careless judges")
    target = forms.FloatField(min_value=0.5, max_value=0.99, initial=0.8, label="Target power")
    studies = forms.IntegerField(min_value=20, max_value=1000, initial=200, label="Simulated studies per size")
    max_judges = forms.IntegerField(min_value=4, max_value=2000, initial=2000, label="Most judges to try")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=1, label="Random seed")

    def __init__(self, *args: Any, arms: int = 4, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["arms"].initial = arms

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("judges") and data.get("max_judges") and data["judges"] > data["max_judges"]:
            self.add_error("max_judges", "The most judges to try cannot be fewer than the fewest.")
        return data

    def settings(self) -> PairwisePlanSettings:
        """The settings of a valid form."""
        from reports.planning import PairwisePlanSettings

        return PairwisePlanSettings(**{name: self.cleaned_data[name] for name in self.fields})


PROBE_PRIMARY_CHOICES = [
    ("recall", "Recall of current facts"),
    ("stale_rate", "Stale-fact rate"),
    ("deletion_honoured", "Deletion honoured"),
    ("dependent_consistent", "Dependent facts consistent"),
]


class RegisterForm(forms.Form):
    """Freeze a pre-registration of the study as configured now. A study with persona cards may also make
    probe rates primary outcomes (``probe_primary``); without persona cards the field is not there."""

    test = forms.ChoiceField(choices=TEST_CHOICES, initial=DEFAULT_TEST)
    family = forms.ChoiceField(choices=FAMILY_CHOICES, initial=DEFAULT_FAMILY, label="Holm family")
    probe_primary = forms.MultipleChoiceField(
        choices=PROBE_PRIMARY_CHOICES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Primary probe rates",
        help_text="Persona-card probe rates to test as primary outcomes: their arm comparisons over whole episodes "
        "(live, every probe mode) are Holm-corrected as one primary family; the other probe tests stay exploratory.",
    )
    notes = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Further exclusion rules and notes",
        help_text="Stored verbatim in the registration (e.g. 'workers flagged for pasted messages are excluded').",
    )
    job = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, persona_cards: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not persona_cards:
            del self.fields["probe_primary"]
