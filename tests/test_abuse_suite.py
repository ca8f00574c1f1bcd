"""The abuse suite (bench/abuse.py) on the cases that matter most, in a small configuration: the production
shape on loopback (its own PostgreSQL and Redis, daphne, the Celery workers, a fake OpenAI-compatible
endpoint), attacked over raw HTTP and websockets as issue 21's outside attack did. It starts its own
services, so it runs in the postgres pass of `make test` (it needs the same binaries), in a subprocess
(bench/abuse.py sets up Django against its own database).

The limits are set low so that 20 s floods meet them; every assertion is a count (calls, participants,
turns, answers), none a time. A flood that met no limit fails the test: it would prove nothing.

    .venv/bin/python -m pytest -m postgres tests/test_abuse_suite.py -s
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

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parent.parent
BUDGET = 600  # seconds: a safety stop (the run takes about 3 minutes on a 2-core machine)
CASES = [
    "flood-one-client",  # High: one client inventing Prolific IDs
    "flood-many-addresses",  # High: the same flood from a new address per participant
    "quota-invented-ids",
    "login-throttle",
    "anonymous-uploads",
    "unmeasured-signals",
    "pid-squatting",
    "resume-codes",
    "socket-replays",
    "slow-clients",
]
LIMITS = {
    "LLM_CALLS_PER_MINUTE": 30,
    "NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE": 3,
    "CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE": 20,
    "STUDY_NEW_PER_MINUTE": 6,
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("abuse") / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    limits = [arg for k, v in LIMITS.items() for arg in ("--limit", f"{k}={v}")]
    proc = subprocess.Popen(
        [sys.executable, "bench/abuse.py", "--quick", "--flood-seconds", "20", *limits, "--cases", *CASES,
         "--json", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        log, _ = proc.communicate(timeout=BUDGET)
    finally:
        if proc.poll() is None:  # over budget or interrupted: SIGTERM lets bench/abuse.py stop its services
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print(log)
    assert out.exists(), log[-5000:]
    return {r["case"]: r for r in json.loads(out.read_text())}


def test_every_case_ran(results: dict[str, dict[str, Any]]) -> None:
    assert sorted(results) == sorted(CASES)
    assert not [r["measured"] for r in results.values() if "could not run" in r["measured"]]


@pytest.mark.parametrize("case", ["flood-one-client", "flood-many-addresses"])
def test_a_flood_of_invented_participants_stays_under_the_configured_ceilings(
    results: dict[str, dict[str, Any]], case: str
) -> None:
    """Issue 21 (High): 8 sockets made 1,527 turns a minute under 102 invented IDs; nothing limited by client
    address, per study or site-wide."""
    n = results[case]["numbers"]
    assert n["reached"], n  # a limit bound (an entry or message refused, or the calls at the ceiling)
    assert n["rows_kb"] > 0, n  # the flood did store turns: the ceilings bound it, they did not stop the site
    assert n["llm_calls_most_in_60s"] <= LIMITS["LLM_CALLS_PER_MINUTE"], n
    participants = (
        LIMITS["NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE"]
        if case == "flood-one-client"
        else LIMITS["STUDY_NEW_PER_MINUTE"]
    )
    assert n["participants_most_in_60s"] <= participants, n
    # what reaches the database: one address's message limit, or the call ceiling (plus one message per socket
    # whose reply still waits for its call)
    turns = (
        LIMITS["CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE"]
        if case == "flood-one-client"
        else LIMITS["LLM_CALLS_PER_MINUTE"] + 8
    )
    assert n["user_messages_most_in_60s"] <= turns, n
    assert results[case]["held"], results[case]["measured"]


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.startswith("flood-") and c not in ("anonymous-uploads", "slow-clients")]
)
def test_the_other_attacks_are_held(results: dict[str, dict[str, Any]], case: str) -> None:
    assert results[case]["held"], results[case]["measured"]


def test_anonymous_uploads_are_refused_before_they_cost_memory(results: dict[str, dict[str, Any]]) -> None:
    """Issue 21: an anonymous 50 MB POST to the import page cost the server 575-625 MB. (The case's login-page
    latency is the benchmark's figure, not asserted here.)"""
    n = results["anonymous-uploads"]["numbers"]
    assert set(n["answers"]) == {"413"} and sum(n["answers"].values()) >= 2, n
    assert n["rss_growth_mb"] < 50, n


def test_slow_clients_are_all_closed_by_the_server(results: dict[str, dict[str, Any]]) -> None:
    """Issue 21: 1,000 slow-body or slow-header connections were held for 60 s, none closed. (How soon after the
    timeout they close depends on the machine's load: the benchmark's figure, not asserted here.)"""
    n = results["slow-clients"]["numbers"]
    assert n["connections"] == 200 and n["never_closed"] == 0, n
