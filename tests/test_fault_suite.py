"""The fault suite (bench/faults.py) in a small configuration: the production shape on loopback
(its own PostgreSQL and Redis, daphne, two Celery workers, a fake OpenAI-compatible endpoint), two
simulated pages chatting through every fault once. It starts its own services, so it needs none of
scripts/with-services.sh's; it runs in the postgres pass of `make test` because it needs the same
binaries. It runs in a subprocess: bench/faults.py sets up Django against its own database.

    .venv/bin/python -m pytest -m postgres tests/test_fault_suite.py -s
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 1200  # seconds: a safety stop (the run takes about 8-15 min on a busy 2-core machine)
# the run is the module fixture's setup: pytest-timeout's default (600 s) would stop it first
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(BUDGET + 180)]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("faults") / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    # MEMEVAL_FAULTS_PORTS="pg redis web": fixed ports for the suite's services (default: free ones)
    ports = os.environ.get("MEMEVAL_FAULTS_PORTS", "").split()
    proc = subprocess.Popen(
        [sys.executable, "bench/faults.py", "--workers", "2", "--turns", "1", "--json", str(out),
         *(["--ports", *ports] if ports else [])],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        log, _ = proc.communicate(timeout=BUDGET)
    finally:
        if proc.poll() is None:  # over budget or interrupted: SIGTERM lets bench/faults.py stop its services
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print(log)
    assert proc.returncode == 0, log[-5000:]
    return {r["fault"]: r for r in json.loads(out.read_text())}


def test_every_fault_was_injected(results: dict[str, dict[str, Any]]) -> None:
    expected = {"drop", "llm-stall", "llm-reset", "llm-trickle", "llm-hang", "llm-garbage", "postgres", "redis",
                "daphne", "celery-child", "celery-worker", "llm-down", "outage-10", "outage-30", "429-retry-after",
                "slow-two", "hang-two", "over-cap"}  # fmt: skip
    assert {f for f, r in results.items() if r["injected"] >= 1} == expected
    assert all(r["turns"] == 2 for r in results.values())


def test_no_message_is_lost_or_duplicated_under_any_fault(results: dict[str, dict[str, Any]]) -> None:
    assert {f: (r["lost"], r["duplicated"]) for f, r in results.items()} == dict.fromkeys(results, (0, 0))


#: Known failure (issue 27, open): after the Redis restart, the reply worker's Celery consumer can fail to ack a
#: task delivered before the restart (kombu's redis transport: AttributeError 'NoneType' object has no attribute
#: 'hostname' in _connparams) and then consume nothing, so the replies of the next faults (daphne, celery-child)
#: end failed at their deadline with no request made. Reproduced with
#: `bench/faults.py --workers 2 --turns 1 --faults redis daphne celery-child`; each of the three alone recovers.
AFTER_REDIS = ("daphne", "celery-child")


def test_every_recoverable_fault_recovers_without_a_person(results: dict[str, dict[str, Any]]) -> None:
    # how long recovery took is a figure of bench/faults.py (its table's "longest"), not an assertion here
    for fault, r in results.items():
        if fault in AFTER_REDIS:
            continue  # test_the_faults_after_a_redis_restart_recover_without_a_person
        expected = r["turns"] - (1 if fault == "llm-down" else 0)  # one page's reply meets an endpoint down for good
        assert r["recovered"] == expected, (fault, r)


def test_an_llm_down_for_good_ends_in_a_failed_reply_with_a_clear_message_and_the_retry_button(
    results: dict[str, dict[str, Any]],
) -> None:
    assert results["llm-down"]["failed_clearly"] == 1


def test_no_transient_fault_needs_a_retry_click(results: dict[str, dict[str, Any]]) -> None:
    # issue 27: outages of 10 and 30 s, a 429 with Retry-After, slow and hanging streams, faults that last past
    # the first attempt: no reply ends failed (llm-down's own is counted apart, as failed_clearly)
    others = {f: r for f, r in results.items() if f not in AFTER_REDIS}
    assert {f: (r["retry_clicks"], r["stuck"]) for f, r in others.items()} == dict.fromkeys(others, (0, 0))


@pytest.mark.xfail(reason="issue 27, open: a reply worker's consumer after a Redis restart (AFTER_REDIS)", strict=False)
def test_the_faults_after_a_redis_restart_recover_without_a_person(results: dict[str, dict[str, Any]]) -> None:
    for fault in AFTER_REDIS:
        r = results[fault]
        assert (r["recovered"], r["retry_clicks"], r["stuck"]) == (r["turns"], 0, 0), (fault, r)


def test_a_retry_after_holds_every_reply_off_the_endpoint(results: dict[str, dict[str, Any]]) -> None:
    # each reply's first request at most (a reply asked once the endpoint is in cooldown makes none), then its
    # answer after the window: no retry meets the window again (the cooldown is shared and honoured)
    r = results["429-retry-after"]
    assert r["requests"] <= 2 * r["turns"]
