"""Celery tasks: ids in, one service call, retries at the edge. Each is idempotent."""

from __future__ import annotations

from celery import Task, shared_task

from chat import armjobs, services


@shared_task(acks_late=True, ignore_result=True)
def generate_reply_task(message_id: int) -> None:
    """The bot reply of a pending placeholder (retries of the LLM call happen inside, visibly)."""
    services.generate_reply(message_id)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=3)
def update_memory(self: Task[[int], None], session_id: int) -> None:
    """The arm's end-of-session memory update, keyed by session: running it twice applies it once."""
    final = self.max_retries is not None and self.request.retries >= self.max_retries  # None: retry forever
    try:
        services.update_memory(session_id, final=final)
    except services.MemoryUpdateFailed as exc:
        raise self.retry(exc=exc, countdown=min(60, 5 * 2**self.request.retries)) from exc


@shared_task(acks_late=True, ignore_result=True)
def run_arm_job(job_id: int) -> None:
    """An arm's readiness checks or automatic evaluation (``chat.armjobs``); a second delivery is a no-op."""
    armjobs.run(job_id)


@shared_task(ignore_result=True)
def sweep_abandoned_task() -> None:
    """Celery beat's periodic sweep (CELERY_BEAT_SCHEDULE): workers gone too long are marked abandoned."""
    from chat.timing import sweep_abandoned

    sweep_abandoned()
