"""The runtime's Celery tasks: one runs any job by id (the queue is its lane's), one sweeps for lost work.

Retries never sleep in a worker: a failed attempt is queued again with a countdown (runtime/jobs.py).
A database error that kept the attempt from recording its outcome is retried here with back-off (the
claim was given back, or its lease lapses).

A job's task is acknowledged late (``CELERY_TASK_ACKS_LATE``), on the broker connection it was delivered on.
A reply that streams across a Redis restart finishes after the worker's consumer reconnected: its delivery's
connection is closed, and kombu's Redis transport, asked to ack on it, raised AttributeError (not a connection
error, so Celery did not catch it). :class:`JobRequest` skips the ack of such a delivery: the runtime's job row,
not the broker message, says the job is done, and a message of a closed connection is gone with the restart
or restored after the visibility timeout, when its second run does nothing.

An ack that fails because the broker is down (Celery logs "Couldn't ack" and goes on) left kombu's channel
counting the message as unacknowledged: with every pool process busy when Redis died, the prefetch window
never freed, kombu kept the consumer's BRPOP paused, never saw the dead connection and the worker consumed
nothing more. :func:`free_prefetch_slot` takes the message off the channel's count without the broker. It is
a private internal of kombu (docs/architecture.md, "Private internals"; pinned by
tests/test_private_internals.py): the virtual transport's ``QoS.ack`` called past the Redis transport's
override, which would ask Redis first.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.worker.request import Request
from django.db import DatabaseError

from runtime import jobs, sweeper

log = logging.getLogger(__name__)


def delivery_gone(message: Any) -> bool:
    """True when the broker connection a message was delivered on is closed (kombu's public attributes: a
    channel's ``closed``, its transport's ``client``, None once the connection is released)."""
    channel = getattr(message, "channel", None)
    if channel is None or getattr(channel, "closed", False):
        return True
    transport = getattr(channel, "connection", None)
    return transport is None or getattr(transport, "client", None) is None


def free_prefetch_slot(message: Any) -> None:
    """Take a message whose ack failed off its channel's count of unacknowledged messages, without the broker
    (kombu's virtual ``QoS.ack``; the Redis transport's own asks Redis first)."""
    from kombu.transport.virtual import QoS

    qos = getattr(message.channel, "qos", None)
    if isinstance(qos, QoS):
        QoS.ack(qos, message.delivery_tag)


class JobRequest(Request):
    """Celery's request, except that the ack (or reject) of a delivery whose connection is closed is skipped
    rather than raised into the worker's event loop, and an ack the broker did not take frees its prefetch
    slot."""

    def acknowledge(self) -> None:
        if not self.acknowledged and delivery_gone(self.message):
            log.info("task %s: its broker connection closed before the ack (a broker restart); not acked", self.id)
            self.acknowledged = True
            return
        done = self.acknowledged
        super().acknowledge()  # Celery's: a broker error is logged ("Couldn't ack") and not raised
        if not done and not self.message.acknowledged:
            log.warning("task %s: its ack failed (broker unreachable); its prefetch slot is freed", self.id)
            free_prefetch_slot(self.message)

    def reject(self, requeue: bool = False) -> None:
        if not self.acknowledged and delivery_gone(self.message):
            log.info("task %s: its broker connection closed before the reject; the sweeper sends it again", self.id)
            self.acknowledged = True
            return
        super().reject(requeue=requeue)


class JobTask(Task):  # type: ignore[type-arg]
    """The job task's class: its requests are :class:`JobRequest` (Celery's ``Task.Request``)."""

    Request = "runtime.tasks:JobRequest"


@shared_task(
    base=JobTask, acks_late=True, ignore_result=True, autoretry_for=(DatabaseError,), max_retries=8,
    retry_backoff=2, retry_backoff_max=30, retry_jitter=True,
)  # fmt: skip
def run_job(job_id: int) -> None:
    """One attempt of a job (a second delivery of a running job does nothing)."""
    jobs.run(job_id)


@shared_task(ignore_result=True)
def sweep_task() -> None:
    """Celery beat's sweep for lost jobs (``CELERY_BEAT_SCHEDULE``)."""
    sweeper.sweep()
