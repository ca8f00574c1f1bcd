"""bench/bench_production.py leaves no process behind when a step fails (no services needed: the
processes it would start are stood in for by ``sleep``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench_production() -> Iterator[Any]:
    sys.path.insert(0, str(BENCH))
    try:
        import bench_production

        yield bench_production
    finally:
        sys.path.remove(str(BENCH))


def test_a_second_web_process_that_does_not_come_up_is_still_stopped(
    bench_production: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def fake_daphne(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = real_popen(["sleep", "60"])
        started.append(proc)
        return proc

    def too_slow(*args: Any, **kwargs: Any) -> None:
        raise TimeoutError("timed out after 60 s waiting for the second daphne")

    stack = bench_production.ProductionStack(pg_port=55598, redis_port=56598)  # nothing listens: stood in for
    try:
        monkeypatch.setattr(bench_production.subprocess, "Popen", fake_daphne)
        monkeypatch.setattr(bench_production, "wait_until", too_slow)
        with pytest.raises(TimeoutError):
            stack.add_web()
        monkeypatch.undo()
        stack.stop()  # what main()'s `finally` does
        assert len(started) == 1
        assert started[0].poll() is not None, "the daphne that did not come up outlived the bench"
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stack.cleanup()


def test_the_production_stack_starts_its_app_processes_with_its_own_settings(bench_production: Any) -> None:
    """What ProductionStack sets after faults.Stack's constructor (DEBUG off, the scripted LLM, the echo route,
    the limits off) reaches daphne and the workers: a copy taken in the constructor lost it, and every socket of
    the bench met an HTTP 500 (no echo route)."""
    stack = bench_production.ProductionStack(pg_port=55598, redis_port=56598)  # nothing is started
    try:
        env = stack.app_env
        assert (env["DEBUG"], env["LLM_BACKEND"], env["MEMEVAL_BENCH_ECHO"]) == ("0", "scripted", "1")
        assert env["CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE"] == "0" and "LD_PRELOAD" not in env
    finally:
        stack.cleanup()
