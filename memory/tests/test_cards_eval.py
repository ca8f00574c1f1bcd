"""``python -m memory eval ARM --dataset cards``: every arm through the scripted persona episodes against a fake
OpenAI-compatible server (memory/tests/fake_openai.py), per-probe results written out, results file and
resume, bad input. The endpoint answers the arms' memory tasks like memory/tests/fake_llm.py and replies with
the notes its prompt shows: a stand-in that checks the plumbing and says nothing about any real model."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from memory.__main__ import main
from memory.cardeval import PROBE_COLUMNS
from memory.evaluation import EvaluationStopped, Journal, run
from memory.llmwrap import RetryPolicy
from memory.registry import MEMORY_SYSTEMS
from memory.tests.fake_llm import fake_reply
from memory.tests.fake_openai import FaultyOpenAI


def endpoint(messages: list[dict[str, str]]) -> str:
    """Memory tasks as fake_llm answers them; judge prompts by word overlap; replies read out the prompt's
    data blocks (what the arm remembered), or the fake's small talk when the prompt shows none."""
    text = messages[-1]["content"]
    if "Current fact:" in text and '"label"' in text:
        gold = re.search(r"Current fact: (.*)", text).group(1).lower().split()  # type: ignore[union-attr]
        answer = re.search(r"Generated answer: (.*)", text).group(1).lower()  # type: ignore[union-attr]
        hit = sum(1 for w in gold if len(w) > 3 and w in answer) >= 2
        return f'{{"label": "{"CORRECT" if hit else "WRONG"}"}}'
    out = fake_reply(messages)
    if not out.startswith("Nice!"):
        return out
    shown = []
    for n, m in enumerate(messages):  # the current session is quoted in later messages, the past in the system's
        for tag, body in re.findall(r"<([a-z_]+)>\n?(.*?)\n?</\1>", m["content"], re.S):
            if tag != "persona" and body != "\u2026" and (n == 0 or tag not in ("conversation", "message")):
                shown.append(body)
    return " ".join(shown).replace("\n", " ")[:600] or out


@pytest.fixture(scope="module")
def server() -> FaultyOpenAI:
    with FaultyOpenAI(endpoint) as s:
        yield s


def _eval(server: FaultyOpenAI, arm: str, tmp: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["eval", arm, "--dataset", "cards", "--backend", "openai", "--model", "m", "--base-url", server.base_url,
             "--api-key", "k", "--embedder", "hashing", "--quiet", *extra],
            out=out,
        )  # fmt: skip
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("arm", sorted(MEMORY_SYSTEMS))
def test_memory_eval_runs_every_arm_on_the_cards_and_writes_per_probe_results(
    arm: str, server: FaultyOpenAI, tmp_path: Path
) -> None:
    probes = tmp_path / f"{arm}.jsonl"
    report = tmp_path / f"{arm}.json"
    code, _, err = _eval(server, arm, tmp_path, "--max-cards", "1", "--format", "json", "--out", str(report),
                         "--probes-out", str(probes))  # fmt: skip
    assert code == 0, err
    result = json.loads(report.read_text())
    items = [json.loads(line) for line in probes.read_text().splitlines()]
    assert (
        result["dataset"] == "cards" and result["cards"] == 1 and result["probes"] == len(items) == 28
    )  # 6 + 9 + 9 snapshot, 4 in-session
    assert items == result["items"]
    assert {i["mode"] for i in items} == {"snapshot", "inline"}
    for item in items:
        assert item["answer"] is not None and isinstance(item["correct"], bool)
        assert (item["stage"] is None) == item["correct"], item
    free = [i for i in items if i["free_text"] and i["kind"] != "forgotten"]
    assert free and all(i["scored_by"] == "judge" for i in free)
    assert result["judge"]["model"] == "m" and not result["judge"]["stand_in"]
    assert result["stages"]["snapshot"] == {
        s: sum(1 for i in items if i["mode"] == "snapshot" and i["stage"] == s)
        for s in ("extraction", "update", "retrieval", "generation")
    }
    if arm in ("none", "qc"):
        assert result["overall"]["recall"] in (0.0, None) or arm == "qc"
        assert result["overall"]["deletion_honoured"] == 1.0
    if arm in ("full_history", "bm25", "memory_accumulate"):
        assert result["overall"]["recall"] > 0  # the stand-in reads out what the prompt shows
        assert result["overall"]["deletion_honoured"] == 0.0  # nothing is ever deleted from these stores
        pet = next(i for i in items if i["slot"] == "pet" and i["kind"] == "forgotten" and i["mode"] == "snapshot")
        assert pet["deleted_in_stores"] and pet["stage"] == "update"


def test_the_cards_report_and_a_csv_of_the_probes(server: FaultyOpenAI, tmp_path: Path) -> None:
    rows_file = tmp_path / "probes.csv"
    code, out, _ = _eval(server, "memory_update", tmp_path, "--dialogue", "c03", "--probes-out", str(rows_file))
    assert code == 0
    assert "# memory_update on the persona cards" in out and "| after session |" in out
    assert "never written (extraction)" in out and "Flagged:" in out
    rows = list(csv.DictReader(rows_file.open(encoding="utf-8")))
    assert list(rows[0]) == PROBE_COLUMNS and {r["card"] for r in rows} == {"c03"}
    assert any(r["kind"] == "updated" and r["stale_values"] == "Leeds" for r in rows)


def test_a_cards_run_keeps_each_probe_and_resumes_after_a_stop(server: FaultyOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    kwargs: dict[str, Any] = {
        "backend": "openai", "model": "m", "base_url": server.base_url, "api_key": "k", "embedder": "hashing",
        "dialogues": ["c01", "c02"], "retry": RetryPolicy(budget=0.5, base=0.05, cap=0.1), "timeout": 5,
    }  # fmt: skip
    full = run("memory_accumulate", "cards", **kwargs)
    server.down = "500"
    try:
        with pytest.raises(EvaluationStopped) as stopped:
            run("memory_accumulate", "cards", journal=Journal(path), **kwargs)
    finally:
        server.down = None
    assert stopped.value.done == 0
    # the first card finishes, then the endpoint fails in the second card's first session
    server.faults = []
    journal = Journal(path)
    calls = {"n": 0}

    def count(done: int, total: int, message: str) -> None:
        calls["n"] += 1
        if "c01: session 3" in message:
            server.down = "500"

    try:
        with pytest.raises(EvaluationStopped):
            run("memory_accumulate", "cards", journal=journal, progress=count, **kwargs)
    finally:
        server.down = None
    kept = Journal.load(path)
    assert [r["dialogue"] for r in kept.records if r.get("kind") == "card"] == ["c01"]
    resumed = run("memory_accumulate", "cards", journal=Journal.load(path), **kwargs)
    assert {k: v for k, v in resumed.items() if k not in ("seconds", "llm_calls")} == {
        k: v for k, v in full.items() if k not in ("seconds", "llm_calls")
    }


def test_bad_input_is_refused_with_exit_2(server: FaultyOpenAI, tmp_path: Path) -> None:
    code, _, err = _eval(server, "none", tmp_path, "--dialogue", "nobody")
    assert code == 2 and "no card 'nobody'" in err
    bad = tmp_path / "script.json"
    bad.write_text(json.dumps({"sessions": 2, "events": [{"session": 1, "op": "update", "slot": "city"}]}))
    code, _, err = _eval(server, "none", tmp_path, "--script", str(bad))
    assert code == 2 and "mentioned (or added) in an earlier session" in err
    bank = tmp_path / "bank.json"
    bank.write_text("{not json")
    code, _, err = _eval(server, "none", tmp_path, str(bank))
    assert code == 2 and "not JSON" in err
    code = main(["eval", "none", "--dataset", "gvd", "--script", str(bad), "--backend", "scripted"], out=io.StringIO())
    assert code == 2
