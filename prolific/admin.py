"""Django admin for the Prolific side: waves editable, submissions and webhook events read-only (what Prolific
said and what memeval did is a record, changed only through the study's Prolific page)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from prolific.models import Submission, Wave, WebhookEvent


class ReadOnly(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Wave)
class WaveAdmin(admin.ModelAdmin[Wave]):
    list_display = ("study", "number", "prolific_study_id", "next_group_id", "next_due_at", "last_synced_at")
    list_filter = ("study",)


@admin.register(Submission)
class SubmissionAdmin(ReadOnly):
    list_display = ("submission_id", "wave", "status", "decision", "rejection_category", "bonus_state", "grouped_at")
    list_filter = ("wave__study", "status", "decision")


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnly):
    list_display = ("event_type", "resource_id", "received_at")
