"""From a tidy ratings frame to everything the dashboard and the exports show. No ORM here.

A :class:`Source` is what the views build with :mod:`reports.queries` (a live study, or an imported dataset);
:func:`build_report` runs the analysis library on it once; plots and export files are rendered from that.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pandas as pd

from analysis import plots
from analysis.data import RatingsError
from analysis.report import run as run_analysis
from analysis.stats import Test

FORMATS: dict[str, tuple[str, str]] = {
    # name: (file extension, content type)
    "csv": ("csv", "text/csv; charset=utf-8"),
    "json": ("json", "application/json"),
    "md": ("md", "text/markdown; charset=utf-8"),
    "latex": ("tex", "application/x-tex; charset=utf-8"),
    "html": ("html", "text/html; charset=utf-8"),
}


@dataclass
class Source:
    """A long ratings frame (worker, unit, arm, session, metric, score) and how to analyse it."""

    title: str
    slug: str  # used in download file names
    frame: pd.DataFrame
    metrics: list[str]
    reverse: list[str] = field(default_factory=list)
    has_session: bool = True
    qc_arm: str | None = None
    qc_metrics: list[str] = field(default_factory=list)


@dataclass
class Report:
    """The outcome of one analysis: either ``result`` (the library's JSON dict) or ``message`` saying why not."""

    source: Source
    test: str
    result: dict[str, Any] | None = None
    ratings: pd.DataFrame | None = None
    message: str = ""
    cache_key: str = ""  # set by whoever caches it; plots drawn from it are cached under the same key

    @property
    def ok(self) -> bool:
        return self.result is not None


def build_report(source: Source, *, test: str = "mwu-greater") -> Report:
    """Analyse ``source``; too little or unusable data gives a Report with a message instead of an exception."""
    if source.frame.empty:
        return Report(source, test, message="No ratings yet. The analysis appears once sessions have been rated.")
    if not source.metrics:
        return Report(source, test, message="The study has no metrics to analyse.")
    frame, layout = _layout(source)
    try:
        analysis = run_analysis(
            frame,
            worker="worker",
            unit="unit",
            arm="arm",
            session="session" if source.has_session else None,
            metrics=source.metrics,
            reverse=source.reverse,
            qc_arm=source.qc_arm or None,
            qc_metrics=source.qc_metrics if source.qc_arm else (),
            test=cast(Test, test),  # a choice of AnalysisOptionsForm, whose choices are analysis.stats.TESTS
            **layout,
        )
    except RatingsError as exc:
        return Report(source, test, message=f"Not enough usable data for an analysis yet: {exc}")
    return Report(source, test, result=analysis.result, ratings=analysis.ratings)


def _layout(source: Source) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The frame to analyse and how. An imported dataset (it has a ``row`` column) goes back to one row per rated
    conversation in the uploaded file's order, so the analysis sees exactly what it would see reading the file."""
    frame = source.frame
    if "row" not in frame:
        return frame, {"metric_col": "metric", "value_col": "score"}
    keys = ["row", "worker", "unit", "arm", "session"]
    wide = frame.pivot(index=keys, columns="metric", values="score").reset_index().sort_values("row")
    wide.columns.name = None
    for m in source.metrics:
        if m not in wide:
            wide[m] = float("nan")
    return wide[[*keys[1:], *source.metrics]].reset_index(drop=True), {}


def filename(report: Report, fmt: str) -> str:
    ext = FORMATS[fmt][0]
    stem = f"{report.source.slug}-ratings-z" if fmt == "csv" else f"{report.source.slug}-analysis"
    return f"{stem}.{ext}"


def export(report: Report, fmt: str) -> str:
    """The text of one export file. ``report`` must be ok."""
    assert report.result is not None and report.ratings is not None
    from analysis import writers

    if fmt == "csv":
        return writers.to_csv(report.ratings)
    if fmt == "json":
        return json.dumps(report.result, indent=2, allow_nan=False)
    if fmt == "md":
        return writers.to_markdown(report.result)
    if fmt == "latex":
        return writers.to_latex(report.result)
    if fmt == "html":
        return writers.to_html(report.result, title=f"{report.source.title}: analysis report")
    raise KeyError(fmt)


# --- plots (drawn by analysis.plots): name -> (title, function of the result; None when it does not apply)
def _sessions(result: dict[str, Any]) -> str | None:
    return plots.session_means(result, "overall") if result["by_session"] else None


def _arms(result: dict[str, Any]) -> str | None:
    return plots.arm_scores(result) if result["arm_order"] else None


def _pvalues(result: dict[str, Any]) -> str | None:
    return plots.pvalue_heatmap(result) if len(result["arm_order"]) > 1 else None


def _correlations(result: dict[str, Any]) -> str | None:
    if len(result["params"]["metrics"]) < 2 or not result["correlations"]:
        return None
    level = "unit" if any(c["level"] == "unit" for c in result["correlations"]) else "rating"
    return plots.correlation_matrix(result, level)


PLOTS: dict[str, tuple[str, Callable[[dict[str, Any]], str | None]]] = {
    "sessions": ("Overall score per session and arm (95% CI)", _sessions),
    "arms": ("Scores per arm and metric (95% CI)", _arms),
    "pvalues": ("Pairwise p-values, overall (Holm)", _pvalues),
    "correlations": ("Metric correlations", _correlations),
}
PLOT_NAMES = tuple(PLOTS)


def plot_titles() -> dict[str, str]:
    return {name: title for name, (title, _) in PLOTS.items()}


def render_plot(report: Report, name: str) -> str | None:
    """One plot as an SVG string, or None if it does not apply to this data (e.g. no sessions, one arm)."""
    assert report.result is not None
    return PLOTS[name][1](report.result)
