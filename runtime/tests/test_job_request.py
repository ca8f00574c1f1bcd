"""A job task delivered before a broker reconnect (issue 27): its late ack on the closed connection is skipped,
not raised into the worker's event loop. On kombu's Redis transport that ack raised AttributeError in
``_connparams`` (the transport's ``client`` is None once the connection is released), which Celery does not
catch: the reply worker stopped consuming after a Redis restart (``bench/faults.py --faults redis daphne
celery-child``). These tests use kombu's in-memory transport, which has the same channel and transport
attributes; the Redis case itself is the fault suite's (tests/test_fault_suite.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection, Queue

from evalsite.celery import app
from runtime import tasks


@pytest.fixture
def delivered() -> Iterator[tuple[Connection, Any]]:
    """A run_job message taken from a queue of the in-memory broker, not yet acknowledged."""
    conn = Connection("memory://")
    queue = Queue("job-request-test", channel=conn.default_channel)
    queue.declare()
    app.send_task("runtime.tasks.run_job", args=[1], queue=queue, connection=conn)
    message = queue.get(no_ack=False)
    assert message is not None
    yield conn, message
    conn.release()


def request_for(message: Any) -> tasks.JobRequest:
    """As the worker makes it (celery.worker.strategy): the ack and reject are the message's own."""
    return tasks.JobRequest(
        message, app=app, task=tasks.run_job, on_ack=message.ack_log_error, on_reject=message.reject_log_error,
        connection_errors=(ConnectionError,),
    )  # fmt: skip


def test_run_job_uses_the_job_request() -> None:
    assert tasks.run_job.Request == "runtime.tasks:JobRequest"


def test_an_open_delivery_is_acked(delivered: tuple[Connection, Any]) -> None:
    _conn, message = delivered
    assert not tasks.delivery_gone(message)
    request_for(message).acknowledge()
    assert message.acknowledged


def test_a_delivery_of_a_released_connection_is_not_acked(delivered: tuple[Connection, Any]) -> None:
    conn, message = delivered
    conn.release()  # what the worker's consumer does on a connection error before it reconnects
    # kombu's attribute delivery_gone reads first: a closed channel (Redis's also keeps its transport, whose
    # ``client`` is None once the connection is released: the other case it reads)
    assert message.channel.closed
    assert tasks.delivery_gone(message)
    request = request_for(message)
    request.acknowledge()  # no error, and the closed channel is not asked
    assert request.acknowledged and not message.acknowledged


def test_a_reject_of_a_released_connection_is_skipped(delivered: tuple[Connection, Any]) -> None:
    conn, message = delivered
    conn.release()
    request = request_for(message)
    request.reject(requeue=True)
    assert request.acknowledged and not message.acknowledged


def test_an_ack_the_broker_did_not_take_frees_its_prefetch_slot(
    delivered: tuple[Connection, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _conn, message = delivered
    qos = message.channel.qos
    qos.prefetch_count = 1  # the one slot this delivery holds
    assert not qos.can_consume()

    def down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(message.channel, "basic_ack", down)  # Redis is down: Celery logs "Couldn't ack"
    request = request_for(message)
    request.acknowledge()
    assert request.acknowledged and not message.acknowledged
    assert qos.can_consume()  # else the consumer waits for a slot that never frees (its BRPOP stays paused)
