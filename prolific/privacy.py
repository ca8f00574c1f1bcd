"""A worker's Prolific submissions follow what happens to the worker (docs/privacy.md). A submission keeps the
worker's raw Prolific ID and the submission's own id (the ``SESSION_ID`` of the worker's link), so:

* a deleted worker (``studies.signals.participant_erasing``) leaves no submission behind: the submissions of the
  erased participants are deleted with them, by their link and by their Prolific ID within the study's waves (a
  submission read before the worker arrived has no link), with the webhook events that named them; each is
  remembered only as :func:`erased_id` (:class:`prolific.models.ErasedSubmission`), so that a later poll of Prolific
  does not read it in again;
* a pseudonymised worker (``studies.signals.participant_pseudonymising``, the retention sweep) keeps their
  submissions' statuses and decisions, without the raw IDs: the Prolific ID is blanked, the submission's id becomes
  :func:`erased_id` (a keyed hash: unique, not reversible without the site's key, and what a later poll of Prolific
  recognises, so the submission is not read in again with its raw IDs), and the webhook events that named the
  submission forget it."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet

from prolific.models import ErasedSubmission, Submission, WebhookEvent
from studies.models import Participant
from studies.signals import participant_erasing, participant_footprint, participant_pseudonymising

ERASED_PREFIX = "erased-"


def erased_id(submission_id: str) -> str:
    """What a pseudonymised submission's id becomes: ``erased-`` and an HMAC of the id under the site's key."""
    digest = hmac.new(settings.SECRET_KEY.encode(), submission_id.encode(), hashlib.sha256).hexdigest()
    return ERASED_PREFIX + digest[:40]


def submissions_of(participants: QuerySet[Participant]) -> QuerySet[Submission]:
    """The submissions of these participants: linked to them, or with their Prolific ID in their study's waves."""
    rows = list(participants.values_list("pk", "study_id", "external_id"))
    match = Q(participant__in=[pk for pk, *_ in rows])
    for _, study_id, external_id in rows:
        # the stored ID, and the Prolific ID in it (``prolific:<PID>`` or ``prolific:<PID>/<SESSION_ID>``)
        pids = {external_id, external_id.removeprefix("prolific:").split("/", 1)[0]} - {""}
        match |= Q(wave__study_id=study_id, prolific_pid__in=sorted(pids))
    return Submission.objects.filter(match) if rows else Submission.objects.none()


def delete_submissions_of(sender: Any, participants: Any, **kwargs: Any) -> None:
    submissions = submissions_of(participants)
    ids = [i for i in submissions.values_list("submission_id", flat=True) if not i.startswith(ERASED_PREFIX)]
    WebhookEvent.objects.filter(resource_id__in=ids).delete()
    ErasedSubmission.objects.bulk_create([ErasedSubmission(key=erased_id(i)) for i in ids], ignore_conflicts=True)
    submissions.delete()


def is_erased(submission_id: str) -> bool:
    """Whether the submission's worker was deleted or pseudonymised: it is never read in again with raw IDs."""
    key = erased_id(submission_id)
    return ErasedSubmission.objects.filter(key=key).exists() or Submission.objects.filter(submission_id=key).exists()


def pseudonymise_submissions_of(sender: Any, participants: Any, **kwargs: Any) -> None:
    for sub in submissions_of(participants).exclude(submission_id__startswith=ERASED_PREFIX):
        WebhookEvent.objects.filter(resource_id=sub.submission_id).update(resource_id="")
        Submission.objects.filter(pk=sub.pk).update(prolific_pid="", submission_id=erased_id(sub.submission_id))


def count_submissions_of(sender: Any, participants: Any, **kwargs: Any) -> dict[str, int]:
    """What a deletion of ``participants`` takes of Prolific's records: their submissions (participant_footprint)."""
    return {"prolific_submissions": submissions_of(participants).count()}


def connect() -> None:
    participant_erasing.connect(delete_submissions_of, dispatch_uid="prolific.privacy")
    participant_footprint.connect(count_submissions_of, dispatch_uid="prolific.privacy.footprint")
    participant_pseudonymising.connect(pseudonymise_submissions_of, dispatch_uid="prolific.privacy.pseudonymise")
