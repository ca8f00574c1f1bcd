"""What the worker's rating page (chat/views.py ``rate``) and the side-by-side vote (chat/sidebyside_pages.py
``vote``) share: the answer for a session that is not being rated (rated already, not ended yet), and the slider
forms with the session's attention checks among the first one's sliders. Both store through
:func:`chat.ratings.submit_ratings` (the vote through :func:`chat.sidebyside.submit_vote`)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from chat.forms import RatingForm
from chat.models import ChatSession

Context = Callable[..., dict[str, object]]


def not_rating(
    request: HttpRequest, session: ChatSession, template: str, ctx: Context, *, saved: str
) -> HttpResponse | None:
    """The answer when ``session`` is not waiting for its ratings, else None: rated already, the worker goes on (a
    second POST is a double submission, the first counted: ``saved`` says so); not ended yet, a POST gets the page's
    "not ended" notice (400), a GET goes back to the chat."""
    if session.status == ChatSession.Status.DONE:
        if request.method == "POST":
            messages.info(request, saved)
        return redirect("chat:next", session.episode.participant.study.slug)
    if session.status != ChatSession.Status.RATING:
        if request.method == "POST":
            return render(request, template, ctx(session, not_ended=True), status=400)
        return redirect("chat:session", session.pk)
    return None


def rating_forms(request: HttpRequest, session: ChatSession, *others: ChatSession) -> list[RatingForm]:
    """The slider forms of ``session`` (with its attention checks among the sliders) and of each of ``others`` (the
    side-by-side's side B: sliders only), bound to the POST if there is one; each placed by its own session."""
    study = session.episode.participant.study
    data = request.POST if request.method == "POST" else None
    checks = list(study.attention_checks.filter(position=session.position))
    return [
        RatingForm(study.metrics.all(), data, checks=checks, seed=session.pk),
        *(RatingForm(study.metrics.all(), data, seed=other.pk) for other in others),
    ]
