"""Celery's entry to the Prolific background work: one thin task, the work is prolific.services.run_background."""

from __future__ import annotations

from celery import shared_task

from prolific import services


@shared_task(ignore_result=True)
def prolific_sync_task() -> None:
    """Celery beat (CELERY_BEAT_SCHEDULE, PROLIFIC_SYNC_SECONDS): poll every wave, send the reminders due."""
    services.run_background()
