"""The researcher's Prolific page of a study (waves, review, bonuses, next-wave groups, reminders) and the
webhook receiver. Thin: validate, authorize, call prolific.services, respond."""

from __future__ import annotations

import hashlib
import json
import logging

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from prolific import client as api
from prolific import services, signatures
from prolific.forms import WaveForm
from prolific.models import Submission, Wave
from studies.models import Study
from studies.roles import researcher_required

log = logging.getLogger(__name__)

WEBHOOK_MAX_BYTES = 64 * 1024  # Prolific's events are a few hundred bytes


def _study(request: HttpRequest, slug: str) -> Study:
    return get_object_or_404(Study.objects.visible_to(request.user), slug=slug)


@require_GET
@researcher_required
def prolific_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    waves = list(study.prolific_waves.all())
    return render(
        request,
        "prolific/study.html",
        {
            "study": study,
            "configured": services.configured(),
            "webhooks": bool(settings.PROLIFIC_WEBHOOK_SECRET),
            "waves": [(w, services.review_rows(w)) for w in waves],
            "form": WaveForm(initial={"number": len(waves) + 1}),
            "categories": api.REJECTION_CATEGORIES,
            "min_message": api.REJECT_MESSAGE_MIN,
        },
    )


def _back(slug: str, anchor: str = "") -> HttpResponse:
    return redirect(f"/studies/{slug}/prolific/" + (f"#{anchor}" if anchor else ""))


@require_POST
@researcher_required
def add_wave(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    form = WaveForm(request.POST)
    if form.is_valid():
        wave = form.save(commit=False)
        wave.study = study
        if Wave.objects.filter(study=study, number=wave.number).exists():
            messages.error(request, f"This study has a wave {wave.number} already.")
        else:
            wave.save()
            messages.success(request, f"Wave {wave.number} added.")
    else:
        messages.error(request, "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items()))
    return _back(slug)


def _wave(request: HttpRequest, slug: str, pk: int) -> Wave:
    return get_object_or_404(Wave, pk=pk, study=_study(request, slug))


@require_POST
@researcher_required
def sync(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    wave = _wave(request, slug, pk)
    result = services.sync_wave(wave)
    if result.error:
        messages.error(request, f"Prolific could not be read: {result.error}")
    else:
        messages.success(request, f"{result.seen} submission(s) read; {result.released} place(s) given back.")
    return _back(slug, f"wave-{wave.number}")


@require_POST
@researcher_required
def decide(request: HttpRequest, slug: str, pk: int, sub: int) -> HttpResponse:
    wave = _wave(request, slug, pk)
    submission = get_object_or_404(Submission, pk=sub, wave=wave)
    action = request.POST.get("action", "")
    try:
        services.decide(
            submission, action, request.user, request.POST.get("category", ""), request.POST.get("message", "")
        )
    except services.DecisionError as exc:
        messages.error(request, f"Submission {submission.submission_id}: {exc}")
    else:
        messages.success(request, f"Submission {submission.submission_id}: {services.PAST[action]} on Prolific.")
    return _back(slug, f"wave-{wave.number}")


@require_POST
@researcher_required
def approve_clean(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    wave = _wave(request, slug, pk)
    approved, error = services.approve_clean(wave, request.user)
    if approved or not error:
        messages.success(request, f"{approved} submission(s) with nothing to report approved on Prolific.")
    if error:
        messages.error(request, error)
    return _back(slug, f"wave-{wave.number}")


@require_POST
@researcher_required
def bonuses(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    wave = _wave(request, slug, pk)
    result = services.pay_bonuses(wave)
    if result.paid:
        messages.success(request, f"Bonuses paid to {result.paid} worker(s), {result.amount} in all.")
    if result.error:
        messages.error(request, result.error)
    return _back(slug, f"wave-{wave.number}")


@require_POST
@researcher_required
def move(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    wave = _wave(request, slug, pk)
    moved, error = services.move_completers(wave)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"{moved} worker(s) added to the next wave's participant group.")
    return _back(slug, f"wave-{wave.number}")


@csrf_exempt  # Prolific's servers post here; the HMAC signature is the authentication
@require_POST
def webhook(request: HttpRequest) -> HttpResponse:
    """Prolific's webhook (``submission.status.change`` and the study events), signed with the workspace's
    secret (prolific/signatures.py). 401 for a request that is not Prolific's, 200 for a replay (nothing done,
    so Prolific does not retry it), 400 for a body that is not an event."""
    if int(request.META.get("CONTENT_LENGTH") or 0) > WEBHOOK_MAX_BYTES:
        return JsonResponse({"error": "too large"}, status=413)
    body = request.body
    signature = request.headers.get("X-Prolific-Request-Signature", "")
    why = signatures.check(
        settings.PROLIFIC_WEBHOOK_SECRET, request.headers.get("X-Prolific-Request-Timestamp", ""), body, signature
    )
    if why:
        log.warning("Prolific webhook refused: %s", why)
        return JsonResponse({"error": why}, status=401)
    try:
        event = json.loads(body)
    except ValueError:
        return JsonResponse({"error": "the body is not JSON"}, status=400)
    if not isinstance(event, dict):
        return JsonResponse({"error": "the body is not an event"}, status=400)
    if not services.remember_event(hashlib.sha256(signature.encode()).hexdigest(), event):
        return JsonResponse({"status": "replay ignored"})
    return JsonResponse({"status": services.handle_event(event)})
