"""The judge's pages: the comparison's link (crowdworkers, Prolific parameters) or the annotators' entry, consent,
one pair at a time (two episodes side by side, session by session, every question with a reason), the end.

A crowdworker is bound to the browser by the Django session (``memeval.judges``: comparison -> judge); an
annotator is their user. A pair belongs to one judge: any other browser gets 404, and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from pairwise import services
from pairwise.models import Comparison, Judge, Judgement
from pairwise.questions import REASON_MAX_CHARS, REASON_MIN_CHARS, REASON_PROMPT
from pairwise.transcripts import sessions_of, side_by_side
from studies.roles import annotator_required, is_annotator

SESSION_KEY = "memeval.judges"  # {str(comparison pk): judge pk}


def _page(request: HttpRequest, title: str, text: str, status: int = 200) -> HttpResponse:
    return render(request, "pairwise/message.html", {"title": title, "text": text}, status=status)


def _comparison(slug: str) -> Comparison:
    return get_object_or_404(Comparison.objects.select_related("study"), slug=slug)


def _bound_judge(request: HttpRequest, comparison: Comparison) -> Judge | None:
    if comparison.audience == Comparison.Audience.ANNOTATORS:
        if (
            not is_annotator(request.user)
            or not Comparison.objects.workable_by(request.user).filter(pk=comparison.pk).exists()
        ):
            return None
        return Judge.objects.filter(comparison=comparison, user=cast(User, request.user)).first()
    judge_id = request.session.get(SESSION_KEY, {}).get(str(comparison.pk))
    return Judge.objects.filter(pk=judge_id, comparison=comparison).first() if judge_id else None


def entry(request: HttpRequest, slug: str) -> HttpResponse:
    """The crowdworkers' link: ``/p/<slug>/?PROLIFIC_PID=…&STUDY_ID=…&SESSION_ID=…``."""
    comparison = _comparison(slug)
    pid = request.GET.get("PROLIFIC_PID", "")
    if not pid:
        judge = _bound_judge(request, comparison)
        if judge is not None:
            return redirect("pairwise:next", comparison.slug)
        if comparison.audience == Comparison.Audience.ANNOTATORS:
            return redirect("pairwise:annotate", comparison.slug)
    try:
        judge = services.join_crowd(comparison, pid, request.GET.get("STUDY_ID", ""), request.GET.get("SESSION_ID", ""))
    except services.PairwiseError as exc:
        return _page(request, "This link cannot be used", str(exc), status=400 if not pid else 200)
    bound = dict(request.session.get(SESSION_KEY, {}))
    bound[str(comparison.pk)] = judge.pk
    request.session[SESSION_KEY] = bound
    return redirect("pairwise:next", comparison.slug)


@annotator_required
def annotate(request: HttpRequest, slug: str) -> HttpResponse:
    """The annotators' way in (logged in, the annotators group)."""
    comparison = _comparison(slug)
    if not Comparison.objects.workable_by(request.user).filter(pk=comparison.pk).exists():
        return _page(request, "This comparison cannot be judged here",
                     "It is not open to you: ask the researcher to add you to the annotators.", status=403)  # fmt: skip
    try:
        services.join_annotator(comparison, cast(User, request.user))
    except services.PairwiseError as exc:
        return _page(request, "This comparison cannot be judged here", str(exc), status=400)
    return redirect("pairwise:next", comparison.slug)


def _judge_or_404(request: HttpRequest, comparison: Comparison) -> Judge:
    judge = _bound_judge(request, comparison)
    if judge is None:
        raise Http404("no judge bound to this browser")
    return judge


@require_http_methods(["GET", "POST"])
def consent(request: HttpRequest, slug: str) -> HttpResponse:
    comparison = _comparison(slug)
    judge = _judge_or_404(request, comparison)
    if request.method == "POST":
        if request.POST.get("agree") != "yes":
            return render(request, "pairwise/consent.html", {"comparison": comparison,
                          "error": "Please tick the box to agree, or close this page."}, status=400)  # fmt: skip
        if judge.consented_at is None:
            judge.consented_at = timezone.now()
            judge.save(update_fields=["consented_at"])
        return redirect("pairwise:next", comparison.slug)
    return render(request, "pairwise/consent.html", {"comparison": comparison})


def next_pair(request: HttpRequest, slug: str) -> HttpResponse:
    comparison = _comparison(slug)
    judge = _judge_or_404(request, comparison)
    if judge.consented_at is None:
        return redirect("pairwise:consent", comparison.slug)
    judgement = services.next_judgement(judge)
    if judgement is None:
        return redirect("pairwise:done", comparison.slug)
    return redirect("pairwise:pair", comparison.slug, judgement.pk)


def _context(
    comparison: Comparison,
    judgement: Judgement,
    errors: dict[str, str] | None = None,
    posted: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    errors = errors or {}
    posted = posted or {}
    texts = sessions_of([judgement.left, judgement.right])
    done = judgement.judge.judgements.filter(status=Judgement.Status.DONE).count()
    total = comparison.slots_per_judge if judgement.judge.source == Judge.Source.PROLIFIC else None
    return {
        "comparison": comparison,
        "judgement": judgement,
        "rows": side_by_side(texts.get(judgement.left_id, []), texts.get(judgement.right_id, [])),
        "items": [
            {
                "q": q,
                "s1": q.choice("left"),
                "s2": q.choice("right"),
                "side": str(posted.get(f"side_{q.key}", "")),
                "reason": str(posted.get(f"reason_{q.key}", "")),
                "error": errors.get(q.key, ""),
            }  # fmt: skip
            for q in comparison.question_list
        ],
        "reason_prompt": REASON_PROMPT,
        "reason_min": REASON_MIN_CHARS,
        "reason_max": REASON_MAX_CHARS,
        "number": done + 1,
        "total": total,
        "errors": errors,
    }


@require_http_methods(["GET", "POST"])
def pair(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    comparison = _comparison(slug)
    judge = _judge_or_404(request, comparison)
    judgement = get_object_or_404(Judgement.objects.select_related("left", "right"), pk=pk, judge=judge)
    judgement.judge = judge
    judge.comparison = comparison
    if judgement.status == Judgement.Status.DONE:
        return redirect("pairwise:next", comparison.slug)
    if request.method == "POST":
        errors = services.submit(judgement, request.POST)
        if not errors:
            return redirect("pairwise:next", comparison.slug)
        return render(request, "pairwise/pair.html", _context(comparison, judgement, errors=errors,
                      posted=request.POST), status=400)  # fmt: skip
    return render(request, "pairwise/pair.html", _context(comparison, judgement))


def done(request: HttpRequest, slug: str) -> HttpResponse:
    comparison = _comparison(slug)
    judge = _judge_or_404(request, comparison)
    if judge.judgements.filter(status=Judgement.Status.OPEN).exists():
        return redirect("pairwise:next", comparison.slug)
    if judge.source == Judge.Source.PROLIFIC:
        if not judge.judgements.exists() and judge.consented_at is not None:
            services.finish(judge)
            return _page(request, "No conversations to compare right now",
                         "There are no pairs of conversations left to judge. Thank you; please return the study on Prolific.")  # fmt: skip
        services.finish(judge)
    return render(request, "pairwise/done.html", {"comparison": comparison, "judge": judge,
                  "prolific": judge.source == Judge.Source.PROLIFIC, "completion_url": comparison.completion_url()})  # fmt: skip
