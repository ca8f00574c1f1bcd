"""A researcher walks through a draft study as a worker would (consent, instructions, a session with every arm,
ratings, the wait page, the completion page) without it being recorded as data.

The preview is a participant of its own source (``Participant.Source.PREVIEW``) bound to the researcher's browser,
so the worker's pages and workflows run unchanged, with two differences in ``chat.assignment``: a preview meets every
active arm in turn (never the random draw), and it may go on while the study is a draft. Nothing of it is data: the
study page, the quality page, the ratings frame and every export leave previews out, and a preview is deleted when
the researcher ends it, starts another, or opens the study. Every worker page shows a banner saying so (the context
processor :func:`preview_banner`).

A tab still open on a worker page of a preview that was deleted under it (the study was opened meanwhile) gets a page
that says so, with its own title and a link to the study page, not a bare 404 (:class:`PreviewEndedMiddleware`): the
browser remembers which previews it started (``request.session[PREVIEWS_KEY]``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from studies.models import Participant, Study
from studies.participants import SESSION_KEY, bind_participant
from studies.roles import researcher_required, study_for
from studies.signals import participant_erasing

PREVIEWS_KEY = "memeval.previews"  # {str(study pk): participant pk}: the previews this browser started


def end_previews(study: Study, *, user: Any = None) -> int:
    """Delete the study's previews (one researcher's, or all) with everything they made; how many there were."""
    previews = study.participants.filter(source=Participant.Source.PREVIEW)
    if user is not None:
        previews = previews.filter(external_id__startswith=f"preview:{user.pk}:")
    n = previews.count()
    participant_erasing.send(Participant, participants=previews)  # what refers to them above chat (pairwise)
    previews.delete()  # cascades like a worker's deletion (chat.privacy), annotation items included
    return n


@require_POST
@researcher_required
def start(request: HttpRequest, slug: str) -> HttpResponse:
    """A fresh preview of a draft study for this researcher (owner or editor), from the consent page on."""
    study = study_for(request, slug, change=True)
    if study.status != Study.Status.DRAFT:
        messages.error(
            request, "Only a draft study can be previewed: an open study's previews would mix with its data."
        )
        return redirect(study)
    end_previews(study, user=request.user)
    participant = Participant.objects.create(
        study=study,
        external_id=f"preview:{request.user.pk}:{secrets.token_hex(4)}",
        source=Participant.Source.PREVIEW,
    )
    bind_participant(request, participant)
    request.session[PREVIEWS_KEY] = {**(request.session.get(PREVIEWS_KEY) or {}), str(study.pk): participant.pk}
    return redirect("chat:next", study.slug)


@require_POST
@researcher_required
def end(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug, change=True)
    end_previews(study, user=request.user)
    data = dict(request.session.get(SESSION_KEY) or {})
    data.pop(str(study.pk), None)
    request.session[SESSION_KEY] = data
    started = dict(request.session.get(PREVIEWS_KEY) or {})
    if started.pop(str(study.pk), None) is not None:
        request.session[PREVIEWS_KEY] = started
    messages.success(request, "Preview ended: nothing of it was kept.")
    return redirect(study)


def preview_banner(request: HttpRequest) -> dict[str, Any]:
    """Template context: ``preview_study`` when this browser is previewing the study of the page's URL."""
    bound = (getattr(request, "session", None) or {}).get(SESSION_KEY) if hasattr(request, "session") else None
    if not bound:
        return {}
    match = getattr(request, "resolver_match", None)
    slug = (match.kwargs.get("slug") if match else None) or ""
    previews = Participant.objects.filter(pk__in=[int(v) for v in bound.values()], source=Participant.Source.PREVIEW)
    if slug:
        previews = previews.filter(study__slug=slug)
    preview = previews.select_related("study").first()
    return {"preview_study": preview.study} if preview else {}


#: The worker's pages (by URL name) on which a tab of a preview may still be open.
WORKER_PAGES = {
    "chat": {"next", "done", "session", "end", "rate", "wait"},
    "studies": {"consent", "declined"},
}


def ended_preview(request: HttpRequest) -> Study | None:
    """The study whose preview, started in this browser, is gone (deleted when the study opened, or by another
    researcher's hand), when ``request`` is for one of the worker's pages (of that study, when the URL names one)."""
    started = (request.session.get(PREVIEWS_KEY) or {}) if hasattr(request, "session") else {}
    match = getattr(request, "resolver_match", None)
    if not started or match is None or match.url_name not in WORKER_PAGES.get(match.namespace, ()):
        return None
    slug = match.kwargs.get("slug")
    alive = set(Participant.objects.filter(pk__in=[int(pk) for pk in started.values()]).values_list("pk", flat=True))
    gone = [int(study_pk) for study_pk, pk in started.items() if int(pk) not in alive]
    studies = Study.objects.filter(pk__in=gone)
    if slug:
        studies = studies.filter(slug=slug)
    return studies.order_by("-pk").first()


def ended_page(request: HttpRequest, study: Study) -> HttpResponse:
    """What a tab of an ended preview shows (410 Gone): why it ended, and the way back to the study page."""
    if getattr(request, "htmx", False):  # a poll (the wait page): load the page itself, which says it
        return HttpResponseClientRedirect(request.get_full_path())
    context = {"ended_study": study, "opened": study.status != Study.Status.DRAFT}
    return render(request, "studies/worker/preview_ended.html", context, status=410)


class PreviewEndedMiddleware:
    """A worker page that is not found (404) for a browser whose preview was deleted: the preview-ended page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, Http404):
            return None
        study = ended_preview(request)
        return ended_page(request, study) if study is not None else None
