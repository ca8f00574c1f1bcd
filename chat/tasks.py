"""Celery tasks: ids in, one service call, retries at the edge. Each is idempotent; the reply and memory jobs and claim their
row before calling an LLM, so a duplicate delivery makes no LLM call.

Retries never sleep in a worker: the reply job enqueues its own next attempt with a countdown
(chat.replies.generate_reply), and these tasks retry database errors (a PostgreSQL restart) and
failed memory updates with a countdown. Time limits follow the jobs' own deadlines, and the broker's
visibility timeout (settings) exceeds them.
"""

from __future__ import annotations

from celery import Task, shared_task
from django.conf import settings
from django.db import DatabaseError

from chat import armjobs, memory_updates, privacy, replies
from chat.timing import sweep_abandoned

# A reply gives up at its deadline; the hard limit only catches a job stuck outside the LLM stream.
_REPLY_LIMIT = int(settings.CHAT_REPLY_DEADLINE_SECONDS + 60)
_MEMORY_LIMIT = int(settings.CHAT_MEMORY_TIME_LIMIT_SECONDS)


@shared_task(
    acks_late=True, ignore_result=True, autoretry_for=(DatabaseError,), max_retries=8,
    retry_backoff=2, retry_backoff_max=30, retry_jitter=False,
    soft_time_limit=_REPLY_LIMIT, time_limit=_REPLY_LIMIT + 30,
)  # fmt: skip
def generate_reply_task(message_id: int) -> None:
    """One attempt at the bot reply of a pending placeholder (later attempts are enqueued by it)."""
    replies.generate_reply(message_id)


@shared_task(
    bind=True, acks_late=True, ignore_result=True, max_retries=12,
    soft_time_limit=_MEMORY_LIMIT, time_limit=_MEMORY_LIMIT + 30,
)  # fmt: skip
def update_memory(self: Task[[int], None], session_id: int) -> None:
    """The arm's end-of-session memory update, keyed by session: running it twice applies it once.
    The service decides when its attempts are spent (then it keeps the previous state)."""
    try:
        memory_updates.update_memory(session_id)
    except memory_updates.MemoryUpdateFailed as exc:
        raise self.retry(exc=exc, countdown=exc.countdown) from exc
    except DatabaseError as exc:
        raise self.retry(exc=exc, countdown=min(30, 2 ** (self.request.retries + 1))) from exc


@shared_task(acks_late=True, ignore_result=True)
def run_arm_job(job_id: int) -> None:
    """An arm's readiness checks or automatic evaluation (``chat.armjobs``); a second delivery is a no-op."""
    armjobs.run(job_id)


@shared_task(ignore_result=True)
def sweep_abandoned_task() -> None:
    """Celery beat's periodic sweep (CELERY_BEAT_SCHEDULE): workers gone too long are marked abandoned."""
    sweep_abandoned()


@shared_task(ignore_result=True)
def sweep_retention_task() -> None:
    """Celery beat's retention sweep (CELERY_BEAT_SCHEDULE): each study's retention period (chat.privacy)."""
    privacy.sweep_retention()
