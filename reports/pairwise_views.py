"""The study's pairwise leaderboard: every ACUTE-Eval vote of its comparisons analysed by
:func:`analysis.pairwise.pairwise_report` (judges who failed their checks and the check pairs left out), with the
plot, the reports in every format and the votes themselves."""

from __future__ import annotations

from typing import Any

import pandas as pd
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from analysis import pairwise_writers
from analysis.pairwise import VoteColumns, pairwise_report
from analysis.pairwise_cli import slider_scores
from analysis.spec import RatingsError
from pairwise import exports as vote_exports
from pairwise.models import Judge, Vote
from pairwise.questions import QUESTIONS
from reports import queries
from reports.reporting import build_report
from studies.models import Study
from studies.roles import researcher_required, study_for

CACHE_SECONDS = 600
FORMATS = {"json": "application/json", "md": "text/markdown", "latex": "application/x-latex", "html": "text/html"}
EXTENSIONS = {"json": "json", "md": "md", "latex": "tex", "html": "html"}
#: how the study's votes are read (docs/pairwise.md): check pairs and judges who failed the checks left out
COLUMNS = VoteColumns(exclude=("failed_checks",), exclude_rows=("check",))


#: the leaderboard's sources of votes (``?source=``): both together (the default), or one apart
SOURCES = {"": "ACUTE-Eval and live side by side", "acute": "ACUTE-Eval only", "live": "live side by side only"}


def study_votes(study: Study, source: str = "") -> list[dict[str, Any]]:
    """The study's votes: ACUTE-Eval's and the live side-by-side ones (``source`` ``acute`` or ``live``: one)."""
    rows = vote_exports.acute_votes(study) if source != "live" else []
    return rows + (vote_exports.live_votes(study) if source != "acute" else [])


def _version(study: Study) -> str:
    from chat.models import SideBySideVote

    last = Vote.objects.filter(judgement__judge__comparison__study=study).order_by("-id").values_list("id", flat=True)
    live = SideBySideVote.objects.filter(session__episode__participant__study=study).order_by("-id")
    failed = Judge.objects.filter(comparison__study=study, passed_checks=False).count()
    return f"{last.first() or 0}-{live.values_list('id', flat=True).first() or 0}-{failed}"


def _sliders(study: Study) -> dict[str, float] | None:
    version = queries.study_data_version(study)
    key = f"reports:pairwise-sliders:{study.pk}:{version}"
    scores: dict[str, float] | None = cache.get(key)
    if scores is None:
        report = build_report(queries.study_source(study))
        scores = slider_scores(report.result["arms"]) if report.ok and report.result else {}
        cache.set(key, scores, CACHE_SECONDS)
    return scores or None


def study_result(study: Study, question: str | None = None, source: str = "") -> tuple[dict[str, Any] | None, str]:
    """The analysis of the study's votes (cached until a vote or a check outcome changes), or why there is none;
    ``source``: the votes of one source only (:data:`SOURCES`)."""
    source = source if source in SOURCES else ""
    key = f"reports:pairwise:{study.pk}:{_version(study)}:{question or ''}:{source}"
    cached: tuple[dict[str, Any] | None, str] | None = cache.get(key)
    if cached is not None:
        return cached
    rows = study_votes(study, source)
    if not rows:
        outcome: tuple[dict[str, Any] | None, str] = (None, "No pairwise votes yet.")
    else:
        frame = pd.DataFrame(rows).astype(str)
        try:
            result = pairwise_report(frame, COLUMNS, sliders=_sliders(study), primary_question=question)
            outcome = (result, "")
        except RatingsError as exc:
            outcome = (None, f"Not enough usable votes for a leaderboard yet: {exc}")
    cache.set(key, outcome, CACHE_SECONDS)
    return outcome


#: the key of the pairwise leaderboard in the study's JSON report (``pairwise`` there is the sliders' pairwise tests)
REPORT_KEY = "pairwise_judgements"


def add_to_report(study: Study, fmt: str, text: str) -> str:
    """The study's analysis report (``reports.reporting.export``) with the pairwise leaderboard added when the
    study has votes enough for one: the JSON under :data:`REPORT_KEY`, the Markdown and LaTeX after the report,
    the HTML (tables and plot) before its end. Other formats, and studies without a leaderboard, as they were."""
    if fmt not in FORMATS:
        return text
    result, _ = study_result(study)
    if result is None:
        return text
    if fmt == "json":
        import json

        data = json.loads(text)
        data[REPORT_KEY] = result
        return json.dumps(data, indent=2, allow_nan=False)
    if fmt == "md":
        return text.rstrip("\n") + "\n\n" + pairwise_writers.to_markdown(result)
    if fmt == "latex":
        return text.rstrip("\n") + "\n\n" + pairwise_writers.to_latex(result)
    page = pairwise_writers.to_html(result, plot=pairwise_writers.leaderboard_plot(result))
    body = page[page.index("<body>") + len("<body>") : page.rindex("</body>")]
    end = text.rfind("</body>")
    section = f'<section id="pairwise-judgements">{body}</section>'
    return text[:end] + section + text[end:] if end >= 0 else text + section


def _study(request: HttpRequest, slug: str) -> Study:
    return study_for(request, slug)  # a viewer of the study sees, and changes nothing (403)


@require_GET
@researcher_required
def leaderboard(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    question = request.GET.get("question") or None
    source = request.GET.get("source", "")
    source = source if source in SOURCES else ""
    result, message = study_result(study, question, source)
    plot = pairwise_writers.leaderboard_plot(result) if result else ""
    questions = [(q, QUESTIONS[q].text if q in QUESTIONS else q) for q in (result or {}).get("questions", [])]
    counts = {s: len(study_votes(study, s)) for s in ("acute", "live")}
    return render(request, "reports/pairwise.html", {"study": study, "result": result, "message": message,
                  "plot": plot, "questions": questions, "question": (result or {}).get("question"),
                  "source": source, "sources": SOURCES, "source_counts": counts})  # fmt: skip


@require_GET
@researcher_required
def export(request: HttpRequest, slug: str, fmt: str) -> HttpResponse:
    study = _study(request, slug)
    source = request.GET.get("source", "")
    if fmt in ("csv", "jsonl"):
        rows = study_votes(study, source if source in SOURCES else "")
        text = vote_exports.to_csv(rows) if fmt == "csv" else vote_exports.to_jsonl(rows)
        response = HttpResponse(text, content_type="text/csv" if fmt == "csv" else "application/x-ndjson")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}-pairwise-votes.{fmt}"'
        return response
    if fmt not in FORMATS:
        raise Http404("unknown format")
    result, message = study_result(study, request.GET.get("question") or None, source)
    if result is None:
        return HttpResponse(message, status=404, content_type="text/plain; charset=utf-8")
    if fmt == "json":
        import json

        text = json.dumps(result, indent=1, allow_nan=False) + "\n"
    elif fmt == "md":
        text = pairwise_writers.to_markdown(result)
    elif fmt == "latex":
        text = pairwise_writers.to_latex(result)
    else:
        text = pairwise_writers.to_html(result, title=f"Pairwise judgements: {study.name}",
                                        plot=pairwise_writers.leaderboard_plot(result))  # fmt: skip
    response = HttpResponse(text, content_type=f"{FORMATS[fmt]}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-pairwise.{EXTENSIONS[fmt]}"'
    return response


_EMPTY_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="420" height="40"><text x="8" y="24" font-family="sans-serif" '
    'font-size="13" fill="#667">{}</text></svg>'
)


@require_GET
@researcher_required
def plot(request: HttpRequest, slug: str) -> HttpResponse:
    """The leaderboard plot as SVG (a one-line SVG saying why when there is no leaderboard yet)."""
    from html import escape

    study = _study(request, slug)
    result, message = study_result(study, request.GET.get("question") or None, request.GET.get("source", ""))
    svg = pairwise_writers.leaderboard_plot(result) if result else _EMPTY_SVG.format(escape(message))
    return HttpResponse(svg, content_type="image/svg+xml")
