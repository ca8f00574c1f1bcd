"""From a tidy ratings frame to everything the dashboard and the exports show. No ORM here.

A :class:`Source` is what the views build with :mod:`reports.queries` (a live study, or an imported dataset);
:func:`build_report` runs the analysis library on it once; plots and export files are rendered from that.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from analysis import writers
from analysis.data import RatingsError
from analysis.prereg import probe_primary
from analysis.probes import METRICS as PROBE_METRICS
from analysis.probes import analyze_probes
from analysis.probes import to_html as probes_html
from analysis.probes import to_markdown as probes_markdown
from analysis.report import run as run_analysis
from analysis.spec import ALPHA, DEFAULT_FAMILY, DEFAULT_TEST, AnalysisSpec, Test

FORMATS: dict[str, tuple[str, str]] = {
    # name: (file extension, content type)
    "csv": ("csv", "text/csv; charset=utf-8"),
    "json": ("json", "application/json"),
    "md": ("md", "text/markdown; charset=utf-8"),
    "latex": ("tex", "application/x-tex; charset=utf-8"),
    "html": ("html", "text/html; charset=utf-8"),
    # the input of the analysis, one row per rating with every quality signal column: what the CLI reads
    "data": ("csv", "text/csv; charset=utf-8"),
}


@dataclass
class Source:
    """A long ratings frame (worker, unit, arm, session, metric, score) and how to analyse it (``spec`` names the
    frame's columns; None when there is nothing to analyse, e.g. a study without metrics)."""

    title: str
    slug: str  # used in download file names
    frame: pd.DataFrame
    spec: AnalysisSpec | None
    pilot: bool = False  # a pilot study's exports say "pilot: not for publication"
    automatic: list[dict[str, Any]] = field(default_factory=list)  # automatic scores per arm (AUTOMATIC_COLUMNS)
    # persona-card probes (one row per scored probe, analysis.probes.COLUMNS): what the bot remembered
    probes: list[dict[str, Any]] = field(default_factory=list)
    latency: dict[str, Any] | None = None  # a live study's reply latency per arm (reports.queries.reply_latency)
    # the judge whose verdicts score the free-text probes (reports.probejudging, without its verdicts), or None
    probe_judge: dict[str, Any] | None = None
    # the newest finished offline card evaluation of each arm: its probes as rows (analysis.probes.offline_rows)
    # and one line per run (arm, model, backend, stand-in, cards, probes, bank, script, finished)
    offline: list[dict[str, Any]] = field(default_factory=list)
    offline_runs: list[dict[str, Any]] = field(default_factory=list)


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
    probes: dict[str, Any] | None = None  # analysis.probes.analyze_probes of the source's probes (None: no probes)
    # the study has a QC arm but no rating of it to test workers against yet: {"arm", "reason"} (see qc_waiting)
    qc_waiting: dict[str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None


def build_report(source: Source, *, test: Test = DEFAULT_TEST, **options: Any) -> Report:
    """Analyse ``source`` with its spec changed by ``test`` and ``options`` (spec fields, e.g. ``family``,
    ``preregistration``); too little or unusable data gives a Report with a message instead of an exception.
    The persona-card probes, if any, are analysed beside the ratings (``Report.probes``) whatever they hold."""
    probes = probe_report(source, test, options.get("preregistration"))
    if source.frame.empty:
        return Report(source, test, message="No ratings yet. The analysis appears once sessions have been rated.",
                      probes=probes)  # fmt: skip
    if source.spec is None:
        return Report(source, test, message="The study has no metrics to analyse.", probes=probes)
    try:
        frame, spec = analysis_frame(source, source.spec)
        spec = replace(spec, test=test, **options)
        waiting = qc_waiting(frame, spec)
        if waiting is not None:
            spec = without_qc(spec)
        analysis = run_analysis(frame, spec)
    except RatingsError as exc:
        return Report(source, test, message=f"Not enough usable data for an analysis yet: {exc}",
                      probes=probes)  # fmt: skip
    return Report(source, test, result=analysis.result, ratings=analysis.ratings, qc_waiting=waiting,
                  probes=probes)  # fmt: skip


def probe_report(source: Source, test: str, preregistration: Any = None) -> dict[str, Any] | None:
    """What the bot remembered (analysis.probes) beside the sliders: the same test, the memorability ratings
    for "do people notice?", the rates a pre-registration made primary (``probes.primary``), and the offline
    card evaluation's rates beside the live ones (``offline``, with its ``runs``); an error in the probe table
    is a ``{"error": ...}`` the page shows, never a lost report."""
    if not source.probes:
        return None
    ratings = None
    frame = source.frame
    if not frame.empty and {"metric", "score", "unit", "session"} <= set(frame.columns):
        wide = frame[frame["metric"] == "memorability"]
        if not wide.empty:
            ratings = wide.rename(columns={"score": "memorability"})[["unit", "session", "memorability"]]
    primary: list[str] = []
    alpha = ALPHA
    if isinstance(preregistration, dict):
        primary = [m for m in probe_primary(preregistration) if m in probe_metrics()]
        alpha = float((preregistration.get("analysis") or {}).get("alpha") or ALPHA)
    try:
        result = analyze_probes(source.probes, test=test, ratings=ratings, primary=primary, alpha=alpha,
                                offline=source.offline or None)  # fmt: skip
    except (RatingsError, ValueError) as exc:
        return {"error": str(exc)}
    if "offline" in result:
        result["offline"]["runs"] = source.offline_runs
    result["judge"] = source.probe_judge  # who scored the free-text facts, with its admission figures
    return result


def probe_metrics() -> list[str]:
    return list(PROBE_METRICS)


def qc_waiting(frame: pd.DataFrame, spec: AnalysisSpec) -> dict[str, str] | None:
    """Why the per-worker QC test cannot run yet, or None when it can (or there is no QC arm): in a live study
    no worker may have rated a QC session yet (every worker meets the QC arm in one of their episodes, at a
    random place), or the exclusion filters removed every such rating. The analysis then runs without the QC
    test instead of refusing the study, and every report says that the test is waiting for data."""
    arm = spec.qc_arm
    if arm is None:
        return None
    rows = frame[spec.arm] == arm
    if not rows.any():
        return {"arm": arm, "reason": f"no session of the QC arm '{arm}' has been rated yet"}
    flagged = pd.Series(False, index=frame.index)
    for col in spec.exclude:  # a flagged worker's every row goes
        if col in frame:
            flagged |= frame[spec.worker].isin(frame.loc[frame[col].astype(bool), spec.worker])
    for col in spec.exclude_rows:
        if col in frame:
            flagged |= frame[col].astype(bool)
    if not (rows & ~flagged).any():
        return {"arm": arm, "reason": f"the exclusion filters removed every rating of the QC arm '{arm}'"}
    return None


def qc_waiting_text(waiting: dict[str, str]) -> str:
    return (
        f"QC test waiting for data: {waiting['reason']}. The analysis runs without the per-worker QC test until a "
        "rated QC session is there to test workers against."
    )


def without_qc(spec: AnalysisSpec) -> AnalysisSpec:
    return replace(spec, qc_arm=None, qc_metrics=())


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
    """The download's file name; a pilot study's carry ``-PILOT`` after the slug, as the raw-data exports'."""
    return _filename(report.source, fmt)


def _filename(source: Source, fmt: str) -> str:
    ext = FORMATS[fmt][0]
    slug = f"{source.slug}-PILOT" if source.pilot else source.slug
    if fmt == "data":
        return f"{slug}-ratings.{ext}"
    return f"{slug}-ratings-z.{ext}" if fmt == "csv" else f"{slug}-analysis.{ext}"


PILOT_MARK = "pilot: not for publication"

# The automatic evaluation of each arm (``python -m memory eval`` run from the study page), as exported.
AUTOMATIC_COLUMNS: dict[str, str] = {
    "arm": "the arm's name",
    "memory_system": "its memory system",
    "dataset": "the evaluation set (gvd: MemoryBank's probing questions)",
    "backend": "LLM backend of the arm (and of the judge)",
    "model": "LLM model of the arm",
    "questions": "questions asked",
    "f1": "mean token F1 of the answers against the gold answers (headline categories)",
    "judge": "J: share of answers the LLM judge labelled CORRECT (stand-in judge: F1 >= 0.5)",
    "judge_stand_in": "true when no model judged (scripted backend)",
    "stand_in_model": "true when a stand-in answered (scripted or the embedded demo model): the scores measure nothing",
    "gold_note": "where the gold answers come from, when they are not the benchmark's own (GVD: written for memeval)",
    "finished_at": "when the evaluation finished (UTC)",
}


def export(report: Report, fmt: str) -> str:
    """The text of one export file. ``report`` must be ok. A pilot study's files carry the pilot mark,
    and the arms' automatic scores are added where the format has room for them."""
    assert report.result is not None and report.ratings is not None
    source = report.source
    if fmt == "data":
        return data_csv(report.source)
    if fmt == "csv":
        text = writers.to_csv(report.ratings)
        if not source.pilot:
            return text
        # header lines counted on the first, as the raw-data exports do (reports.exports): comment="#" would also
        # cut a cell holding a "#"
        return f"# 2 header lines; read the table with pandas.read_csv(path, skiprows=2)\n# {PILOT_MARK}\n{text}"
    if fmt == "json":
        extra = {
            "pilot": source.pilot,
            "automatic_evaluation": source.automatic,
            "qc_waiting": report.qc_waiting,
            "reply_latency": source.latency,
        }
        if report.probes is not None:
            extra["probes"] = report.probes
        return json.dumps({**report.result, **extra}, indent=2, allow_nan=False)
    waiting = qc_waiting_text(report.qc_waiting) if report.qc_waiting else ""
    if fmt == "md":
        text = (
            writers.to_markdown(report.result)
            + _latency_markdown(source.latency)
            + _automatic_markdown(source.automatic)
        )
        if report.probes and "error" not in report.probes:
            text += "\n" + probes_markdown(report.probes)
        text = f"> **{waiting}**\n\n{text}" if waiting else text
        return f"> **{PILOT_MARK.capitalize()}**\n\n{text}" if source.pilot else text
    if fmt == "latex":
        text = writers.to_latex(report.result) + _latency_latex(source.latency) + _automatic_latex(source.automatic)
        text = f"\\textbf{{{_latex_escape(waiting)}}}\n\n{text}" if waiting else text
        return f"% {PILOT_MARK}\n\\textbf{{{PILOT_MARK.capitalize()}}}\n\n{text}" if source.pilot else text
    if fmt == "html":
        text = writers.to_html(report.result, title=f"{source.title}: analysis report")
        if report.probes and "error" not in report.probes:
            section = probes_html(report.probes)
            text = text.replace("</body>", section + "\n</body>", 1) if "</body>" in text else text + section
        return _html_extras(text, source, waiting)
    raise KeyError(fmt)


def data_csv(source: Source) -> str:
    """The source's ratings as the analysis reads them (long: metric and score columns), signal columns included.
    A pilot study's rows carry the pilot mark in a ``pilot`` column: a ``#`` line, as on the other CSV exports,
    would stop ``python -m analysis`` from reading the file, and a column survives any later merge."""
    frame = source.frame.assign(pilot=PILOT_MARK) if source.pilot else source.frame
    return writers.to_csv(frame)  # formula-like text cells get a leading ' (cli_command names them the same way)


def _cells(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(writers.neutralise_cell(n) for n in names)


def cli_command(source: Source, spec: AnalysisSpec, *, test: str, family: str) -> str:
    """The ``python -m analysis report`` command that reproduces this report from the "data" export."""
    parts = [
        "python -m analysis report",
        _filename(source, "data"),
        f"--worker {spec.worker} --unit {spec.unit} --arm {spec.arm}",
    ]
    if spec.session:
        parts.append(f"--session {spec.session}")
    # names as the export writes them: one starting with = + - @ has the leading ' there (writers.neutralise_cell)
    spec = replace(
        spec,
        metrics=_cells(spec.metrics),
        reverse=_cells(spec.reverse),
        qc_metrics=_cells(spec.qc_metrics),
        qc_arm=writers.neutralise_cell(spec.qc_arm),
    )
    parts.append("--metrics " + shlex.quote(",".join(spec.metrics)))
    parts.append("--metric-col metric --value-col score")  # the export is long: one row per rating
    if spec.reverse:
        parts.append("--reverse " + shlex.quote(",".join(spec.reverse)))
    if spec.qc_arm:
        parts.append(f"--qc-arm {shlex.quote(spec.qc_arm)}")
        if spec.qc_metrics:
            parts.append("--qc-metrics " + shlex.quote(",".join(spec.qc_metrics)))
    if test != DEFAULT_TEST:
        parts.append(f"--test {test}")
    if family != DEFAULT_FAMILY:
        parts.append(f"--family {family}")
    if spec.exclude:
        parts.append("--exclude " + ",".join(spec.exclude))
    if spec.exclude_rows:
        parts.append("--exclude-rows " + ",".join(spec.exclude_rows))
    if spec.include_non_blind:
        parts.append("--include-non-blind")
    if spec.covariates:
        parts.append("--covariates " + ",".join(spec.covariates))
    return " ".join(parts) + " --format md"


def _score(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}"


STAND_IN_NOTE = "Stand-in model (scripted or the embedded demo model): its scores measure nothing about the arm."


def automatic_notes(rows: list[dict[str, Any]]) -> list[str]:
    """What a reader must know beside the automatic scores: stand-in models, gold answers not the benchmark's."""
    notes = [STAND_IN_NOTE] if any(r.get("stand_in_model") for r in rows) else []
    return notes + sorted({r["gold_note"] for r in rows if r.get("gold_note")})


def _seconds(x: Any) -> str:
    return "-" if x is None else f"{x:.1f}"


def latency_rows(latency: dict[str, Any] | None) -> tuple[list[str], list[list[str]]]:
    """The per-arm reply latency table (``reports.queries.reply_latency``) as text cells."""
    header = [
        "Arm",
        "Replies",
        "First piece (model)",
        "Whole reply (model)",
        "Shown (after pacing)",
        "Later than pacing",
    ]
    rows = []
    for a in (latency or {}).get("arms") or []:
        rows.append(
            [
                str(a["arm"]),
                str(a["replies"]),
                *(f"{_seconds(a[f'{k}_median_s'])} ({_seconds(a[f'{k}_p90_s'])})" for k in ("first", "reply", "shown")),
                "-" if a["later_than_schedule"] is None else str(a["later_than_schedule"]),
            ]
        )
    return header, rows


def latency_caption(latency: dict[str, Any]) -> str:
    p = latency["pacing"]
    paced = (
        f"pacing on: a reply is shown no sooner than {p['min_seconds']:g} s after the worker's message, then at most "
        f"{p['chars_per_second']:g} characters/s"
        if p["on"]
        else "pacing off: each reply is shown as fast as its arm writes it, so timing may tell the arms apart"
    )
    return f"Reply latency per arm, median (90th percentile) in seconds; {latency['note']}; {paced}."


def _latency_markdown(latency: dict[str, Any] | None) -> str:
    if not latency or not latency.get("arms"):
        return ""
    header, rows = latency_rows(latency)
    lines = ["", "## Reply latency per arm", "", latency_caption(latency), "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _latency_latex(latency: dict[str, Any] | None) -> str:
    if not latency or not latency.get("arms"):
        return ""
    header, rows = latency_rows(latency)
    body = "".join(" & ".join(_latex_escape(c) for c in r) + " \\\\\n" for r in rows)
    return (
        f"\n% {_latex_escape(latency_caption(latency))}\n\\begin{{tabular}}{{lrrrrr}}\n\\hline\n"
        + " & ".join(_latex_escape(h) for h in header)
        + " \\\\\n\\hline\n"
        + body
        + "\\hline\n\\end{tabular}\n"
    )


def _automatic_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    lines = [
        "",
        "## Automatic evaluation",
        "",
        "| arm | dataset | model | questions | F1 | J |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        judge = _score(r["judge"]) + (" (stand-in)" if r["judge_stand_in"] else "")
        lines.append(
            f"| {r['arm']} | {r['dataset']} | {r['backend']} · {r['model']} | {r['questions']} | {_score(r['f1'])} | {judge} |"
        )
    lines += [""] + [f"Note: {n}" for n in automatic_notes(rows)]
    return "\n".join(lines) + "\n"


def _latex_escape(text: str) -> str:
    return "".join("\\" + c if c in "&%$#_{}" else c for c in str(text))


def _automatic_latex(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    body = "".join(
        f"{_latex_escape(r['arm'])} & {_latex_escape(r['dataset'])} & {r['questions']} & {_score(r['f1'])} & "
        f"{_score(r['judge'])} \\\\\n"
        for r in rows
    )
    notes = "".join(f"% Note: {n}\n" for n in automatic_notes(rows))
    return (
        "\n% Automatic evaluation (python -m memory eval)\n" + notes + "\\begin{tabular}{llrrr}\n\\hline\n"
        "Arm & Dataset & Questions & F1 & J \\\\\n\\hline\n" + body + "\\hline\n\\end{tabular}\n"
    )


def _html_extras(text: str, source: Source, waiting: str = "") -> str:
    import html

    if waiting:
        note = f'<p class="qc-waiting" style="font-weight:bold">{html.escape(waiting)}</p>'
        text = text.replace("<body>", "<body>\n" + note, 1)
    if source.pilot:
        banner = f'<p class="pilot" style="color:#a00;font-weight:bold">{PILOT_MARK.capitalize()}</p>'
        text = text.replace("<body>", "<body>\n" + banner, 1)
    if source.latency and source.latency.get("arms"):
        header, lrows = latency_rows(source.latency)
        table = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in lrows)
        section = (
            f'<h2 id="reply-latency">Reply latency per arm</h2><p>{html.escape(latency_caption(source.latency))}</p>'
            f"<table><thead><tr>{table}</tr></thead><tbody>{body}</tbody></table>"
        )
        text = text.replace("</body>", section + "\n</body>", 1) if "</body>" in text else text + section
    if source.automatic:
        rows = "".join(
            f"<tr><td>{html.escape(r['arm'])}</td><td>{html.escape(r['dataset'])}</td>"
            f"<td>{html.escape(r['backend'])} · {html.escape(r['model'])}</td><td>{r['questions']}</td>"
            f"<td>{_score(r['f1'])}</td><td>{_score(r['judge'])}</td></tr>"
            for r in source.automatic
        )
        section = (
            "<h2>Automatic evaluation</h2><table><thead><tr><th>Arm</th><th>Dataset</th><th>Model</th>"
            f"<th>Questions</th><th>F1</th><th>J</th></tr></thead><tbody>{rows}</tbody></table>"
            + "".join(f"<p>Note: {html.escape(n)}</p>" for n in automatic_notes(source.automatic))
        )
        text = text.replace("</body>", section + "\n</body>", 1) if "</body>" in text else text + section
    return text


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
    "pvalues": (
        "Pairwise p-values, overall score (Holm-adjusted: primary comparisons over the primary family, exploratory "
        "ones, in parentheses, within their own)",
        _pvalues,
    ),
    "correlations": ("Metric correlations", _correlations),
}
PLOT_NAMES = tuple(PLOTS)


def plot_titles() -> dict[str, str]:
    return {name: title for name, (title, _) in PLOTS.items()}


def render_plot(report: Report, name: str) -> str | None:
    """One plot as an SVG string, or None if it does not apply to this data (e.g. no sessions, one arm)."""
    assert report.result is not None
    return PLOTS[name][1](report.result)
