"""Celery tasks of the annotation app: periodic upkeep, scheduled by celery beat (``CELERY_BEAT_SCHEDULE``)."""

from __future__ import annotations

from celery import shared_task

from annotation import services


@shared_task(ignore_result=True)
def expire_leases_task() -> int:
    """Return the slots of expired assignments in every queue to the pool (``manage.py expire_leases``).

    Claims sweep their own queue at most every ``services.SWEEP_INTERVAL``; this sweep returns stale
    claims also in queues nobody is claiming from. Idempotent: a second run finds nothing to expire."""
    return services.expire_leases()
