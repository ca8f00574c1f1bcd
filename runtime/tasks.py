"""The runtime's Celery tasks: one runs any job by id (the queue is its lane's), one sweeps for lost work.

Retries never sleep in a worker: a failed attempt is queued again with a countdown (runtime/jobs.py).
A database error that kept the attempt from recording its outcome is retried here with back-off (the
claim was given back, or its lease lapses).
"""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from runtime import jobs, sweeper


@shared_task(
    acks_late=True, ignore_result=True, autoretry_for=(DatabaseError,), max_retries=8,
    retry_backoff=2, retry_backoff_max=30, retry_jitter=True,
)  # fmt: skip
def run_job(job_id: int) -> None:
    """One attempt of a job (a second delivery of a running job does nothing)."""
    jobs.run(job_id)


@shared_task(ignore_result=True)
def sweep_task() -> None:
    """Celery beat's sweep for lost jobs (``CELERY_BEAT_SCHEDULE``)."""
    sweeper.sweep()
