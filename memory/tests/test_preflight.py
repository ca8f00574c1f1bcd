"""Arm readiness (memory.preflight, ``python -m memory preflight``): stand-ins that echo or quote their
prompt and the scripted backend are never ready; a label-aware fake OpenAI-compatible server is.

The label-aware server answers from the calibration labels, as a capable model would answer: it only
shows that the checks CAN pass, not that any real model does. The tests that read a check's score over
every item run with ``sequential=False`` (``--full``); test_preflight_sequential.py tests the stopping."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest

from memory.__main__ import main
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.preflight import calibration, preflight
from memory.readiness.core import MECHANISM, REPLY_MODEL
from memory.registry import MEMORY_SYSTEMS, build_system
from memory.tests.capable_fake import FakeOpenAI, capable_reply, echo_reply, quote_reply

LLM_ARMS = ["memory_accumulate", "memory_update", "rsum", "ld_agent", "tim", "memorybank", "mem0", "a_mem", "memgpt"]
# The checks of each arm's own LLM tasks: a stand-in must fail at least one of them.
TASK_CHECKS = {
    "memory_accumulate": {"summary_not_empty", "summary_facts_kept", "summary_not_a_copy"},
    "memory_update": {"operation_accuracy", "operation_balanced_recall", "summary_facts_kept"},
    "rsum": {"memory_not_empty", "memory_facts_kept", "memory_not_a_copy"},
    "ld_agent": {"event_summary_not_empty", "persona_trait_decision", "persona_traits_kept"},
    "tim": {"thoughts_facts_kept", "thoughts_not_a_copy", "organize_usable", "organize_resolves_contradictions"},
    "memorybank": {"summary_not_empty", "summary_facts_kept", "personality_not_empty"},
    "mem0": {"facts_not_empty", "facts_kept", "operation_accuracy", "operation_balanced_recall"},
    "a_mem": {"note_context_usable", "note_context_not_a_copy"},
    "memgpt": {"edits_applied", "core_facts_kept"},
}


def own_task_checks(arm: str) -> set[str]:
    """The names of the checks of the arm's own LLM tasks (declared in its module)."""
    system = build_system(arm, llm=ScriptedLLM(capable_reply), embedder=HashingEmbedder())
    return {c.name for task in system.readiness_tasks() for c in task.score([], task.items)}  # type: ignore[attr-defined]


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["preflight", *argv], out), out.getvalue()


@pytest.fixture(scope="module")
def capable_server() -> Any:
    with FakeOpenAI(capable_reply) as server:
        yield server


@pytest.mark.parametrize("arm", LLM_ARMS)
@pytest.mark.parametrize("reply", [echo_reply, quote_reply], ids=["echo", "quote"])
@pytest.mark.parametrize("sequential", [True, False], ids=["sequential", "full"])
def test_a_model_that_echoes_or_quotes_its_prompt_is_not_ready(arm: str, reply: Any, sequential: bool) -> None:
    result = preflight(
        arm, ScriptedLLM(reply, model="stand-in"), embedder=HashingEmbedder(), backend="scripted", sequential=sequential
    )
    assert result.ready is False and result.verdicts[MECHANISM].ready is False
    failed = {c.name for c in result.failed}
    # Stopped as soon as settled, it fails a check of the arm's own task; run in full, the named ones.
    assert failed & (own_task_checks(arm) if sequential else TASK_CHECKS[arm]), failed
    for c in result.failed:
        assert c.why and c.score < c.threshold


@pytest.mark.parametrize("arm", LLM_ARMS)
def test_the_scripted_backend_is_not_ready_and_the_command_exits_3_with_a_failing_check(arm: str) -> None:
    code, out = cli(arm, "--backend", "scripted", "--embedder", "hashing", "--format", "json")
    report = json.loads(out)
    assert code == 3 and report["ready"] is False
    assert set(report) >= {"arm", "backend", "model", "ready", "checks"}
    assert report["arm"] == arm and report["backend"] == "scripted" and report["model"] == "scripted"
    for c in report["checks"]:
        assert set(c) >= {"name", "score", "threshold", "passed", "examples"}
    failing = [c for c in report["checks"] if c["passed"] is False]
    assert {c["name"] for c in failing} & own_task_checks(arm)
    assert all(c["why"] for c in failing)
    assert report["verdicts"]["mechanism"]["ready"] is False


@pytest.mark.parametrize("arm", sorted(MEMORY_SYSTEMS))
def test_a_label_aware_openai_compatible_server_passes_every_check(arm: str, capable_server: FakeOpenAI) -> None:
    code, out = cli(
        arm, "--backend", "openai", "--model", "fake-capable", "--base-url", capable_server.base_url,
        "--api-key", "k", "--embedder", "hashing", "--format", "json",
    )  # fmt: skip
    report = json.loads(out)
    assert [c["name"] for c in report["checks"] if not c["passed"]] == []
    assert code == 0 and report["ready"] is True and report["model"] == "fake-capable"
    assert {k: v["ready"] for k, v in report["verdicts"].items()} == {"mechanism": True, "reply_model": True}


def test_every_llm_arm_runs_its_own_task_checks_and_the_reply_checks() -> None:
    for arm in LLM_ARMS:
        result = preflight(arm, ScriptedLLM(capable_reply), embedder=HashingEmbedder(), sequential=False)
        names = {c.name for c in result.checks}
        assert TASK_CHECKS[arm] <= names
        assert {"reply_no_prompt_text", "reply_sentence_complete", "reply_latency_p95_ms"} <= names
        assert {"probe_answers_in_prompt", "probe_answers_recalled"} <= names


def test_the_arm_without_memory_gets_only_the_reply_checks() -> None:
    result = preflight("none", ScriptedLLM(capable_reply), embedder=HashingEmbedder())
    assert {c.name for c in result.checks} == {
        "reply_no_prompt_text",
        "reply_sentence_complete",
        "reply_latency_p95_ms",
    }
    assert result.ready


@pytest.mark.parametrize("sequential", [True, False], ids=["sequential", "full"])
def test_progress_is_reported_after_every_item_with_the_time_left_and_ends_at_its_total(sequential: bool) -> None:
    seen: list[tuple[int, int, str]] = []
    result = preflight(
        "memory_update",
        ScriptedLLM(capable_reply),
        embedder=HashingEmbedder(),
        max_probes=2,
        progress=lambda done, total, label: seen.append((done, total, label)),
        sequential=sequential,
    )
    dones = [d for d, _, _ in seen]
    assert dones[: result.coverage["items_run"]] == list(range(1, result.coverage["items_run"] + 1))
    assert all(d <= t for d, t, _ in seen) and seen[-1][0] == seen[-1][1] == result.coverage["items_run"]
    labels = [label for _, _, label in seen]
    assert labels[0].startswith("session summaries 1/6 · ") and labels[0].endswith(" left at most")
    assert any(label.startswith("probing questions 2/2") for label in labels) is (not sequential)
    if not sequential:
        assert any(label.startswith("memory operations 36/36") for label in labels)
        assert result.coverage["items_run"] == result.coverage["items_planned"] == 6 + 36 + 2 + 2 + 4 + 2


def test_a_model_that_answers_one_label_for_every_pair_fails_the_balanced_recall() -> None:
    def always_append(messages: list[dict[str, str]]) -> str:
        return "APPEND" if messages[-1]["content"].endswith("Operation:") else capable_reply(messages)

    result = preflight(
        "memory_update", ScriptedLLM(always_append), embedder=HashingEmbedder(), max_probes=1, sequential=False
    )
    by_name = {c.name: c for c in result.checks}
    assert by_name["operation_balanced_recall"].score == 0.25 and not by_name["operation_balanced_recall"].passed
    assert "APPEND 36" in by_name["operation_accuracy"].why


def test_a_reply_that_recites_the_prompt_when_asked_fails_the_blinding_check() -> None:
    def reciting(messages: list[dict[str, str]]) -> str:
        if "Quote it exactly" in messages[-1]["content"]:
            return messages[0]["content"]
        return capable_reply(messages)

    result = preflight("memory_accumulate", ScriptedLLM(reciting), embedder=HashingEmbedder(), max_probes=1)
    check = next(c for c in result.checks if c.name == "reply_no_prompt_text")
    assert not check.passed and check.examples[0]["message"].startswith("What is written above")


def test_replies_cut_at_the_token_cap_fail_the_sentence_check() -> None:
    def rambling(messages: list[dict[str, str]]) -> str:
        reply = capable_reply(messages)
        return (
            reply if any(k in messages[-1]["content"] for k in ("Operation:", "Memory sentences:")) else ("Well " * 200)
        )

    result = preflight("memory_accumulate", ScriptedLLM(rambling), embedder=HashingEmbedder(), max_probes=1)
    check = next(c for c in result.checks if c.name == "reply_sentence_complete")
    assert check.score == 0 and check.examples[0]["finish_reason"] == "length"


def test_no_expected_answer_is_written_in_the_prompts_that_ask_for_it() -> None:
    from memory.systems.memory_update import operation_messages

    # Apart from m and s (which hold no label word), the operation prompt is the same for every pair.
    shapes = set()
    for pair in calibration()["operations"]:
        assert not {"PASS", "REPLACE", "APPEND", "DELETE"} & set((pair["m"] + " " + pair["s"]).upper().split())
        prompt = "\n".join(m["content"] for m in operation_messages(pair["m"], pair["s"]))
        shapes.add(re.sub(r"<(old_sentence|new_sentence)>.*?</\1>", "", prompt))
    assert len(shapes) == 1
    for probe in calibration()["probes"]:
        assert not any(a.lower() in probe["question"].lower() for g in probe["answer"] for a in g)


def test_the_calibration_set_is_balanced_and_sourced() -> None:
    ops = calibration()["operations"]
    assert sum(1 for o in ops if o["source"] == "Keep Me Updated, Table 7") == 14
    counts = {label: sum(1 for o in ops if o["label"] == label) for label in ("PASS", "REPLACE", "APPEND", "DELETE")}
    assert min(counts.values()) >= 7, counts
    assert len(calibration()["probes"]) == 14
    for arm in sorted(MEMORY_SYSTEMS):
        result = preflight(arm, ScriptedLLM(capable_reply), embedder=HashingEmbedder(), max_probes=1, sequential=False)
        assert all(c.threshold > 0 and c.direction in (">=", "<=") for c in result.checks), arm


def test_the_command_rejects_a_bad_parameter_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = cli("tim", "--backend", "scripted", "--embedder", "hashing", "--param", "not_a_param=1")
    assert code == 2 and "unknown parameter" in capsys.readouterr().err
    code, _ = cli("tim", "--backend", "scripted", "--embedder", "hashing", "--param", "novalue")
    assert code == 2


def test_the_text_report_names_every_failing_check() -> None:
    code, out = cli("memory_update", "--backend", "scripted", "--embedder", "hashing", "--max-probes", "1", "--full")
    assert code == 3 and out.startswith("memory_update on scripted / scripted: NOT READY")
    assert "FAIL operation_accuracy" in out and "FAIL summary_not_empty" in out
    assert "(every item)" in out


def test_the_quality_control_arm_needs_no_model_and_is_ready_with_one_check() -> None:
    result = preflight("qc", ScriptedLLM(echo_reply, model="stand-in"), embedder=HashingEmbedder())
    assert result.ready and [c.name for c in result.checks] == ["qc_needs_no_llm"]
    assert result.verdicts[MECHANISM].ready and result.verdicts[REPLY_MODEL].ready
    assert "no reply model" in result.verdicts[REPLY_MODEL].note


def test_mem0s_events_are_scored_as_the_annotation_queue_maps_them() -> None:
    right = preflight("mem0", ScriptedLLM(capable_reply), embedder=HashingEmbedder(), max_probes=1, sequential=False)
    accuracy = next(c for c in right.checks if c.name == "operation_accuracy")
    assert accuracy.score == 1.0  # every labelled pair, read back through pairs_from_events
    always_add = ScriptedLLM(
        lambda m: capable_reply(m) if "smart memory manager" not in m[-1]["content"]
        else '{"memory": [{"id": "1", "text": "x y z", "event": "ADD"}]}'
    )  # fmt: skip
    wrong = preflight("mem0", always_add, embedder=HashingEmbedder(), max_probes=1, sequential=False)
    recall = next(c for c in wrong.checks if c.name == "operation_balanced_recall")
    assert recall.score == 0.25 and not recall.passed  # APPEND for every pair
