"""A researcher walks through a draft study as a worker would (consent, instructions, a session with every arm,
ratings, the wait page, the completion page) without it being recorded as data.

The preview is a participant of its own source (``Participant.Source.PREVIEW``) bound to the researcher's browser,
so the worker's pages and workflows run unchanged, with two differences in ``chat.assignment``: a preview meets every
active arm in turn (never the random draw), and it may go on while the study is a draft. Nothing of it is data: the
study page, the quality page, the ratings frame and every export leave previews out, and a preview is deleted when
the researcher ends it, starts another, or opens the study. Every worker page shows a banner saying so (the context
processor :func:`preview_banner`).
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from studies.models import Participant, Study
from studies.participants import SESSION_KEY, bind_participant
from studies.roles import researcher_required, study_for
from studies.signals import participant_erasing


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
    return redirect("chat:next", study.slug)


@require_POST
@researcher_required
def end(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug, change=True)
    end_previews(study, user=request.user)
    data = dict(request.session.get(SESSION_KEY) or {})
    data.pop(str(study.pk), None)
    request.session[SESSION_KEY] = data
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
