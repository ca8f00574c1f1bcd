"""The privacy audit (docs/privacy.md): a model of the studies app, in a module of its own; studies/models.py
imports it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

__all__ = ["PersonalDataSettings", "PrivacyEvent"]


class PersonalDataSettings(models.Model):
    """The study's setting of the personal-data scan (a base of :class:`studies.models.Study`; chat/pii.py)."""

    flag_personal_data = models.BooleanField(
        default=False,
        help_text="Scan workers' messages for personal data (e-mail addresses, phone numbers, card and bank "
        "numbers, IP addresses, web addresses…) after each session and list what was found on the quality page "
        "for you to review. Nothing in the transcript changes.",
    )

    class Meta:
        abstract = True


class PrivacyEvent(models.Model):
    """The audit record of what was done to a worker's personal data: a deletion (``manage.py delete_participant``
    or the quality page's button), the retention sweep, or the owner looking at a raw Prolific ID.

    It names the worker by pseudonym only (never the raw ID nor anything they wrote), keeps the study's name and slug
    (it outlives a deleted study) and, for a deletion, how many rows of each kind went."""

    class Action(models.TextChoices):
        DELETED = "deleted", "Worker deleted"
        PSEUDONYMISED = "pseudonymised", "Raw IDs dropped (retention)"
        TRANSCRIPTS_DELETED = "transcripts_deleted", "Transcripts deleted (retention)"
        REVEALED = "revealed", "Raw ID shown to the owner"

    study = models.ForeignKey(
        "studies.Study", null=True, blank=True, related_name="privacy_events", on_delete=models.SET_NULL
    )
    study_slug = models.CharField(max_length=80)
    pseudonym = models.CharField(max_length=16)
    action = models.CharField(max_length=24, choices=Action.choices)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL)
    via = models.CharField(max_length=40, help_text="The button, the command, the retention sweep.")
    reason = models.CharField(max_length=500, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.study_slug}:{self.pseudonym} {self.action}"
