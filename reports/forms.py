from __future__ import annotations

from typing import Any

from django import forms

from analysis.stats import TESTS
from reports.imports import Mapping, split_names

MAX_UPLOAD_BYTES = 50 * 2**20  # ~1M ratings in the wide layout; the import is one request, not a background job

TEST_CHOICES = [
    ("mwu-greater", "Mann-Whitney U, one-sided (Ji et al.)"),
    ("mwu-two-sided", "Mann-Whitney U, two-sided"),
    ("welch", "Welch's t-test"),
]
assert {c for c, _ in TEST_CHOICES} == set(TESTS)


class AnalysisOptionsForm(forms.Form):
    """The options of the analysis page (GET)."""

    test = forms.ChoiceField(choices=TEST_CHOICES, required=False, initial="mwu-greater")

    def chosen_test(self) -> str:
        if self.is_valid() and self.cleaned_data.get("test"):
            return str(self.cleaned_data["test"])
        return "mwu-greater"


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
        if upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(f"The file is larger than {MAX_UPLOAD_BYTES // 2**20} MB.")
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
