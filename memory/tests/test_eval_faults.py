"""Long offline jobs against an endpoint that fails: ``memory eval`` retries transient errors with backoff
(honouring Retry-After), keeps every finished session and question, and resumes where it stopped.

The endpoint is :class:`memory.tests.fake_openai.FaultyOpenAI` (500s, 429s, answers slower than the
client's timeout, reset connections, outages): a stand-in that says nothing about any real model."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from memory.__main__ import main
from memory.evaluation import EvaluationStopped, Journal, run
from memory.llm import LLMError, LLMTransientError, ScriptedLLM
from memory.llmwrap import RetryingLLM, RetryPolicy
from memory.tests.conftest import locomo_file
from memory.tests.fake_openai import FaultyOpenAI


def answering(messages: list[dict[str, str]]) -> str:
    """A deterministic endpoint: judge prompts get a verdict, MemGPT's edit prompt no action, questions "Rex"."""
    text = messages[-1]["content"]
    if '"label"' in text:
        return 'The answer names it. {"label": "CORRECT"}'
    if "JSON list of function calls" in text:
        return "[]"
    return "Rex"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_transient_errors_are_retried_with_growing_jittered_waits_and_retry_after_is_honoured() -> None:
    clock = FakeClock()
    inner = ScriptedLLM([LLMTransientError("429", retry_after=7.0), LLMTransientError("timeout"),
                         LLMTransientError("reset"), "fine"])  # fmt: skip
    llm = RetryingLLM(inner, policy=RetryPolicy(budget=60, base=2, cap=60), sleep=clock.sleep, clock=clock,
                      rng=random.Random(0))  # fmt: skip
    assert llm.complete([{"role": "user", "content": "hi"}]).text == "fine"
    first, second, third = clock.slept
    assert first >= 7.0  # the endpoint's Retry-After, though the backoff alone would wait 1-2 s
    assert 2.0 <= second <= 4.0 and 4.0 <= third <= 8.0  # base 2 s doubling, drawn in [half, all]
    assert llm.stats == {"retries": 3, "calls_retried": 1, "waited_s": pytest.approx(sum(clock.slept), abs=1e-3)}


def test_a_call_gives_up_when_its_budget_is_spent_and_other_errors_are_not_retried() -> None:
    clock = FakeClock()
    down = RetryingLLM(ScriptedLLM([LLMTransientError("503")]), policy=RetryPolicy(budget=30, base=2, cap=8),
                       sleep=clock.sleep, clock=clock)  # fmt: skip
    with pytest.raises(LLMTransientError):
        down.complete([{"role": "user", "content": "hi"}])
    assert sum(clock.slept) <= 30 and len(clock.slept) >= 4
    refused = ScriptedLLM([LLMError("400 bad request"), "never reached"])
    with pytest.raises(LLMError, match="400"):
        RetryingLLM(refused, sleep=clock.sleep, clock=clock).complete([{"role": "user", "content": "hi"}])
    assert len(refused.calls) == 1


def test_an_eval_rides_out_500s_429s_timeouts_and_resets_that_last_several_attempts() -> None:
    with FaultyOpenAI(answering) as server:
        # the first five requests fail in five ways; the answer of question 1 needs six attempts
        server.faults = ["500", "429:1", "reset", "slow:4", "503"]
        result = run(
            "none", "gvd", backend="openai", model="m", judge_model="j", base_url=server.base_url, api_key="k",
            embedder="hashing", dialogues=["Leo"], timeout=1.5, retry=RetryPolicy(budget=60, base=0.05, cap=0.2),
        )  # fmt: skip
    why = f"requests: {[fault for fault, _ in server.log]}"
    assert result["questions"] == 7 and all(i["judge_parsed"] for i in result["items"])
    assert [fault for fault, _ in server.log[:6]] == ["500", "429:1", "reset", "slow:4", "503", "ok"], why
    retries = result["llm_calls"]["retries"]
    # five retries for the five faults (more only if this machine is so loaded that an answer took > 1.5 s)
    assert retries["retries"] >= 5 and retries["retries"] == len(server.log) - 14, why  # 7 answers + 7 verdicts
    assert retries["waited_s"] >= 1.0  # the 429's Retry-After: 1 s, more than the backoff alone (<= 0.2 s)


def test_an_outage_past_the_retries_keeps_the_finished_questions_and_resume_does_only_the_rest(tmp_path: Path) -> None:
    judged = 0

    def failing_after_three(messages: list[dict[str, str]]) -> str:
        nonlocal judged
        reply = answering(messages)
        if '"label"' in messages[-1]["content"]:
            judged += 1
            if judged == 3:
                server.down = "503"  # the endpoint goes down after the third question is scored
        return reply

    report = tmp_path / "report.json"
    args = ["eval", "none", "--dataset", "gvd", "--backend", "openai", "--model", "m", "--embedder", "hashing",
            "--dialogue", "Leo", "--quiet", "--format", "json", "--out", str(report), "--retry-budget", "1"]  # fmt: skip
    err = io.StringIO()
    with FaultyOpenAI(failing_after_three) as server:
        args += ["--base-url", server.base_url, "--api-key", "k"]
        with contextlib.redirect_stderr(err):
            code = main(args, io.StringIO())
        why = f"stderr: {err.getvalue()!r}; requests: {server.log!r}"
        assert code == 3, why  # no traceback: a clear error and where the work is
        kept = tmp_path / "report.json.partial.jsonl"
        assert f"--results {kept} --resume" in err.getvalue(), why
        assert "The 13 finished steps (of 17)" in err.getvalue(), why  # Leo's 10 sessions, 3 of his 7 questions
        assert "Traceback" not in err.getvalue(), why
        records = [json.loads(line) for line in kept.read_text().splitlines()]
        assert [r["kind"] for r in records].count("question") == 3 and not report.exists(), why
        asked_before = len(server.served("ok"))

        server.down = None  # the endpoint is back
        again = io.StringIO()
        with contextlib.redirect_stderr(again):
            code = main([*args, "--results", str(kept), "--resume"], io.StringIO())
        why = f"stderr: {again.getvalue()!r}; requests: {server.log!r}"
        assert code == 0, why
    result = json.loads(report.read_text())
    assert result["questions"] == 7
    # the resumed run asked and judged only the 4 questions left: 8 calls, none of the 3 done ones again
    assert len(server.served("ok")) - asked_before == 8, why
    assert [r["kind"] for r in Journal.load(kept).records].count("question") == 7


def test_a_run_stopped_between_sessions_resumes_from_the_last_state_and_ends_as_an_unbroken_run(
    tmp_path: Path,
) -> None:
    calls = 0

    def failing_once(messages: list[dict[str, str]]) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:  # after the first session's memory edit: the second session's edit fails
            server.down = "500"
        return answering(messages)

    def evaluate(journal: Journal, url: str) -> dict[str, Any]:
        return run("memgpt", "locomo", locomo_file(tmp_path), backend="openai", model="m", base_url=url,
                   api_key="k", embedder="hashing", journal=journal,
                   retry=RetryPolicy(budget=0.3, base=0.1, cap=0.1))  # fmt: skip

    with FaultyOpenAI(answering) as server:
        unbroken = evaluate(Journal(), server.base_url)
    with FaultyOpenAI(failing_once) as server:
        journal = Journal(tmp_path / "run.jsonl")
        with pytest.raises(EvaluationStopped) as stopped:
            evaluate(journal, server.base_url)
        assert stopped.value.done == 1 and [r["kind"] for r in journal.records] == ["header", "session"]
        server.down = None
        resumed = evaluate(Journal.load(tmp_path / "run.jsonl"), server.base_url)
    for key in ("questions", "overall", "categories", "memory_llm_calls_per_session"):
        assert resumed[key] == unbroken[key]
    assert [i["answer"] for i in resumed["items"]] == [i["answer"] for i in unbroken["items"]]


def test_resume_refuses_a_results_file_of_another_run(tmp_path: Path, capsys: Any) -> None:
    results = tmp_path / "run.jsonl"
    common = ["--dataset", "gvd", "--backend", "scripted", "--embedder", "hashing", "--dialogue", "Leo", "--quiet"]
    assert main(["eval", "none", *common, "--results", str(results)], io.StringIO()) == 0
    assert main(["eval", "none", *common, "--results", str(results)], io.StringIO()) == 2  # would overwrite it
    assert "--resume" in capsys.readouterr().err
    assert main(["eval", "bm25", *common, "--results", str(results), "--resume"], io.StringIO()) == 2
    assert "other settings (arm: 'none' then, 'bm25' now" in capsys.readouterr().err
    out = io.StringIO()  # resuming a finished run replays nothing and reports it again
    assert main(["eval", "none", *common, "--results", str(results), "--resume"], out) == 0
    assert "# none on gvd" in out.getvalue()
