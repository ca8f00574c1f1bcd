"""The owner's privacy controls on the quality page: a worker's raw Prolific ID on request, and a worker deleted
everywhere (chat.privacy; docs/privacy.md). Anyone else who may see the study gets 403 here. And the personal-data
scan of sessions not scanned yet (chat/pii.py), for the owner and editors."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_http_methods, require_POST

from chat import pii
from chat.models import ChatSession
from chat.privacy import erase_participant, footprint, reveal_raw_id, summary
from studies.models import Participant, Study
from studies.roles import researcher_required, study_for


def _owned_participant(request: HttpRequest, slug: str, pseudonym: str) -> tuple[Study, Participant]:
    study = get_object_or_404(Study.objects.visible_to(request.user), slug=slug)
    if not study.is_owner(request.user):
        raise PermissionDenied("Only the study's owner sees raw worker IDs and deletes workers.")
    return study, get_object_or_404(Participant, study=study, pseudonym=pseudonym)


@require_POST
@researcher_required
def reveal(request: HttpRequest, slug: str, pseudonym: str) -> HttpResponse:
    """The raw ID as a small fragment (the quality page swaps it in), recorded in the privacy audit."""
    _, participant = _owned_participant(request, slug, pseudonym)
    raw = reveal_raw_id(participant, request.user)
    if not raw:
        return HttpResponse(format_html('<span class="muted small raw-id">dropped by the retention period</span>'))
    return HttpResponse(
        format_html(
            '<span class="raw-id" title="{}"><code>{}</code></span>',
            participant.get_source_display(),
            raw,
        )
    )


@require_http_methods(["GET", "POST"])
@researcher_required
def delete(request: HttpRequest, slug: str, pseudonym: str) -> HttpResponse:
    """GET: what would go, and a form that asks for the pseudonym again. POST: the worker deleted everywhere."""
    study, participant = _owned_participant(request, slug, pseudonym)
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm", "").strip().upper() == participant.pseudonym:
            event = erase_participant(
                participant, via="quality page", by=request.user, reason=request.POST.get("reason", "")
            )
            messages.success(
                request,
                f"Worker {event.pseudonym} was deleted everywhere ({summary(event.counts)}); the audit keeps the record.",
            )
            return redirect("reports:study_quality", slug=study.slug)
        error = f"Type the pseudonym {participant.pseudonym} to confirm."
    context = {"study": study, "participant": participant, "summary": summary(footprint(participant)), "error": error}
    return render(request, "reports/delete_participant.html", context, status=400 if error else 200)


@require_POST
@researcher_required
def scan_personal_data(request: HttpRequest, slug: str) -> HttpResponse:
    """An owner or editor has the ended sessions that were never scanned (flagging turned on later) scanned now."""
    study = study_for(request, slug, change=True)
    if not study.flag_personal_data:
        messages.error(request, "Personal-data flagging is off for this study (its Edit page turns it on).")
        return redirect(reverse("reports:study_quality", args=[study.slug]) + "#personal-data")
    sessions = ChatSession.objects.filter(pk__in=pii.unscanned_sessions(study.pk)).select_related(
        "episode__participant__study"
    )
    n = sum(1 for s in sessions if pii.submit_scan(s) is not None)
    messages.success(request, f"{n} session{'' if n == 1 else 's'} queued for the personal-data scan.")
    return redirect(reverse("reports:study_quality", args=[study.slug]) + "#personal-data")
