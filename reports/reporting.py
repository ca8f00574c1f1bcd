"""From a tidy ratings frame to everything the dashboard and the exports show. No ORM here.

A :class:`Source` is what the views build with :mod:`reports.queries` (a live study, or an imported dataset);
:func:`build_report` runs the analysis library on it once; plots and export files are rendered from that.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from analysis.data import RatingsError
from analysis.report import run as run_analysis
from analysis.spec import DEFAULT_TEST, AnalysisSpec, Test

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
    """A long ratings frame (worker, unit, arm, session, metric, score) and how to analyse it (``spec`` names the
    frame's columns; None when there is nothing to analyse, e.g. a study without metrics)."""

    title: str
    slug: str  # used in download file names
    frame: pd.DataFrame
    spec: AnalysisSpec | None


def source_spec(
    metrics: Sequence[str],
    *,
    reverse: Sequence[str] = (),
    has_session: bool = True,
    qc_arm: str | None = None,
    qc_metrics: Sequence[str] = (),
) -> AnalysisSpec | None:
    """The spec of a :class:`Source` frame, or None without metrics."""
    if not metrics:
        return None
    return AnalysisSpec(
        worker="worker",
        unit="unit",
        arm="arm",
        session="session" if has_session else None,
        metrics=tuple(metrics),
        reverse=tuple(reverse),
        qc_arm=qc_arm or None,
        qc_metrics=tuple(qc_metrics) if qc_arm else (),
    )


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


def build_report(source: Source, *, test: Test = DEFAULT_TEST, **options: Any) -> Report:
    """Analyse ``source`` with its spec changed by ``test`` and ``options`` (spec fields, e.g. ``family``,
    ``preregistration``); too little or unusable data gives a Report with a message instead of an exception."""
    if source.frame.empty:
        return Report(source, test, message="No ratings yet. The analysis appears once sessions have been rated.")
    if source.spec is None:
        return Report(source, test, message="The study has no metrics to analyse.")
    try:
        frame, spec = analysis_frame(source, source.spec)
        analysis = run_analysis(frame, replace(spec, test=test, **options))
    except RatingsError as exc:
        return Report(source, test, message=f"Not enough usable data for an analysis yet: {exc}")
    return Report(source, test, result=analysis.result, ratings=analysis.ratings)


def analysis_frame(source: Source, spec: AnalysisSpec) -> tuple[pd.DataFrame, AnalysisSpec]:
    """The frame to analyse and the spec that reads it. A live study's long frame is read as is; an imported
    dataset (it has a ``row`` column) goes back to one row per rated conversation in the uploaded file's order,
    so the analysis sees exactly what it would see reading the file."""
    frame = source.frame
    if "row" not in frame:
        return frame, replace(spec, metric_col="metric", value_col="score")
    keys = ["row", "worker", "unit", "arm", "session"]
    wide = frame.pivot(index=keys, columns="metric", values="score").reset_index().sort_values("row")
    wide.columns.name = None
    for m in spec.metrics:
        if m not in wide:
            wide[m] = float("nan")
    return wide[[*keys[1:], *spec.metrics]].reset_index(drop=True), spec


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


# --- plots (drawn by analysis.plots, imported on first use: matplotlib is slow to import)
# name -> (title, function of the result; None when it does not apply)
def _sessions(result: dict[str, Any]) -> str | None:
    from analysis import plots

    return plots.session_means(result, "overall") if result["by_session"] else None


def _arms(result: dict[str, Any]) -> str | None:
    from analysis import plots

    return plots.arm_scores(result) if result["arm_order"] else None


def _pvalues(result: dict[str, Any]) -> str | None:
    from analysis import plots

    return plots.pvalue_heatmap(result) if len(result["arm_order"]) > 1 else None


def _correlations(result: dict[str, Any]) -> str | None:
    from analysis import plots

    if len(result["params"]["metrics"]) < 2 or not result["correlations"]:
        return None
    level = "unit" if any(c["level"] == "unit" for c in result["correlations"]) else "rating"
    return plots.correlation_matrix(result, level)


PLOTS: dict[str, tuple[str, Callable[[dict[str, Any]], str | None]]] = {
    "sessions": ("Overall score per session and arm (95% CI)", _sessions),
    "arms": ("Scores per arm and metric (95% CI)", _arms),
    "pvalues": ("Pairwise p-values, overall score (Holm-adjusted within its family)", _pvalues),
    "correlations": ("Metric correlations", _correlations),
}
PLOT_NAMES = tuple(PLOTS)


def plot_titles() -> dict[str, str]:
    return {name: title for name, (title, _) in PLOTS.items()}


def render_plot(report: Report, name: str) -> str | None:
    """One plot as an SVG string, or None if it does not apply to this data (e.g. no sessions, one arm)."""
    assert report.result is not None
    return PLOTS[name][1](report.result)
