"""What memeval does on Prolific, one function per workflow (views, webhooks, commands and tasks call these).

- :func:`apply_status` records what Prolific says of a submission (a webhook or a poll); a returned or timed-out
  submission gives its worker's place (the quota) and arm slot back at once (:func:`release`), the way the
  abandonment sweep (chat.timing) does for a worker who left, so the study keeps recruiting.
- :func:`sync_wave` polls a wave's submissions: the fallback for webhooks that were lost or never set up.
- :func:`review_rows` and :func:`decide`: the researcher's review, with the exclusion rules' grounds
  (chat.quality) as suggested rejection reasons; nothing is rejected without the researcher's click.
- :func:`pay_bonuses`: a bonus per episode whose every session the worker finished.
- :func:`move_completers`: approved workers of a wave into the participant group the next wave is restricted to.
- :func:`send_due_reminders`: a message to each of them when the next wave is due.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from chat import signals as chat_signals
from chat.models import Episode
from chat.quality import WorkerQuality, study_quality
from prolific import client as api
from prolific import privacy
from prolific.models import Submission, Wave, WebhookEvent
from studies.models import Participant, Study

log = logging.getLogger(__name__)


class NotConfigured(Exception):
    """No Prolific API token is configured."""


def configured() -> bool:
    return bool(settings.PROLIFIC_API_TOKEN)


def make_client(retries: int = 3) -> api.ProlificClient:
    if not configured():
        raise NotConfigured("No Prolific API token is configured: set PROLIFIC_API_TOKEN (docs/operations.md).")
    return api.ProlificClient(
        settings.PROLIFIC_API_URL,
        settings.PROLIFIC_API_TOKEN,
        timeout=settings.PROLIFIC_API_TIMEOUT_SECONDS,
        retries=retries,
    )


# --- statuses: webhooks and polling


def participant_for(study: Study, pid: str, submission_id: str) -> Participant | None:
    """The study's participant of this Prolific ID: the one whose link carried this submission, else the one
    made for the PID."""
    prolific = Participant.objects.filter(study=study, source=Participant.Source.PROLIFIC)
    mine = prolific.filter(Q(external_id=f"prolific:{pid}") | Q(external_id__startswith=f"prolific:{pid}/")).order_by(
        "pk"
    )
    return mine.filter(prolific_session_id=submission_id).first() or mine.filter(external_id=f"prolific:{pid}").first()


def release(participant: Participant, now: dt.datetime | None = None) -> bool:
    """Give a returned or timed-out worker's place and arm slot back: the participant no longer counts against
    the quota, and their unfinished episodes no longer count for arm balance (chat.assignment draws arms by the
    active and completed episodes). A worker who finished keeps everything. True when something was released."""
    if participant.completed_at is not None:
        return False
    now = now or timezone.now()
    with transaction.atomic():
        marked = Participant.objects.filter(pk=participant.pk, abandoned_at__isnull=True).update(abandoned_at=now)
        active = Episode.objects.filter(participant=participant, status=Episode.Status.ACTIVE)
        left = list(active.values_list("pk", flat=True))
        episodes = active.update(status=Episode.Status.ABANDONED)
        chat_signals.abandoned_chats_ended(left)  # a session left chatting is over (the blinding scan reads it)
    return bool(marked or episodes)


def apply_status(wave: Wave, submission_id: str, pid: str, status: str, now: dt.datetime | None = None) -> Submission:
    """Record Prolific's status of a submission; release the worker's place when it was returned or timed out."""
    now = now or timezone.now()
    erased = Submission.objects.filter(submission_id=privacy.erased_id(submission_id)).first()
    if erased is not None:  # pseudonymised by the retention sweep: never read in again with its raw IDs
        return erased
    if privacy.is_erased(submission_id):  # its worker was deleted: an unsaved row, so nothing is stored
        return Submission(wave=wave, submission_id=privacy.erased_id(submission_id), status=status)
    try:
        with transaction.atomic():
            sub, _ = Submission.objects.get_or_create(
                submission_id=submission_id, defaults={"wave": wave, "prolific_pid": pid, "status": status}
            )
    except IntegrityError:  # a webhook and a poll at once
        sub = Submission.objects.get(submission_id=submission_id)
    changed = []
    if sub.status != status:
        sub.status, sub.status_at = status, now
        changed += ["status", "status_at"]
    if sub.participant_id is None and (p := participant_for(wave.study, sub.prolific_pid or pid, submission_id)):
        sub.participant = p
        changed.append("participant")
    if status in api.GONE and sub.released_at is None and sub.participant is not None:
        release(sub.participant, now)
        sub.released_at = now
        changed.append("released_at")
    if changed:
        sub.save(update_fields=changed)
    return sub


@dataclass
class SyncResult:
    seen: int = 0
    released: int = 0
    error: str = ""


def sync_wave(wave: Wave, client: api.ProlificClient | None = None) -> SyncResult:
    """Poll a wave's submissions from Prolific (the fallback for lost webhooks). Prolific down: the error is kept
    on the wave and nothing changes; the next poll catches up."""
    result = SyncResult()
    try:
        client = client or make_client()
        for s in client.submissions(wave.prolific_study_id):
            if not s.id or not s.participant_id:
                continue
            before = Submission.objects.filter(submission_id=s.id, released_at__isnull=False).exists()
            sub = apply_status(wave, s.id, s.participant_id, s.status)
            result.seen += 1
            result.released += int(sub.released_at is not None and not before)
    except (api.Unavailable, api.ProlificError, NotConfigured) as exc:
        result.error = str(exc)[:300]
    wave.sync_error = result.error
    if not result.error:
        wave.last_synced_at = timezone.now()
    wave.save(update_fields=["sync_error", "last_synced_at"])
    return result


def handle_event(event: dict[str, Any]) -> str:
    """One verified webhook event; returns what was done, in words. ``submission.status.change`` updates the
    submission (asking Prolific for a submission it has not seen yet, to learn its study); the study events
    only ask for a poll of that study's wave."""
    kind = str(event.get("event_type") or "")
    resource = str(event.get("resource_id") or "")
    if kind == "submission.status.change":
        status = str(event.get("status") or "")
        if privacy.is_erased(resource):
            return "a deleted or pseudonymised worker's submission: ignored"
        known = Submission.objects.select_related("wave__study").filter(submission_id=resource).first()
        if known is not None:
            apply_status(known.wave, resource, known.prolific_pid, status)
            return f"submission {resource}: {status}"
        try:  # one try: Prolific waits for this answer, and the next poll catches up anyway
            found = make_client(retries=0).submission(resource)
        except (api.Unavailable, api.ProlificError, NotConfigured) as exc:
            return f"submission {resource} not known yet ({exc}); the next poll records it"
        wave = Wave.objects.select_related("study").filter(prolific_study_id=found.study_id).first()
        if wave is None:
            return f"submission {resource} belongs to no wave of ours"
        apply_status(wave, resource, str(event.get("participant_id") or found.participant_id), status)
        return f"submission {resource}: {status}"
    if kind in ("study.status.change", "study.progress.change", "study.has_high_return_rate"):
        for wave in Wave.objects.filter(prolific_study_id=resource):
            sync_wave(wave, make_client(retries=0) if configured() else None)
        return f"{kind} for study {resource}: polled"
    return f"{kind or 'an event'} ignored"


def remember_event(signature: str, event: dict[str, Any]) -> bool:
    """False when this signed request was accepted before (a replay). The event of a submission pseudonymised by the
    retention sweep is remembered without its id."""
    resource = str(event.get("resource_id") or "")[:64]
    if resource and privacy.is_erased(resource):
        resource = ""
    try:
        with transaction.atomic():
            WebhookEvent.objects.create(
                signature=signature[:128], event_type=str(event.get("event_type") or "")[:64], resource_id=resource
            )
    except IntegrityError:
        return False
    return True


# --- review


# Which of Prolific's rejection categories each exclusion ground suggests (chat.quality's grounds).
@dataclass
class ReviewRow:
    submission: Submission
    quality: WorkerQuality | None
    reasons: list[str] = field(default_factory=list)
    category: str = ""
    message: str = ""
    finished_episodes: int = 0
    bonus: Decimal = Decimal("0")

    @property
    def suggestion(self) -> str:
        return "reject" if self.reasons else "approve"


def suggested(quality: WorkerQuality | None, participant: Participant | None) -> tuple[list[str], str]:
    """Grounds for rejection from the study's exclusion rules, and the Prolific category they suggest."""
    if quality is None or participant is None:
        return ["no participation in memeval matches this submission"], "NO_DATA"
    reasons = quality.reasons()
    if quality.comprehension_failed:  # stopped before the first session and asked to return the study
        return reasons, "FAILED_CHECK"
    if quality.attention_failed:
        return reasons, "FAILED_CHECK"
    if quality.too_fast_sessions:
        return reasons, "TOO_QUICKLY"
    if quality.authenticity.flags:
        return reasons, "LOW_EFFORT"
    if participant.completed_at is None and participant.consented_at is not None:
        return [*reasons, "did not finish every session"], "INCOMP_LONGITUDINAL"
    return reasons, ""


def rejection_message(reasons: Iterable[str]) -> str:
    text = "; ".join(reasons)
    return (
        f"Thank you for your time. We could not accept this submission, for this reason: {text}. "
        "The study's instructions said what was required. If you think this is a mistake, please message us."
    )


def finished_episodes(participant: Participant | None) -> int:
    if participant is None:
        return 0
    return Episode.objects.filter(participant=participant, status=Episode.Status.COMPLETED).count()


def review_rows(wave: Wave) -> list[ReviewRow]:
    quality = {q.participant.pk: q for q in study_quality(wave.study)}
    rows = []
    for sub in wave.submissions.select_related("participant").order_by("id"):
        q = quality.get(sub.participant_id) if sub.participant_id else None
        reasons, category = suggested(q, sub.participant)
        done = finished_episodes(sub.participant)
        rows.append(
            ReviewRow(
                sub,
                q,
                reasons,
                category,
                rejection_message(reasons) if reasons else "",
                done,
                wave.bonus_per_episode * done,
            )
        )
    return rows


PAST = {"approve": "approved", "reject": "rejected"}


class DecisionError(Exception):
    """The decision could not be made; the words say why (shown to the researcher)."""


def decide(sub: Submission, action: str, user: Any, category: str = "", message: str = "") -> Submission:
    """Approve or reject one submission on Prolific, and record it. A decision is final on Prolific."""
    if sub.decision:
        raise DecisionError(f"This submission was already {PAST[sub.decision]}.")
    if sub.status != api.AWAITING_REVIEW:
        raise DecisionError(
            f"Prolific says this submission is {sub.status or 'unknown'}: only one awaiting review can be decided."
        )
    try:
        client = make_client()
        if action == "approve":
            client.approve(sub.submission_id)
        elif action == "reject":
            client.reject(sub.submission_id, category, message)
        else:
            raise DecisionError("Choose approve or reject.")
    except ValueError as exc:
        raise DecisionError(str(exc)) from None
    except (api.Unavailable, api.ProlificError, NotConfigured) as exc:
        raise DecisionError(f"Nothing was changed: {exc}") from None
    sub.decision = action
    sub.rejection_category = category if action == "reject" else ""
    sub.decision_message = message.strip() if action == "reject" else ""
    sub.decided_at, sub.decided_by = timezone.now(), user
    sub.status = api.APPROVED if action == "approve" else api.REJECTED
    # Prolific reopens a rejected submission's place: memeval gives back the quota place and arm slot too (a worker
    # who finished keeps theirs; their data stays either way)
    gone = action == "reject" and sub.participant is not None and sub.released_at is None
    if gone and sub.participant is not None and release(sub.participant, sub.decided_at):
        sub.released_at = sub.decided_at
    sub.save()
    return sub


BULK_APPROVE_CHUNK = 100  # sent one after another, never in parallel (Prolific: "Managing high loads")


def approve_clean(wave: Wave, user: Any) -> tuple[int, str]:
    """Approve, with Prolific's bulk endpoint, every submission awaiting review whose worker has nothing to report
    under the exclusion rules (the review's "approve" suggestions). Returns how many, and an error if any."""
    clean = [
        r.submission
        for r in review_rows(wave)
        if r.suggestion == "approve" and r.submission.status == api.AWAITING_REVIEW and not r.submission.decision
    ]
    done = 0
    try:
        client = make_client()
        for start in range(0, len(clean), BULK_APPROVE_CHUNK):
            chunk = clean[start : start + BULK_APPROVE_CHUNK]
            client.bulk_approve([s.submission_id for s in chunk])
            Submission.objects.filter(pk__in=[s.pk for s in chunk]).update(
                decision="approve", status=api.APPROVED, decided_at=timezone.now(), decided_by=user
            )
            done += len(chunk)
    except (api.Unavailable, api.ProlificError, NotConfigured) as exc:
        return done, f"{exc}. {len(clean) - done} submission(s) were not approved; try again later."
    return done, ""


# --- bonuses


@dataclass
class BonusResult:
    paid: int = 0
    amount: Decimal = Decimal("0")
    error: str = ""


def pay_bonuses(wave: Wave) -> BonusResult:
    """Pay the wave's bonus (``bonus_per_episode`` x finished episodes) to every approved worker not paid yet, in
    one bulk payment. A bulk payment set up but not known to be paid is paid (and only that) on the next try; one
    whose payment may have reached Prolific is never paid again from here (state ``unknown``)."""
    result = BonusResult()
    if wave.bonus_per_episode <= 0:
        result.error = "This wave pays no bonus (bonus per episode is 0)."
        return result
    try:
        client = make_client()
        pending = list(wave.submissions.filter(bonus_state="set-up").exclude(bonus_batch_id=""))
        if not pending:
            due = {}
            for sub in wave.submissions.filter(status=api.APPROVED, bonus_state="").select_related("participant"):
                amount = wave.bonus_per_episode * finished_episodes(sub.participant)
                if amount > 0:
                    due[sub] = amount
            if not due:
                result.error = "Nobody is due a bonus: approved workers who finished an episode are paid once."
                return result
            batch = client.set_up_bonuses(wave.prolific_study_id, {s.prolific_pid: a for s, a in due.items()})
            for sub, amount in due.items():
                sub.bonus_amount, sub.bonus_batch_id, sub.bonus_state = amount, batch, "set-up"
                sub.save(update_fields=["bonus_amount", "bonus_batch_id", "bonus_state"])
            pending = list(due)
        for batch_id in sorted({s.bonus_batch_id for s in pending}):
            mine = [s for s in pending if s.bonus_batch_id == batch_id]
            try:
                client.pay_bonuses(batch_id)
            except api.Unknown as exc:
                Submission.objects.filter(pk__in=[s.pk for s in mine]).update(bonus_state="unknown")
                result.error = f"{exc}. Check the bonus payments on Prolific before paying again."
                continue
            Submission.objects.filter(pk__in=[s.pk for s in mine]).update(bonus_state="paid")
            result.paid += len(mine)
            result.amount += sum((s.bonus_amount or Decimal("0") for s in mine), Decimal("0"))
    except (api.Unavailable, api.ProlificError, NotConfigured) as exc:
        result.error = f"{exc}. Nobody was paid; try again later."
    return result


# --- waves: the next wave's group, reminders


def completers(wave: Wave) -> list[Submission]:
    """The wave's workers who may take the next wave: approved on Prolific (reviewed and accepted)."""
    return list(wave.submissions.filter(status=api.APPROVED).exclude(decision="reject").order_by("id"))


def move_completers(wave: Wave) -> tuple[int, str]:
    """Add the wave's completers not added yet to ``next_group_id`` (Prolific ignores members already in it)."""
    if not wave.next_group_id:
        return 0, "Set the participant group of the next wave first."
    todo = [s for s in completers(wave) if s.grouped_at is None]
    if not todo:
        return 0, ""
    try:
        make_client().add_to_group(wave.next_group_id, [s.prolific_pid for s in todo])
    except (api.Unavailable, api.ProlificError, NotConfigured) as exc:
        return 0, f"{exc}. Nobody was added; try again later."
    Submission.objects.filter(pk__in=[s.pk for s in todo]).update(grouped_at=timezone.now())
    # let them into the next wave in memeval too: past this wave's last session (Study.wave_sessions)
    Participant.objects.filter(pk__in=[s.participant_id for s in todo if s.participant_id], wave=wave.number).update(
        wave=wave.number + 1, paused_at=None
    )
    return len(todo), ""


def next_wave(wave: Wave) -> Wave | None:
    return Wave.objects.filter(study=wave.study, number__gt=wave.number).order_by("number").first()


def send_due_reminders(now: dt.datetime | None = None) -> int:
    """Remind every worker moved into a next wave's group, once, when that wave is due (``next_due_at``). A worker
    who already has a submission in the next wave is not reminded. Prolific down: the rest wait for the next run."""
    now = now or timezone.now()
    sent = 0
    for wave in Wave.objects.filter(next_due_at__lte=now).select_related("study"):
        nxt = next_wave(wave)
        started = set(nxt.submissions.values_list("prolific_pid", flat=True)) if nxt else set()
        todo = wave.submissions.filter(grouped_at__isnull=False, reminded_at__isnull=True).exclude(
            prolific_pid__in=started
        )
        if not todo.exists():
            continue
        try:
            client = make_client()
            for sub in todo.order_by("id"):
                client.send_message(
                    sub.prolific_pid, nxt.prolific_study_id if nxt else wave.prolific_study_id, wave.reminder_text
                )
                Submission.objects.filter(pk=sub.pk).update(reminded_at=now)
                sent += 1
        except (api.Unavailable, api.ProlificError, NotConfigured) as exc:
            log.warning("Prolific reminders for %s stopped: %s", wave, exc)
    return sent


def run_background(now: dt.datetime | None = None) -> dict[str, int]:
    """The periodic work (Celery beat / ``manage.py prolific_sync``): poll every wave, send due reminders."""
    if not configured():
        return {"waves": 0, "released": 0, "reminded": 0}
    released = waves = 0
    for wave in Wave.objects.filter(study__status__in=[Study.Status.OPEN, Study.Status.CLOSED]).select_related("study"):
        released += sync_wave(wave).released
        waves += 1
    return {"waves": waves, "released": released, "reminded": send_due_reminders(now)}
