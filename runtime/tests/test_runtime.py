"""The job runtime on its own (kinds declared by the tests): the retry policy, one live job per target, the
claim, an attempt's three endings, the sweeper, and the lanes."""

from __future__ import annotations

import copy
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, transaction
from django.utils import timezone

from runtime import executor, jobs, kinds, leases, sweeper
from runtime.jobs import Attempt
from runtime.kinds import RetryPolicy
from runtime.models import DEADLINE_ERROR, LOST_ERROR, Job


class Transient(Exception):
    def __init__(self, message: str = "try again", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# ------------------------------------------------------------------------------------------ the policy


def test_the_policy_waits_its_backoff_then_repeats_the_last_wait() -> None:
    policy = RetryPolicy(max_attempts=None, backoff=(1, 2, 4), transient=(Transient,))
    assert [policy.wait(n) for n in (1, 2, 3, 4, 9)] == [1, 2, 4, 4, 4]


def test_without_a_backoff_the_waits_grow_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=None, base=0.5, factor=3, cap=10)
    assert [policy.wait(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.5, 4.5, 10, 10]


def test_jitter_draws_each_wait_below_the_backoff_and_spreads_jobs_that_failed_together() -> None:
    policy = RetryPolicy(max_attempts=None, backoff=(8,), jitter=0.5)
    rng = random.Random(1)
    waits = [policy.wait(1, rng=rng) for _ in range(200)]
    assert all(4 <= w <= 8 for w in waits) and len({round(w, 3) for w in waits}) > 150


def test_retry_after_is_the_least_wait_unless_the_policy_says_otherwise() -> None:
    asked = Transient("429", retry_after=20)
    assert RetryPolicy(backoff=(1,)).wait(1, asked) == 20
    assert RetryPolicy(backoff=(30,)).wait(1, asked) == 30  # already longer
    assert RetryPolicy(backoff=(1,), honour_retry_after=False).wait(1, asked) == 1


def test_the_policy_retries_only_transient_errors_within_its_attempts_and_its_deadline() -> None:
    policy = RetryPolicy(max_attempts=3, backoff=(2,), transient=(Transient,))
    assert policy.next_wait(1, Transient(), remaining=None) == 2
    assert policy.next_wait(1, OperationalError("the database restarted"), remaining=None) == 2  # always transient
    assert policy.next_wait(1, ValueError("a bug"), remaining=None) is None
    assert policy.next_wait(3, Transient(), remaining=None) is None  # attempts spent
    assert policy.next_wait(1, Transient(), remaining=1.5) is None  # the wait would end past the deadline
    assert policy.next_wait(1, Transient("slow down", retry_after=60), remaining=30) is None
    until_deadline = RetryPolicy(max_attempts=None, backoff=(2,), transient=(Transient,))
    assert until_deadline.next_wait(500, Transient(), remaining=10) == 2


# ------------------------------------------------------------------------------------------ running jobs


class Script:
    """A kind whose attempts do what the test says, in order: a value to return, or an exception to raise."""

    def __init__(self, *steps: Any, policy: RetryPolicy | None = None, lane: str = "memory") -> None:
        self.steps = list(steps)
        self.seen: list[tuple[int, Any]] = []
        self.retries: list[float] = []
        self.failures: list[tuple[str, bool]] = []
        self.kind = kinds.declare(
            f"test.script{id(self)}", lane=lane, run=self.run, retry=policy or RetryPolicy(),
            on_retry=lambda job, error, wait: self.retries.append(wait),
            on_failure=lambda job, error: self.failures.append((error, transaction.get_connection().in_atomic_block)),
        )  # fmt: skip

    def run(self, job: Job, attempt: Attempt, handed: Any) -> dict[str, Any] | None:
        self.seen.append((attempt.number, handed))
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[no-any-return]


@pytest.fixture
def inline(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"


@pytest.mark.django_db(transaction=True)
def test_an_attempt_that_returns_completes_the_job_with_its_result(inline: None) -> None:
    script = Script({"answer": 42})
    job = jobs.submit(script.kind, 7, scope="study:1", label="the answer")
    job.refresh_from_db()
    assert (job.status, job.result, job.attempts, job.lease_until, job.error) == ("done", {"answer": 42}, 1, None, "")
    assert job.worker == jobs.worker_name() and job.finished_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_transient_failure_is_queued_again_with_its_wait_and_sent_with_that_countdown(
    inline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, float]] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append((job_id, countdown)))
    script = Script(Transient("503"), None, policy=RetryPolicy(max_attempts=3, backoff=(3, 7), transient=(Transient,)))
    job = jobs.submit(script.kind, 1)
    jobs.run(job.pk)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error, job.lease_until) == ("queued", 1, "503", None)
    assert job.due_at > timezone.now() + timedelta(seconds=2) and job.retrying
    assert sent == [(job.pk, 0), (job.pk, 3)] and script.retries == [3]  # no worker sleeps: a countdown
    jobs.run(job.pk)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error) == ("done", 2, "")


@pytest.mark.django_db(transaction=True)
def test_a_failure_for_good_runs_the_kinds_on_failure_in_the_same_transaction(inline: None) -> None:
    script = Script(Transient("503"), Transient("503"), policy=RetryPolicy(max_attempts=2, transient=(Transient,)))
    job = jobs.submit(script.kind, 1)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error) == ("failed", 2, "503")
    assert script.failures == [("503", True)]  # inside the transaction that failed the job


@pytest.mark.django_db(transaction=True)
def test_an_error_that_is_not_transient_fails_at_once(inline: None) -> None:
    script = Script(ValueError("misconfigured"), policy=RetryPolicy(max_attempts=5, transient=(Transient,)))
    job = jobs.submit(script.kind, 1)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error) == ("failed", 1, "misconfigured")


@pytest.mark.django_db(transaction=True)
def test_a_job_past_its_deadline_fails_before_its_attempt_starts(inline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    script = Script({"late": True})
    job = jobs.submit(script.kind, 1, deadline=timezone.now() - timedelta(seconds=1))
    jobs.run(job.pk)
    job.refresh_from_db()
    assert (job.status, job.error, script.seen) == ("failed", DEADLINE_ERROR, [])


@pytest.mark.django_db(transaction=True)
def test_a_second_submission_gets_the_live_job_and_a_duplicate_delivery_does_nothing(
    inline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    script = Script({"once": True})
    first = jobs.submit(script.kind, "target")
    assert jobs.submit(script.kind, "target").pk == first.pk and Job.objects.count() == 1
    Job.objects.filter(pk=first.pk).update(status="running", attempts=1, lease_until=leases.later(30))
    jobs.run(first.pk)  # another worker holds it
    assert script.seen == []


@pytest.mark.django_db(transaction=True)
def test_a_job_handed_over_by_its_submitter_runs_without_claiming_or_reading_again(inline: None) -> None:
    script = Script({"ok": True})
    with transaction.atomic():
        job = jobs.submit(script.kind, 1, hand={"read": "rows"}, fresh=True)
        assert (job.status, job.attempts, job.lease_until is not None) == ("running", 1, True)  # claimed at birth
    job.refresh_from_db()
    assert script.seen == [(1, {"read": "rows"})] and job.status == "done"


@pytest.mark.django_db(transaction=True)
def test_a_queued_job_is_claimed_in_one_statement_that_returns_the_whole_row(
    each_database: str, inline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    seen: list[Job] = []
    kind = kinds.declare(
        f"test.claimed{random.random()}", lane="memory", run=lambda job, attempt, handed: seen.append(copy.copy(job)),
        retry=RetryPolicy(),
    )  # fmt: skip
    job = jobs.submit(kind, 5, params={"arm": "memorybank", "n": [1, 2]}, deadline=60)
    with CaptureQueriesContext(connection) as queries:
        jobs.run(job.pk)
    # (SQLite's bookkeeping writes are each in a transaction of their own: BEGIN is not a statement of the job's)
    statements = [q["sql"] for q in queries.captured_queries if q["sql"].split(None, 1)[0].upper() != "BEGIN"]
    assert statements[0].upper().startswith("UPDATE") and "RETURNING" in statements[0].upper()
    assert not [sql for sql in statements if sql.upper().startswith("SELECT") and "runtime_job" in sql]  # no read
    claimed = seen[0]
    assert (claimed.status, claimed.attempts, claimed.worker) == ("running", 1, jobs.worker_name())
    assert claimed.params == {"arm": "memorybank", "n": [1, 2]} and claimed.target == "5"
    assert claimed.deadline_at is not None and claimed.deadline_at.tzinfo is not None
    assert claimed.lease_until is not None and claimed.lease_until > claimed.started_at
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("done", 1)
    jobs.run(job.pk)  # a second delivery of a finished job: neither claimed nor run
    assert len(seen) == 1


@pytest.mark.django_db(transaction=True)
def test_a_run_that_lost_its_job_writes_nothing(inline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    outcome: list[bool] = []

    def taken_over(job: Job, attempt: Attempt, handed: Any) -> None:
        Job.objects.filter(pk=job.pk).update(attempts=2, lease_until=leases.later(60))  # another run claimed it
        outcome.append(attempt.complete({"mine": True}))

    kind = kinds.declare("test.taken_over", lane="memory", run=taken_over)
    job = jobs.submit(kind, 1)
    jobs.run(job.pk)
    job.refresh_from_db()
    assert outcome == [False] and (job.status, job.result, job.attempts) == ("running", None, 2)  # the other run's


@pytest.mark.django_db(transaction=True)
def test_an_attempt_counts_its_time_on_the_monotonic_clock(inline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    left: list[float | None] = []

    real_now = timezone.now

    def measure(job: Job, attempt: Attempt, handed: Any) -> None:
        # a wall-clock step (NTP, a VM resumed) in the middle of the attempt changes nothing
        monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(hours=1))
        left.append(attempt.remaining())
        monkeypatch.undo()

    kind = kinds.declare("test.clock", lane="memory", run=measure)
    jobs.submit(kind, 1, deadline=90)
    assert left and left[0] is not None and 80 < left[0] <= 90


# ------------------------------------------------------------------------------------------ the sweeper


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_takes_back_a_lost_running_job_once_and_fails_one_whose_attempts_are_spent(
    inline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    script = Script(policy=RetryPolicy(max_attempts=2))
    again = jobs.submit(script.kind, "a")
    spent = jobs.submit(script.kind, "b")
    Job.objects.filter(pk=again.pk).update(status="running", attempts=1, lease_until=leases.later(-1))
    Job.objects.filter(pk=spent.pk).update(status="running", attempts=2, lease_until=leases.later(-1))
    sent.clear()
    assert sorted(sweeper.sweep()) == sorted([again.pk, spent.pk])
    assert sweeper.sweep() == []  # taken back once: the next sweep finds nothing lost
    again.refresh_from_db()
    spent.refresh_from_db()
    assert (again.status, again.error, sent) == ("queued", LOST_ERROR, [again.pk])
    assert (spent.status, spent.error) == ("failed", LOST_ERROR) and script.failures == [(LOST_ERROR, True)]


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_sends_a_queued_job_again_once_per_grace_and_fails_one_past_its_deadline(
    inline: None, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    script = Script()
    waiting = jobs.submit(script.kind, "a")
    late = jobs.submit(script.kind, "b", deadline=30)
    sent.clear()
    assert sweeper.sweep() == []  # due a moment ago: its message may still be on its way
    past = timezone.now() - timedelta(seconds=settings.CHAT_JOB_QUEUE_GRACE_SECONDS + 1)
    Job.objects.filter(pk=waiting.pk).update(due_at=past)
    Job.objects.filter(pk=late.pk).update(due_at=past, deadline_at=past)
    assert sorted(sweeper.sweep()) == sorted([waiting.pk, late.pk])
    assert sweeper.sweep() == [] and sent == [waiting.pk]
    late.refresh_from_db()
    assert (late.status, late.error) == ("failed", DEADLINE_ERROR)


class _Broker:
    """What the sweeper uses of Redis: SET NX (a restart without persistence empties ``keys``)."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def set(self, name: str, value: bytes, *, nx: bool) -> bool:
        if nx and name in self.keys:
            return False
        self.keys.add(name)
        return True


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_lost_its_messages_has_every_due_job_sent_again_at_once(
    inline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    broker = _Broker()
    monkeypatch.setattr(sweeper, "_broker", lambda: broker)
    script = Script()
    sweeper.sweep()  # the first sweep sets the mark
    waiting = jobs.submit(script.kind, "a")  # due now: its message is in the broker
    later = jobs.submit(script.kind, "b", countdown=60)  # not due yet: its countdown is the broker's too
    sent.clear()
    assert sweeper.sweep() == [] and sent == []  # the broker kept its messages: nothing is sent twice
    broker.keys.clear()  # Redis restarted without persistence: the queued messages are gone
    assert sweeper.sweep() == [waiting.pk] and sent == [waiting.pk]  # at once, not a queue grace later
    assert sweeper.sweep() == []
    assert later.pk not in sent


@pytest.mark.django_db(transaction=True)
def test_a_send_that_fails_leaves_the_job_queued_for_the_sweeper(inline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Redis is restarting")

    monkeypatch.setattr(executor, "dispatch", broker_down)
    script = Script({"ok": True})
    with transaction.atomic():
        job = jobs.submit(script.kind, 1, hand={"x": 1}, fresh=True)  # claimed at birth for this process
    job.refresh_from_db()
    assert (job.status, job.attempts, job.lease_until) == ("queued", 0, None)  # the claim was given back


@pytest.mark.django_db
@pytest.mark.parametrize(("mode", "started"), [("thread", True), ("inline", False), ("celery", False)])
def test_the_embedded_web_process_sweeps_from_its_first_request(
    client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, mode: str, started: bool
) -> None:
    # jobs lost in a restart of the embedded default are taken back though no page asks and no new job starts a lane;
    # with Celery, beat sweeps; inline (the tests), nobody sweeps behind a test's back
    settings.CHAT_JOB_MODE, settings.RUNTIME_SWEEP_SECONDS = mode, 3600
    ran: list[float] = []
    fresh = sweeper._Thread()
    monkeypatch.setattr(fresh, "_run", ran.append)  # the round itself is tested above: here, only who starts it
    monkeypatch.setattr(sweeper, "THREAD", fresh)
    client.get("/")
    if fresh._thread is not None:
        fresh._thread.join(5)
    assert ran == ([3600.0] if started else [])


# ------------------------------------------------------------------------------------------ lanes


def test_an_unknown_lane_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown job lane 'bulk'"):
        kinds.declare("test.bulk", lane="bulk", run=lambda job, attempt, handed: None)
    with pytest.raises(ValueError, match="unknown job lane 'bulk'"):
        executor.pool("bulk")


def test_without_a_job_mode_eager_celery_means_the_lanes_of_this_process_and_a_broker_means_celery(
    settings: Any,
) -> None:
    settings.CHAT_JOB_MODE = ""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert executor.mode() == "thread" and executor.local()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    assert executor.mode() == "celery" and not executor.local()


def test_every_lane_has_a_celery_queue_a_worker_consumes(settings: Any) -> None:
    assert set(settings.RUNTIME_LANE_QUEUES) == set(kinds.LANES)
    assert executor.queue_of("reply") == "celery" and executor.queue_of("long") == "long"


@pytest.fixture
def fresh_pools(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(executor, "_pools", {})
    yield
    executor.shutdown()


def test_a_long_job_never_holds_a_reply_thread(settings: Any, fresh_pools: None) -> None:
    settings.CHAT_JOB_MODE = "thread"
    started, release = threading.Event(), threading.Event()
    names: list[str] = []
    replied = threading.Semaphore(0)

    def run(job_id: int) -> None:
        names.append(f"{job_id}:{threading.current_thread().name}")
        if job_id == 0:
            started.set()
            release.wait(10)
        else:
            replied.release()

    real = executor._runner[:]
    executor.set_runner(run)
    try:
        executor.dispatch(0, "long")
        assert started.wait(5)
        for i in range(1, 9):  # more replies than the reply lane has threads: none waits for the long job
            executor.dispatch(i, "reply")
        assert all(replied.acquire(timeout=5) for _ in range(8))
    finally:
        release.set()
        executor._runner[:] = real
    assert names[0] == "0:memeval-long_0" and all(":memeval-reply" in n for n in names[1:])


def test_a_process_lane_is_a_daemon_child_process_at_a_lower_cpu_priority(settings: Any, fresh_pools: None) -> None:
    settings.RUNTIME_PROCESS_LANES = ("plan",)
    lane = executor.pool("plan")
    assert isinstance(lane, executor.ProcessLane) and not isinstance(executor.pool("reply"), executor.ProcessLane)
    niceness = lane.submit_and_call(_nice_of_child)
    assert niceness >= min(19, _nice_of_child() + settings.RUNTIME_PROCESS_NICE)
    assert lane._child.daemon  # it ends with the web process instead of holding its exit
    # and it gives way to replies: its local model and power simulations pause while any reply runs
    assert lane.submit_and_call(_background_flags) == ("1", "1")


def _nice_of_child() -> int:
    import os

    return os.nice(0)


def _background_flags() -> tuple[str | None, str | None]:
    import os

    return os.environ.get("MEMEVAL_YIELD_TO_REPLIES"), os.environ.get("OPENBLAS_NUM_THREADS")


@pytest.mark.django_db
def test_a_heartbeat_that_finds_no_row_tells_its_job_it_lost_it() -> None:
    class Gone:
        def update(self, **kwargs: Any) -> int:
            return 0

    beat = leases.Heartbeat(Gone())
    assert beat.beat() is False and beat.lost
