from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from analysis.data import RatingsError
from analysis.spec import DEFAULT_FAMILY, DEFAULT_TEST, NON_BLIND
from infra.streaming import streaming_response
from reports import exports, pairwise_views, probetables, queries, tables
from reports.forms import (
    DEFAULT_EXCLUSIONS,
    EXCLUSION_CHOICES,
    FILTERS_CHOSEN,
    AnalysisOptionsForm,
    ImportRatingsForm,
    chosen_exclusions,
)
from reports.imports import parse_ratings, read_table
from reports.models import ImportedDataset
from reports.reporting import (
    FORMATS,
    PLOT_NAMES,
    Report,
    automatic_notes,
    build_report,
    cli_command,
    export,
    filename,
    latency_caption,
    latency_rows,
    plot_titles,
    qc_waiting_text,
    render_plot,
    without_qc,
)
from studies.limits import accepts_upload
from studies.models import Study
from studies.roles import HtmxHttpRequest, researcher_required, study_for

CACHE_SECONDS = 600


def _report(request: HttpRequest, study: Study, dataset: ImportedDataset | None) -> Report:
    """The analysis for the page's data and options, cached until the ratings change (the page polls every 10 s).

    A live study's report is checked against the study's latest pre-registration, if any."""
    options = AnalysisOptionsForm(request.GET)
    test, family = options.chosen_test(), options.chosen_family()
    # exclusion filters: live studies only (an imported file has no signal columns)
    exclude, exclude_rows = _exclusions(request, dataset)
    prereg = queries.latest_preregistration(study) if dataset is None else None
    version = f"d{dataset.pk}" if dataset else f"s{study.pk}-{queries.study_data_version(study)}"
    filters = ",".join([*exclude, *exclude_rows])
    key = f"reports:report:{version}:{test}:{family}:{filters}:{prereg.sha256 if prereg else ''}"
    report: Report | None = cache.get(key)
    if report is None:
        source = queries.dataset_source(dataset) if dataset else queries.study_source(study)
        extra: dict[str, Any] = {"preregistration": prereg.content} if prereg else {}
        if dataset is None:  # the page's filters, the defaults included (or taken off)
            extra.update(exclude=exclude, exclude_rows=exclude_rows, include_non_blind=NON_BLIND not in exclude_rows)
        report = build_report(source, test=test, family=family, **extra)
        report.cache_key = key
        cache.set(key, report, CACHE_SECONDS)
    return report


def _exclusions(request: HttpRequest, dataset: ImportedDataset | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The page's exclusion filters: live studies only (an imported file has no signal columns); the defaults
    apply unless the filter form chose (its marker is in the query)."""
    if dataset is not None:
        return (), ()
    return chosen_exclusions(request.GET.getlist("exclude"), chosen_on_page=FILTERS_CHOSEN in request.GET)


def _objects(request: HttpRequest, slug: str, pk: int | None) -> tuple[Study, ImportedDataset | None]:
    study = study_for(request, slug)
    dataset = get_object_or_404(ImportedDataset, study=study, pk=pk, complete=True) if pk is not None else None
    return study, dataset


def _report_for(request: HttpRequest, slug: str, pk: int | None, known: bool, unknown: str) -> Report:
    """The report behind a download: 404 for a study or dataset the user cannot see, or (``unknown``) for
    a format or plot name that is not ``known``."""
    study, dataset = _objects(request, slug, pk)
    if not known:
        raise Http404(unknown)
    return _report(request, study, dataset)


def _urls(
    study: Study, dataset: ImportedDataset | None, test: str, family: str, exclusions: Sequence[str] = ()
) -> dict[str, Any]:
    args: list[Any] = [study.slug] if dataset is None else [study.slug, dataset.pk]
    prefix = "reports:study_" if dataset is None else "reports:dataset_"
    chosen: dict[str, Any] = {
        k: v
        for k, v in (("test", test), ("family", family))
        if v != {"test": DEFAULT_TEST, "family": DEFAULT_FAMILY}[k]
    }
    if dataset is None and set(exclusions) != set(DEFAULT_EXCLUSIONS):  # the defaults need no query
        chosen[FILTERS_CHOSEN] = "1"
        chosen["exclude"] = list(exclusions)
    query = ("?" + urlencode(chosen, doseq=True)) if chosen else ""
    return {
        "page": reverse(f"{prefix}analysis", args=args) + query,
        "exports": [
            {"fmt": fmt, "label": label, "url": reverse(f"{prefix}export", args=[*args, fmt]) + query}
            for fmt, label in [
                ("csv", "Ratings with z-scores (CSV)"),
                ("json", "JSON"),
                ("md", "Markdown tables"),
                ("latex", "LaTeX tables"),
                ("html", "HTML report"),
                ("data", "Ratings with quality signals (CSV, the CLI's input)"),
            ]
        ],
        "plots": [
            {
                "name": name,
                "title": title,
                "url": reverse(f"{prefix}plot", args=[*args, name]) + query,
                "download": reverse(f"{prefix}plot", args=[*args, name])
                + (query + "&" if query else "?")
                + "download=1",
            }
            for name, title in plot_titles().items()
        ],
    }


def _context(request: HttpRequest, study: Study, dataset: ImportedDataset | None) -> dict[str, Any]:
    report = _report(request, study, dataset)
    options = AnalysisOptionsForm(request.GET)
    exclude, exclude_rows = _exclusions(request, dataset)
    chosen = {*exclude, *exclude_rows}
    spec = report.source.spec
    cli = ""
    if spec is not None:
        spec = replace(
            spec, exclude=exclude, exclude_rows=exclude_rows, include_non_blind=NON_BLIND not in exclude_rows
        )
        if report.qc_waiting:  # the page runs without the QC test until there is QC data; so does the command
            spec = without_qc(spec)
        cli = cli_command(report.source, spec, test=report.test, family=options.chosen_family())
    ctx: dict[str, Any] = {
        "study": study,
        "dataset": dataset,
        "report": report,
        "live": dataset is None,
        "exclusion_filters": [
            {
                "value": v,
                "label": label,
                "checked": v in chosen,
                "count": _flagged_sessions(report, v) if v in ("silent_session", NON_BLIND) else None,
            }
            for v, label in EXCLUSION_CHOICES
        ]
        if dataset is None
        else [],
        "cli_command": cli,
        "urls": _urls(study, dataset, report.test, options.chosen_family(), [*exclude, *exclude_rows]),
        "options": AnalysisOptionsForm(initial={"test": report.test, "family": options.chosen_family()}),
        "progress": queries.study_progress(study) if dataset is None else None,
        "datasets": queries.datasets_for_study(study),
        "qc_waiting": qc_waiting_text(report.qc_waiting) if report.qc_waiting else "",
    }
    ctx["probes"] = probetables.probe_dashboard(report.probes)
    if dataset is None:
        ctx["automatic"] = _automatic_rows(report)
        ctx["automatic_notes"] = automatic_notes(report.source.automatic)
        latency = report.source.latency
        if latency and latency.get("arms"):
            header, rows = latency_rows(latency)
            ctx["latency"] = {"caption": latency_caption(latency), "header": header, "rows": rows}
    if report.ok and report.result is not None:
        ctx["t"] = tables.dashboard(report.result)
        ctx["plot_list"] = []
        for entry in ctx["urls"]["plots"]:
            svg = _plot_svg(report, entry["name"])
            if svg:  # inline: drop the XML prolog and DOCTYPE, which are not valid inside HTML
                ctx["plot_list"].append({**entry, "svg": svg[svg.find("<svg") :]})
    return ctx


def _flagged_sessions(report: Report, column: str) -> int:
    """How many rated sessions of the study are flagged in a session-level ``column``: silent
    (chat.sessions.is_silent) or non-blind (the blinding scan)."""
    frame = report.source.frame
    if column not in frame or frame.empty:
        return 0
    return int(frame.loc[frame[column].astype(bool), ["unit", "session"]].drop_duplicates().shape[0])


def _automatic_rows(report: Report) -> list[dict[str, Any]]:
    """The arms' automatic scores beside their human overall score (raw 0-100 mean, when analysed)."""
    arms = (report.result or {}).get("arms", {})
    return [
        {
            **row,
            "human": (arms.get(row["arm"]) or {}).get("overall_raw"),
            "f1_text": tables.num(row["f1"]),
            "judge_text": tables.num(row["judge"]),
        }
        for row in report.source.automatic
    ]


def _plot_svg(report: Report, name: str) -> str | None:
    if not report.ok:
        return None
    return _cached(f"{report.cache_key}:plot:{name}", lambda: render_plot(report, name) or "") or None


def _cached(key: str, make: Callable[[], str]) -> str:
    """Plots and export files, cached under the key of the report they are drawn from."""
    text: str | None = cache.get(key)
    if text is None:
        text = make()
        cache.set(key, text, CACHE_SECONDS)
    return text


@require_GET
@researcher_required
@vary_on_headers("HX-Request")  # the same URL answers htmx's poll with the results partial only
def analysis(request: HtmxHttpRequest, slug: str, pk: int | None = None) -> HttpResponse:
    study, dataset = _objects(request, slug, pk)
    template = "reports/analysis.html#results" if request.htmx else "reports/analysis.html"
    return render(request, template, _context(request, study, dataset))


@require_GET
@researcher_required
def export_file(request: HttpRequest, slug: str, fmt: str, pk: int | None = None) -> HttpResponse:
    report = _report_for(request, slug, pk, fmt in FORMATS, "unknown format")
    if not report.ok:
        return HttpResponse(report.message, status=409, content_type="text/plain; charset=utf-8")
    text = _cached(f"{report.cache_key}:export:{fmt}", lambda: export(report, fmt))
    if pk is None:  # the study's own report: with its pairwise leaderboard (cached on its own votes)
        study, _ = _objects(request, slug, None)
        text = pairwise_views.add_to_report(study, fmt, text)
    response = HttpResponse(text, content_type=FORMATS[fmt][1])
    response["Content-Disposition"] = f'attachment; filename="{filename(report, fmt)}"'
    return response


@require_GET
@researcher_required
def plot(request: HttpRequest, slug: str, name: str, pk: int | None = None) -> HttpResponse:
    report = _report_for(request, slug, pk, name in PLOT_NAMES, "unknown plot")
    svg = _plot_svg(report, name)
    if not svg:
        raise Http404(report.message or "this plot does not apply to these data")
    response = HttpResponse(svg, content_type="image/svg+xml")
    if request.GET.get("download"):
        response["Content-Disposition"] = f'attachment; filename="{report.source.slug}-{name}.svg"'
    return response


@accepts_upload
@require_http_methods(["GET", "POST"])
@researcher_required
def import_ratings(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug)
    form = ImportRatingsForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        mapping = form.mapping()
        upload = form.cleaned_data["file"]
        try:
            parsed = parse_ratings(read_table(upload), mapping)
        except (RatingsError, UnicodeDecodeError) as exc:
            message = "the file is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
            form.add_error(None, f"The ratings could not be imported: {message}")
        else:
            dataset = queries.create_imported_dataset(
                study,
                name=form.cleaned_data["name"],
                long=parsed.long,
                metrics=parsed.metrics,
                reverse_metrics=mapping.reverse,
                has_session=bool(mapping.session),
                qc_arm=mapping.qc_arm or "",
                qc_metrics=mapping.qc_metrics,
                mapping=mapping.as_dict(),
                source_filename=upload.name,
                uploaded_by=request.user,
            )
            messages.success(
                request,
                f"Imported {len(parsed.long)} ratings from {parsed.n_source_rows} rows "
                f"({parsed.workers} workers, {len(parsed.arms)} arms).",
            )
            return redirect(dataset.get_absolute_url())
    return render(
        request, "reports/import.html", {"study": study, "form": form, "datasets": queries.datasets_for_study(study)}
    )


@require_POST
@researcher_required
def delete_dataset(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    study, dataset = _objects(request, slug, pk)
    assert dataset is not None
    queries.delete_dataset(dataset)
    messages.success(request, f"Deleted the imported dataset “{dataset.name}”.")
    return redirect("reports:study_analysis", study.slug)


@require_GET
@researcher_required
def study_data_export(request: HttpRequest, slug: str, what: str, fmt: str) -> StreamingHttpResponse:
    """The study's ratings, transcripts, memory or LLM calls as CSV or JSONL (``reports.exports``), streamed."""
    study = study_for(request, slug)
    try:
        exports.check(what, fmt)
    except exports.ExportError as exc:
        raise Http404(str(exc)) from exc
    return streaming_response(
        exports.export_lines(study, what, fmt),
        content_type=exports.FORMATS[fmt],
        filename=exports.filename(study, what, fmt),
    )
