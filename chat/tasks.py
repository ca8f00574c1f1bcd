"""Celery tasks: ids in, one service call, retries at the edge. Both are idempotent."""

from __future__ import annotations

from celery import Task, shared_task

from chat import services


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
