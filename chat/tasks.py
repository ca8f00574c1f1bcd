"""Celery tasks of the chat that are not jobs of the runtime: the periodic abandonment sweep (Celery beat).
Replies, memory updates and arm jobs run as jobs of the runtime (``runtime.tasks.run_job``)."""

from __future__ import annotations

from celery import shared_task

from chat import privacy
from chat.timing import sweep_abandoned


@shared_task(ignore_result=True)
def sweep_abandoned_task() -> None:
    """Celery beat's periodic sweep (CELERY_BEAT_SCHEDULE): workers gone too long are marked abandoned."""
    sweep_abandoned()


@shared_task(ignore_result=True)
def sweep_retention_task() -> None:
    """Celery beat's retention sweep (CELERY_BEAT_SCHEDULE): each study's retention period (chat.privacy)."""
    privacy.sweep_retention()
