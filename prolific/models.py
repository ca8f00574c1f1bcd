"""The Prolific side of a study: its waves (one Prolific study each), their submissions, webhook events seen.

A memeval study can recruit through several Prolific studies, its *waves*: wave 1 is open to everyone who
passes Prolific's screeners; each later wave is restricted (on Prolific) to a participant group that memeval
fills with the completers of the wave before (``next_group_id``), and its workers are reminded when it is due.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from studies.models import Participant, Study

DEFAULT_REMINDER = (
    "Thank you for taking part in the first part of our chatbot study. The next part is open now on Prolific: "
    "please look for it in your study list. It continues the same conversations."
)


class Wave(models.Model):
    study = models.ForeignKey(Study, related_name="prolific_waves", on_delete=models.CASCADE)
    number = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    prolific_study_id = models.CharField(
        max_length=64, unique=True, help_text="The Prolific study's id (its URL on app.prolific.com, or %STUDY_ID%)."
    )
    next_group_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="The Prolific participant group the next wave is restricted to: this wave's completers are "
        "added to it.",
    )
    next_due_at = models.DateTimeField(
        null=True, blank=True, help_text="When the next wave opens: its members get a reminder then."
    )
    reminder_text = models.TextField(default=DEFAULT_REMINDER)
    bonus_per_episode = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Bonus (in the Prolific study's currency) for each episode whose every session the worker "
        "finished; 0 = none.",
    )
    last_synced_at = models.DateTimeField(null=True, blank=True)
    sync_error = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["study", "number"], name="prolific_wave_unique_number")]
        ordering = ["study", "number"]

    def __str__(self) -> str:
        return f"{self.study.slug} wave {self.number} ({self.prolific_study_id})"


class Submission(models.Model):
    """One Prolific submission as memeval knows it: Prolific's status, and what memeval did about it."""

    wave = models.ForeignKey(Wave, related_name="submissions", on_delete=models.CASCADE)
    submission_id = models.CharField(max_length=64, unique=True)
    prolific_pid = models.CharField(max_length=64)
    participant = models.ForeignKey(
        Participant, null=True, blank=True, related_name="prolific_submissions", on_delete=models.SET_NULL
    )
    status = models.CharField(max_length=32, help_text="As Prolific last said.")
    status_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(
        null=True, blank=True, help_text="Returned or timed out: the worker's place and arm slot were given back."
    )
    decision = models.CharField(max_length=10, blank=True)  # approve / reject, once sent to Prolific
    rejection_category = models.CharField(max_length=32, blank=True)
    decision_message = models.TextField(blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    bonus_amount = models.DecimalField(max_digits=8, decimal_places=2, null=True, blank=True)
    bonus_batch_id = models.CharField(max_length=64, blank=True)
    bonus_state = models.CharField(max_length=10, blank=True)  # set-up / paid / unknown
    grouped_at = models.DateTimeField(null=True, blank=True, help_text="Added to the next wave's group.")
    reminded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["wave", "id"]

    def __str__(self) -> str:
        return f"{self.submission_id} ({self.status})"


class WebhookEvent(models.Model):
    """A webhook request accepted once: its signature, so the same request sent again is a replay."""

    signature = models.CharField(max_length=128, unique=True)
    event_type = models.CharField(max_length=64)
    resource_id = models.CharField(max_length=64)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.event_type} {self.resource_id}"


class ErasedSubmission(models.Model):
    """A submission of a worker deleted everywhere (prolific/privacy.py), remembered only as a keyed hash of its id
    (``privacy.erased_id``: not reversible without the site's key), so that a later poll of Prolific or a webhook
    about it does not read the worker's raw IDs in again."""

    key = models.CharField(max_length=64, unique=True)
    erased_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key
