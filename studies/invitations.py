"""A study's invitations of co-researchers (studies/team.py has the workflow)."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models
from django.utils import timezone

INVITATION_MAX_AGE = dt.timedelta(days=7)


class StudyInvitation(models.Model):
    """The owner's invitation of a co-researcher to one study with a role (``studies/team.py``). The link carries a
    random key; only its SHA-256 is stored, so the database cannot be read for a working link. One use, 7 days."""

    class Role(models.TextChoices):
        EDITOR = "editor", "Editor: sees and changes the study"
        VIEWER = "viewer", "Viewer: sees the study, changes nothing"

    study = models.ForeignKey("studies.Study", related_name="invitations", on_delete=models.CASCADE)
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.EDITOR)
    note = models.CharField(max_length=200, blank=True, help_text="Whom it is for (for you; not sent anywhere).")
    key_sha256 = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, related_name="+", on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"invitation to {self.study.slug} as {self.role}"

    @property
    def expires_at(self) -> dt.datetime:
        return self.created_at + INVITATION_MAX_AGE

    @property
    def usable(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None and timezone.now() < self.expires_at
