"""The public home page and the researcher's pages: study list, create/edit, study page, episode page.

Every researcher view is wrapped in ``researcher_required``: arm names, transcripts and memory
snapshots are for staff only (workers have no login; annotators are not staff).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count, Prefetch, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from chat import armjobs, memory_updates
from chat.models import ArmJob, ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
from memory import cards, display, vectors
from memory.registry import MEMORY_SYSTEMS
from runtime import kinds
from runtime.models import Job
from studies import memorycompat, personas, preview, questionedit, questions
from studies.cardbank import CardBank
from studies.forms import (
    ArmFormSet,
    AttentionFormSet,
    InviteForm,
    MetricFormSet,
    NewStudyForm,
    SharingForm,
    StudyForm,
    TeamInviteForm,
    check_design,
    design_warnings,
    open_problems,
)
from studies.models import Arm, Participant, Study
from studies.participants import invite_url
from studies.roles import AuthenticatedHttpRequest, HtmxHttpRequest, researcher_required, study_for

PROLIFIC_QUERY = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
EPISODES_PER_PAGE = 50
# The study-data downloads (reports.exports; served by reports:study_data_export).
EXPORT_KINDS = [
    ("ratings", "Ratings"),
    ("transcripts", "Transcripts"),
    ("memory", "Memory after each session"),
    ("llm-calls", "LLM calls (prompts and replies)"),
    ("personas", "Persona cards and event scripts"),
    ("probes", "Memory probes (answers, scores, stages)"),
    ("answers", "Answers to the questions before and after, comprehension-check tries"),
]


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


@researcher_required
def study_list(request: HttpRequest) -> HttpResponse:
    studies = Study.objects.visible_to(request.user).annotate(
        n_arms=Count("arms", filter=Q(arms__active=True), distinct=True),
        n_participants=Count("participants", distinct=True),
        n_completed=Count("participants", filter=Q(participants__completed_at__isnull=False), distinct=True),
    )
    return render(request, "studies/researcher/list.html", {"studies": studies})


def _save_study(
    request: AuthenticatedHttpRequest, form: StudyForm, arms: Any, metrics: Any, attention: Any = None
) -> Study:
    with transaction.atomic():
        study = form.save(commit=False)
        if study.created_by_id is None:
            study.created_by = request.user
        study.save()
        arms.instance = metrics.instance = study
        arms.save()
        metrics.save()
        if attention is not None and attention.is_bound:
            attention.instance = study
            attention.save()
        if form.cleaned_data.get("add_default_metrics"):
            study.add_default_metrics()
    return study


def _systems_help() -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "label": cls.label,
            "params": [
                {"name": k, "default": json.dumps(p.default), "help": p.help, "source": p.source}
                for k, p in cls.params.items()
            ],
        }
        for name, cls in MEMORY_SYSTEMS.items()
    ]


def _edit(request: AuthenticatedHttpRequest, study: Study | None) -> HttpResponse:
    form_class = NewStudyForm if study is None else StudyForm
    instance = study or Study()
    data = request.POST if request.method == "POST" else None
    form = form_class(data, instance=instance)
    banks = CardBank.objects.visible_to(request.user)
    if instance.card_bank_id is not None:  # the bank a shared study already uses stays choosable
        banks = banks | CardBank.objects.filter(pk=instance.card_bank_id)
    form.fields["card_bank"].queryset = banks  # type: ignore[attr-defined]
    arms = ArmFormSet(data, instance=instance, prefix="arms")
    metrics = MetricFormSet(data, instance=instance, prefix="metrics")
    # The attention checks' formset is bound only when the page posted it (older clients and tests do not).
    posted_attention = data is not None and "attention-TOTAL_FORMS" in data
    attention = AttentionFormSet(data if posted_attention else None, instance=instance, prefix="attention")
    if data is not None:
        valid = form.is_valid() and arms.is_valid() and metrics.is_valid()
        valid = valid and (not posted_attention or attention.is_valid())
        if valid and check_design(form, arms, metrics, attention if posted_attention else None):
            gated = study is not None and study.is_open_for_real
            before = {r.arm.pk for r in armjobs.not_ready(study)} if gated and study else set()
            with transaction.atomic():
                saved = _save_study(request, form, arms, metrics, attention)
                # the open gate, kept after opening: a change that leaves an arm unready would collect
                # unmarked data with it (close the study, change and check the arm, open it again)
                newly = [r for r in armjobs.not_ready(saved) if r.arm.pk not in before] if gated else []
                if newly:
                    transaction.set_rollback(True)
            if not newly:
                messages.success(request, f"Saved “{saved.name}”.")
                return redirect(saved)
            names = "; ".join(f"{r.arm.name} ({r.reason})" for r in newly)
            form.add_error(
                None,
                f"Not saved: the study is open and this change would leave an arm not ready ({names}). Close the "
                "study, make the change, run the readiness checks, then open it again.",
            )
    context = {
        "form": form,
        "arms": arms,
        "metrics": metrics,
        "attention": attention,
        "study": study,
        "systems": _systems_help(),
        "design_warnings": design_warnings(study) if study else [],
        "default_script": cards.load_script().as_dict(),
        **(questionedit.editor_context(study) if study else {}),
    }
    return render(request, "studies/researcher/edit.html", context, status=400 if data is not None else 200)


@require_POST
@researcher_required
def card_bank_import(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Import a persona card bank (a JSON file in memory.cards' format); back to the page it came from."""
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = reverse("studies:list")
    upload = request.FILES.get("bank")
    if upload is None:
        messages.error(request, "Choose a card bank file (JSON) to import.")
    elif (upload.size or 0) > cards.MAX_BANK_BYTES:
        messages.error(
            request, f"The card bank was not imported: the file is larger than {cards.MAX_BANK_BYTES // 1_000_000} MB."
        )
    else:
        try:
            bank = CardBank.from_upload(upload.read(), upload.name or "bank.json", request.user)
        except cards.CardError as exc:
            messages.error(request, f"The card bank was not imported: {exc}")
        else:
            n = len(bank.data["cards"])
            messages.success(
                request, f"Imported the card bank “{bank.name}” ({n} cards): choose it under Persona cards."
            )
    return redirect(back)


@researcher_required
def card_bank_download(request: HttpRequest, bank: str) -> HttpResponse:
    """A card bank as JSON: ``default`` is the one that ships (its file as it is), else an imported one."""
    if bank == "default":
        body = (cards.CARDS_DIR / "bank.json").read_bytes()
        name = "memeval-cards.json"
    else:
        if not bank.isdigit():
            raise Http404("No such card bank")
        row = get_object_or_404(CardBank.objects.visible_to(request.user), pk=int(bank))
        body = json.dumps(row.data, ensure_ascii=False, indent=1).encode()
        name = row.source or f"card-bank-{row.pk}.json"
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@researcher_required
def card_script_download(request: HttpRequest, slug: str) -> HttpResponse:
    """The study's event script as JSON (its own or the default), for ``python -m memory eval ARM --dataset cards
    BANK --script FILE``: piloting the arms offline on the study's own cards and script."""
    study = get_object_or_404(Study.objects.visible_to(request.user), slug=slug)
    try:
        body = json.dumps(study.persona_script().as_dict(), ensure_ascii=False, indent=1).encode()
    except cards.CardError as exc:
        raise Http404(f"The study's event script cannot be read: {exc}") from exc
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-card-script.json"'
    return response


@researcher_required
def study_create(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _edit(request, None)


@researcher_required
def study_edit(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    return _edit(request, study_for(request, slug, change=True))


@require_POST
@researcher_required
def study_add_default_metrics(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug)
    before = study.metrics.count()
    study.add_default_metrics()
    added = study.metrics.count() - before
    messages.success(
        request, f"Added {added} default metric(s)." if added else "The default metrics were already there."
    )
    return redirect("studies:edit", slug=study.slug)


@require_POST
@researcher_required
def study_set_status(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug)
    status = request.POST.get("status", "")
    pilot = request.POST.get("pilot") == "1" or study.pilot  # a pilot stays a pilot when it is reopened
    if status not in Study.Status.values:
        messages.error(request, "Unknown status.")
    elif status == Study.Status.OPEN and (problems := open_problems(study)):
        messages.error(request, "The study cannot be opened: " + "; ".join(problems) + ".")
    elif status == Study.Status.OPEN and not pilot and (unready := armjobs.not_ready(study)):
        arms = "; ".join(f"{r.arm.name} ({r.reason})" for r in unready)
        messages.error(
            request,
            f"The study was not opened: not every arm is ready ({arms}). Run the readiness checks with a model "
            "that can do the arms' work, or open it as a pilot (its data are then marked “pilot: not for "
            "publication”).",
        )
    else:
        study.status = status
        fields = ["status"]
        if status == Study.Status.OPEN and pilot and not study.pilot:
            study.pilot = True
            fields.append("pilot")
        study.save(update_fields=fields)
        if status == Study.Status.OPEN:
            preview.end_previews(study)  # a preview is never data (studies/preview.py)
        note = " as a pilot: not for publication" if study.pilot and status == Study.Status.OPEN else ""
        messages.success(request, f"The study is now {study.get_status_display().lower()}{note}.")
    return redirect(study)


_WHOLE = re.compile(r"[0-9]{1,9}")  # a whole number as a form sends it: ASCII digits, not a 5,000-digit one


def _bad_request(request: HttpRequest, study: Study, text: str) -> HttpResponse:
    """The study page again, with what was wrong in the form, as a 400."""
    messages.error(request, text)
    return render(request, "studies/researcher/detail.html", _study_context(request, study), status=400)


@require_POST
@researcher_required
def study_check_arms(request: HttpRequest, slug: str) -> HttpResponse:
    """Start the readiness checks (``kind=readiness``) or the automatic evaluation (``kind=evaluation``)
    of one arm (``arm``) or of every active arm, as background jobs."""
    study = study_for(request, slug)
    kind = request.POST.get("kind", ArmJob.Kind.READINESS)
    if kind not in ArmJob.Kind.values:
        messages.error(request, "Unknown kind of check.")
        return redirect(study)
    arms = study.arms.filter(active=True)
    if request.POST.get("arm"):
        # plain digits only: "²".isdigit() is true and int() of 5,000 digits raises (both answered 500)
        if not _WHOLE.fullmatch(request.POST["arm"]):
            return _bad_request(request, study, "No such arm in this study.")
        arms = study.arms.filter(pk=int(request.POST["arm"]))
    options: dict[str, Any] = {}
    if kind == ArmJob.Kind.CARDS:
        problem = _card_evaluation_problem(study)
        if problem:
            return _bad_request(request, study, problem)
        limit = request.POST.get("max_cards", "").strip()
        if limit:
            if not _WHOLE.fullmatch(limit) or int(limit) < 1:
                return _bad_request(
                    request, study, "Cards per arm must be a whole number of at least 1 (or empty: all)."
                )
            options["max_cards"] = int(limit)
    if kind == ArmJob.Kind.EVALUATION:
        options = {"dataset": "gvd"}
        limit = request.POST.get("max_questions", "").strip()
        if limit:
            if not _WHOLE.fullmatch(limit) or int(limit) < 1:
                return _bad_request(
                    request, study, "Questions per dialogue must be a whole number of at least 1 (or empty: all)."
                )
            options["max_questions"] = int(limit)
    started = [armjobs.start(arm, kind, options) for arm in arms]
    if not started:
        messages.error(
            request, "No such arm in this study." if request.POST.get("arm") else "This study has no active arm."
        )
    else:
        what = ArmJob.Kind(kind).label
        messages.success(request, f"{what} started for {', '.join(j.arm.name for j in started)}.")
    return redirect(reverse("studies:detail", args=[study.slug]) + "#readiness")


def _card_evaluation_problem(study: Study) -> str:
    """Why the offline card evaluation cannot run on ``study`` (empty when it can)."""
    if not study.persona_cards:
        return "The offline card evaluation needs a study with persona cards."
    try:
        problems = cards.check_script(study.persona_script(), study.persona_bank())
    except cards.CardError as exc:
        problems = [str(exc)]
    return f"The study's persona cards cannot be played: {'; '.join(problems)}" if problems else ""


@researcher_required
def study_readiness(request: HttpRequest, slug: str) -> HttpResponse:
    """The readiness card alone (htmx polls it while a job runs)."""
    study = study_for(request, slug)
    return render(request, "studies/researcher/detail.html#readiness", _readiness_context(study))


@researcher_required
def study_jobs(request: HttpRequest, slug: str) -> HttpResponse:
    """The study's background jobs alone (htmx polls it while one is live). A read: the sweeper takes lost jobs
    back (runtime/sweeper.py), or the owner or an editor asks for it (:func:`study_jobs_sweep`)."""
    study = get_object_or_404(Study.objects.visible_to(request.user), slug=slug)
    return render(request, "studies/researcher/detail.html#jobs", _jobs_context(study, request.user))


@require_POST
@researcher_required
def memory_decision(request: HttpRequest, slug: str, pk: int, action: str) -> HttpResponse:
    """The owner's or an editor's decision on a memory update whose retry time ran out (a viewer gets 403):
    ``retry`` runs it again now, ``skip`` lets the next session start on the memory before that session."""
    study = study_for(request, slug)  # a POST: owner or editor only
    if action not in ("retry", "skip"):
        raise Http404("No such decision.")
    try:
        if action == "retry":
            memory_updates.retry_now(study.pk, pk, request.user)
            messages.success(request, "The memory update runs again now; the worker's next session waits for it.")
        else:
            snap = memory_updates.skip_update(study.pk, pk, request.user)
            messages.success(
                request,
                f"Memory update after session {snap.session.index} skipped: the worker's next session starts on the "
                "memory before that session (the episode page says so).",
            )
    except MemorySnapshot.DoesNotExist as exc:
        raise Http404("No such memory update in this study.") from exc
    except memory_updates.NotWaiting as exc:
        messages.error(request, str(exc))
    return redirect(reverse("studies:detail", args=[study.slug]) + "#jobs")


@require_POST
@researcher_required
def study_jobs_sweep(request: HttpRequest, slug: str) -> HttpResponse:
    """The jobs card's "Take back lost jobs" button (owner or editor): the study's jobs that are lost (queued a
    grace after they were sent, or running under a lapsed lease) are sent again or failed for good, now, without
    waiting for the sweeper's next round."""
    study = study_for(request, slug, change=True)
    taken = armjobs.redispatch_overdue(study)
    if taken:
        messages.success(request, f"{len(taken)} lost job{'s' if len(taken) != 1 else ''} taken back.")
    else:
        messages.info(request, "No job of this study is lost: nothing to take back.")
    return redirect(reverse("studies:detail", args=[study.slug]) + "#jobs")


@dataclass
class ArmRow:
    arm: Arm
    counts: dict[str, int] = field(default_factory=dict)
    sessions_rated: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def params_json(self) -> str:
        return json.dumps(self.arm.params, sort_keys=True) if self.arm.params else ""


def _arm_rows(study: Study) -> list[ArmRow]:
    rows = {arm.pk: ArmRow(arm, dict.fromkeys(Episode.Status.values, 0)) for arm in study.arms.all()}
    for r in Episode.objects.filter(arm__study=study).values("arm", "status").annotate(n=Count("id")):
        rows[r["arm"]].counts[r["status"]] = r["n"]
    rated = (
        ChatSession.objects.filter(episode__arm__study=study, status=ChatSession.Status.DONE)
        .values("episode__arm")
        .annotate(n=Count("id"))
    )
    for r in rated:
        rows[r["episode__arm"]].sessions_rated = r["n"]
    return list(rows.values())


def _public_url(path: str) -> str:
    """Links handed to workers use SITE_URL, the public address, whatever host the researcher is on."""
    return settings.SITE_URL.rstrip("/") + path


def _retention(study: Study) -> list[dict[str, Any]]:
    """For each MemoryBank arm: how likely a memory unit survives one gap of the study's clock, at the
    shortest and the longest gap of the study's range, and on average over the gaps drawn (each gap is
    drawn independently, so the expected survival through all gaps is the mean to the power of their
    number)."""
    rows = []
    gaps = study.gap_values()
    shortest, longest = min(gaps), max(gaps)
    for arm in study.arms.filter(memory_system="memorybank").order_by("id"):
        params = arm.effective_params()

        def kept(days: float, strength: float = 1.0, params: dict[str, Any] = params) -> float:
            return memorycompat.memorybank_retention(params, days, strength=strength)

        mean = sum(kept(d) for d in gaps) / len(gaps)
        rows.append(
            {
                "arm": arm,
                "gap_days": shortest,
                "gap_max_days": longest,
                "once": kept(shortest),
                "once_longest": kept(longest),
                "mean": mean,
                "recalled": kept(shortest, 2.0),
                "recalled_longest": kept(longest, 2.0),
                "after_all": mean ** max(0, study.sessions_per_episode - 1),
                "forgetting": bool(params.get("forgetting", True)),
            }
        )
    return rows


def _readiness_context(study: Study) -> dict[str, Any]:
    rows = armjobs.readiness(study)
    evaluations = armjobs.latest_evaluations(study)
    card_runs = armjobs.latest_card_evaluations(study) if study.persona_cards else {}
    return {
        "study": study,
        "readiness": [
            {
                "r": r,
                "evaluation": (ev := evaluations.get(r.arm.pk)),
                "evaluation_outdated": ev is not None and ev.finished and not ev.is_current(r.arm),
                "cards": (cr := card_runs.get(r.arm.pk)),
                "cards_outdated": cr is not None and cr.finished and not cr.is_current(r.arm),
            }
            for r in rows
        ],
        "jobs_running": any(r.state == "checking" for r in rows)
        or any(not j.finished and not j.lost for j in [*evaluations.values(), *card_runs.values()]),
        "not_ready": [r for r in rows if r.blocks_opening],
        # the active arms whose replies come from the embedded demo model (the QC arm calls no model)
        "demo_arms": [r.arm for r in rows if r.arm.active and not r.arm.is_qc and r.arm.resolved_backend == "local"],
    }


def _jobs_context(study: Study, user: Any) -> dict[str, Any]:
    """The study's background jobs (runtime.Job with scope ``study:<pk>``): every live one (queued, waiting
    to retry, running with its progress), the latest failures with their reasons, the latest finished
    checks, evaluations and simulations, and counts per kind (with how many needed more than one attempt)."""
    scope = Job.objects.filter(scope=f"study:{study.pk}")
    live = list(scope.filter(status__in=Job.LIVE).order_by("created_at", "id")[:50])
    failed = list(scope.filter(status=Job.Status.FAILED).order_by("-finished_at", "-id")[:10])
    finished = list(scope.filter(status=Job.Status.DONE).exclude(lane="reply").order_by("-finished_at", "-id")[:10])
    counts: dict[str, dict[str, int]] = {}
    rows = scope.values_list("kind", "status").annotate(n=Count("id"), retried=Count("id", filter=Q(attempts__gt=1)))
    for kind, status, n, retried in rows.order_by("kind"):
        count = counts.setdefault(kind, {**dict.fromkeys(Job.Status.values, 0), "retried": 0})
        count[status] = n
        count["retried"] += retried  # jobs that needed more than one attempt, however they ended
    declared = kinds.declared()
    label = {name: declared[name].label if name in declared else name for name in counts}
    return {
        "study": study,
        "memory_decisions": memory_updates.waiting_for_decision(study.pk),
        "live_jobs": live,
        "failed_jobs": failed,
        "finished_jobs": finished,
        "job_counts": [{"kind": k, "label": label[k], **c} for k, c in counts.items()],
        "jobs_live": bool(live),
        "can_take_back_jobs": bool(live) and study.can_change(user),
        "can_change": study.can_change(user),
    }


def _study_context(request: HttpRequest, study: Study) -> dict[str, Any]:
    participants = study.participants.real().aggregate(
        total=Count("id"),
        consented=Count("id", filter=Q(consented_at__isnull=False)),
        completed=Count("id", filter=Q(completed_at__isnull=False)),
    )
    participants["places"] = study.places_taken()  # what the quota counts (Study.is_full)
    episodes = (
        Episode.objects.filter(participant__study=study)
        .exclude(participant__source=Participant.Source.PREVIEW)
        .select_related("arm", "participant")
        .annotate(n_rated=Count("sessions", filter=Q(sessions__status=ChatSession.Status.DONE)))
        .order_by("-created_at", "-id")
    )
    page = Paginator(episodes, EPISODES_PER_PAGE).get_page(request.GET.get("page"))
    return {
        "study": study,
        "arm_rows": _arm_rows(study),
        "participants": participants,
        "page": page,
        "prolific_link": _public_url(reverse("studies:entry", args=[study.slug])) + "?" + PROLIFIC_QUERY,
        "invite_form": InviteForm(),
        "open_problems": open_problems(study),
        "design_warnings": design_warnings(study),
        "statuses": Study.Status,
        "sharing_form": SharingForm(instance=study) if study.can_share(request.user) else None,
        "shared_with": study.shared_with.order_by("username"),
        "viewers": study.viewers.order_by("username"),
        "my_role": study.role_of(request.user),
        "can_change": study.can_change(request.user),
        "team_form": TeamInviteForm(),
        "invitations": study.invitations.select_related("accepted_by")[:20] if study.can_share(request.user) else [],
        "team_link": _team_link(request, study),
        "retention": _retention(study),
        "personas": personas.preview(study),
        "export_kinds": EXPORT_KINDS,
        **_readiness_context(study),
        **_jobs_context(study, request.user),
    }


def _team_link(request: HttpRequest, study: Study) -> dict[str, str] | None:
    """The invitation link just made (studies.team.invite), shown once."""
    link = request.session.get("team_link")
    if link and link.get("study") == study.pk:
        del request.session["team_link"]
        return dict(link)
    return None


@researcher_required
def study_detail(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request, slug)
    return render(request, "studies/researcher/detail.html", _study_context(request, study))


@require_POST
@researcher_required
def study_share(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """The creator chooses the other researchers who may see and change the study."""
    study = study_for(request, slug)
    if not study.can_share(request.user):
        raise PermissionDenied("Only the study's creator can change who it is shared with.")
    form = SharingForm(request.POST, instance=study)
    if form.is_valid():
        form.save()
        names = ", ".join(u.username for u in study.shared_with.order_by("username")) or "nobody"
        viewers = ", ".join(u.username for u in study.viewers.order_by("username")) or "nobody"
        messages.success(request, f"The study is now shared with {names} (editors) and {viewers} (viewers).")
    else:
        messages.error(
            request, "Sharing not changed: " + "; ".join(str(e) for errs in form.errors.values() for e in errs)
        )
    return redirect(study)


@require_POST
@researcher_required
def study_invite(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Signed invite links for in-house workers (the signer lives in studies.participants)."""
    study = study_for(request, slug)
    form = InviteForm(request.POST)
    context = _study_context(request, study)
    context["invite_form"] = form
    if form.is_valid():
        context["invites"] = [(i, _public_url(invite_url(study, i))) for i in form.ids()]
    template = "studies/researcher/detail.html"
    if request.htmx:
        template += "#invite"
    return render(request, template, context, status=200 if form.is_valid() else 400)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass
class SessionView:
    session: ChatSession
    messages: list[Message]
    ratings: list[Rating]
    calls: list[LLMCallRecord | dict[str, Any]]
    snapshot: Any
    state_json: str = ""
    summary: list[str] = field(default_factory=list)
    operations: list[dict[str, Any]] = field(default_factory=list)
    fallbacks: int = 0
    fallback_notes: list[dict[str, Any]] = field(default_factory=list)
    memory_after: list[str] = field(default_factory=list)
    trace_extra_json: str = ""
    memory_blocks: list[display.Block] = field(default_factory=list)
    trace_blocks: list[display.Block] = field(default_factory=list)
    probes: list[Any] = field(default_factory=list)  # chat.ProbeResult rows (persona cards)
    memory_note: str = ""  # said instead of the memory when it shows nothing (pending, failed, empty)


TRACE_SHOWN = {"summary", "operations", "memory_before", "memory_after", "llm_calls", "fallbacks"}


def _session_view(session: ChatSession) -> SessionView:
    snapshot = getattr(session, "snapshot", None)  # the reverse one-to-one raises when absent
    view = SessionView(
        session=session,
        messages=list(session.messages.all()),
        ratings=list(session.ratings.all()),
        calls=list(session.llm_calls.all()),
        snapshot=snapshot,
        probes=list(session.probes.all()),
    )
    if snapshot is not None:
        trace = snapshot.trace or {}
        view.state_json = _pretty(vectors.redacted(snapshot.state))  # embeddings: kilobytes of base64, not for reading
        view.memory_blocks = display.readable(snapshot.state)
        view.summary = display.lines(trace.get("summary"))
        view.operations = list(trace.get("operations") or [])
        # Two kinds of fallback: an operation whose reply did not parse, and a step that fell back
        # to its defined behaviour (trace["fallbacks"], written by memory.systems.common.fallback).
        view.fallback_notes = [f for f in trace.get("fallbacks") or [] if isinstance(f, dict)]
        view.fallbacks = sum(1 for op in view.operations if op.get("fallback")) + len(view.fallback_notes)
        view.memory_after = display.lines(trace.get("memory_after"))
        # The update's calls are normally LLMCallRecord rows too; a trace copy is shown only when it is not.
        recorded = {(c.purpose, c.reply) for c in view.calls if isinstance(c, LLMCallRecord)}
        view.calls += [c for c in trace.get("llm_calls") or [] if (c.get("purpose"), c.get("reply")) not in recorded]
        extra = {k: v for k, v in trace.items() if k not in TRACE_SHOWN}
        view.trace_extra_json = _pretty(extra) if extra else ""
        view.trace_blocks = display.readable(extra) if extra else []
        view.memory_note = _memory_note(snapshot, session.episode.arm.memory_system)
    return view


def _memory_note(snapshot: MemorySnapshot, memory_system: str) -> str:
    """What the episode page says where the memory after a session would be: an update still running or
    failed has no memory to show yet (its empty state is not "no memory"); a finished update may be empty."""
    if snapshot.status == MemorySnapshot.Status.PENDING:
        return "The memory update after this session is still running; its memory appears here when it is done."
    if snapshot.status == MemorySnapshot.Status.FAILED:
        return (
            "The memory update failed (above) for its whole retry time: the next session waits for a decision "
            "(retry now, or skip it) under Background jobs on the study page."
        )
    if snapshot.status == MemorySnapshot.Status.SKIPPED:
        skip: dict[str, Any] = next((d for d in reversed(snapshot.decisions or []) if d.get("action") == "skip"), {})
        return (
            f"The memory update failed (above) and was skipped by {skip.get('by', 'a researcher')} at "
            f"{str(skip.get('at', ''))[:16].replace('T', ' ')} UTC: the memory after this session is the memory before "
            "it, so the sessions after it started on a memory that lacks this session."
        )
    if memory_system == "none":
        return "This arm keeps no memory."
    return "The memory is empty after this session."


def personas_of_episode(episode: Episode) -> dict[str, Any] | None:
    """The episode's persona card as the episode page shows it (None without one)."""
    persona = episode.persona or {}
    card = persona.get("card")
    if not card:
        return None
    slots = persona.get("slots", {})
    facts = [
        {"label": slots.get(k, {}).get("label", k), "value": f.get("value", ""),
         "update": (f.get("update") or {}).get("value", "")}
        for k, f in card.get("facts", {}).items()
    ]  # fmt: skip
    events = [
        {"session": e["session"], "op": e["op"], "label": slots.get(e["slot"], {}).get("label", e["slot"])}
        for e in (persona.get("script") or {}).get("events", [])
    ]
    return {"id": card.get("id", ""), "bank": persona.get("bank", {}), "facts": facts, "events": events}


@researcher_required
def episode_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    study = study_for(request, slug)
    episode = get_object_or_404(Episode.objects.select_related("arm", "participant"), pk=pk, participant__study=study)
    sessions = episode.sessions.select_related("snapshot").prefetch_related(
        "messages",
        "messages__signals",
        "attention_responses__item",
        Prefetch("ratings", queryset=Rating.objects.select_related("metric").order_by("metric__order", "metric__id")),
        "llm_calls",
        "probes",
    )
    other_episodes = (
        Episode.objects.filter(participant=episode.participant).exclude(pk=episode.pk).select_related("arm")
    )
    context = {
        "study": study,
        "episode": episode,
        "participant": episode.participant,
        "sessions": [_session_view(s) for s in sessions],
        "other_episodes": other_episodes,
        "persona": personas_of_episode(episode),
        "worker_answers": questions.answers_of(episode.participant),
        "worker_attempts": episode.participant.comprehension_attempts.order_by("number"),
        "params": [
            {"name": k, "value": json.dumps(v), "overridden": k in (episode.arm.params or {})}
            for k, v in episode.arm.effective_params().items()
        ],
    }
    return render(request, "studies/researcher/episode.html", context)
