"""What a readiness verdict means, on the command line and in its JSON: two verdicts (memory mechanism,
reply model), replies at the study's temperature, every setting that changes the verdict recorded, a
latency judged on the model's time with the machine's load beside it, and openers that must name what
the memory holds. Also: an arm's readiness lives in the arm's module (a new arm needs no other edit).
"""

from __future__ import annotations

import inspect
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memory import registry
from memory.__main__ import main
from memory.base import BaseSystem, ChatMessage, Prompt, Turn, Update, chat_turns
from memory.embed import HashingEmbedder
from memory.llm import REPLY_TEMPERATURE, Completion, LLMError, LocalLLM, OpenAILLM, ScriptedLLM
from memory.preflight import llm_free_verdicts, preflight
from memory.readiness import replies
from memory.readiness.core import MECHANISM, REPLY_MODEL, Check, Task, calibration, rate, safe
from memory.readiness.replies import ReplyRecord, reply_checks, uses_memory
from memory.tests.capable_fake import capable_reply

ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["preflight", *argv], out), out.getvalue()


def rambling(messages: list[dict[str, str]]) -> str:
    """Capable at memory tasks; its chat replies run past any token cap (as SmolLM2's often do)."""
    text = messages[-1]["content"]
    if any(k in text for k in ("Operation:", "Memory sentences:", "Operations:")):
        return capable_reply(messages)
    return "Well " * 200


class Recording:
    """A scripted model that records each call's purpose and temperature."""

    def __init__(self, reply: Any = capable_reply) -> None:
        self.inner = ScriptedLLM(reply)
        self.calls: list[tuple[str, float]] = []

    @property
    def model(self) -> str:
        return "recording"

    def complete(self, messages: Any, *, max_tokens: int = 256, temperature: float = 0.0, purpose: str = "",
                 tools: Any = None) -> Completion:  # fmt: skip
        self.calls.append((purpose, temperature))
        return self.inner.complete(messages, max_tokens=max_tokens, temperature=temperature, purpose=purpose)

    def stream(self, messages: Any, **kw: Any) -> Iterator[str]:
        raise AssertionError("the checks ask complete replies")


# ------------------------------------------------------------------------------------ two verdicts


def test_a_rule_based_arm_whose_replies_fail_has_a_ready_mechanism_and_a_reply_model_that_is_not() -> None:
    result = preflight("full_history", ScriptedLLM(rambling), embedder=HashingEmbedder())
    assert result.ready is False
    assert result.verdicts[MECHANISM].ready is True and result.verdicts[MECHANISM].checks == ["probe_answers_in_prompt"]
    assert result.verdicts[REPLY_MODEL].ready is False
    assert "reply_sentence_complete" in result.verdicts[REPLY_MODEL].failed
    assert {c.verdict for c in result.checks if c.name.startswith("reply_")} == {REPLY_MODEL}


def test_the_command_prints_and_records_both_verdicts() -> None:
    code, text = cli("bm25", "--backend", "scripted", "--embedder", "hashing")
    assert code == 3
    lines = text.splitlines()
    assert lines[1] == "  memory mechanism: ready" and lines[2].startswith("  reply model: NOT READY (failed ")
    code, out = cli("bm25", "--backend", "scripted", "--embedder", "hashing", "--format", "json")
    report = json.loads(out)
    assert report["verdicts"]["mechanism"]["ready"] is True and report["verdicts"]["reply_model"]["ready"] is False
    assert report["ready"] is False and {c["verdict"] for c in report["checks"]} == {"mechanism", "reply_model"}


def test_the_mechanism_of_a_rule_based_arm_is_checked_without_any_model_call() -> None:
    class NoModel(ScriptedLLM):
        def complete(self, *args: Any, **kw: Any) -> Completion:
            raise AssertionError("a rule-based memory must be checked without the model")

    assert llm_free_verdicts("qc") == (MECHANISM, REPLY_MODEL)
    for arm in ("none", "full_history", "bm25"):
        assert llm_free_verdicts(arm) == (MECHANISM,)
        result = preflight(arm, NoModel(capable_reply), embedder=HashingEmbedder(), verdicts=[MECHANISM])
        assert result.verdicts[MECHANISM].ready is True and result.ready is False
        assert (
            result.verdicts[REPLY_MODEL].ready is None
            and result.verdicts[REPLY_MODEL].note == "not checked in this run"
        )
    assert (
        preflight("none", NoModel(), embedder=None, verdicts=[MECHANISM])
        .verdicts[MECHANISM]
        .note.startswith("the arm keeps no memory")
    )
    for arm in ("memory_update", "tim", "mem0", "memgpt"):
        assert llm_free_verdicts(arm) == ()


# --------------------------------------------------------------------------- settings in the verdict


def test_replies_are_asked_at_the_temperature_the_study_replies_at() -> None:
    llm = Recording()
    preflight("memory_accumulate", llm, embedder=HashingEmbedder(), max_probes=1)  # type: ignore[arg-type]
    replies_ = {t for purpose, t in llm.calls if purpose == "preflight_reply"}
    assert replies_ == {REPLY_TEMPERATURE} == {0.7}
    # the memory tasks keep the arm's own temperature (0: the summarizer)
    assert {t for purpose, t in llm.calls if purpose == "summarize_session"} == {0.0}
    other = Recording()
    result = preflight("none", other, embedder=None, reply_temperature=0.2)  # type: ignore[arg-type]
    assert {t for _, t in other.calls} == {0.2} and result.settings["reply_temperature"] == 0.2
    # the study streams its replies with each backend's default, which is this temperature
    for backend in (LocalLLM, OpenAILLM, ScriptedLLM):
        assert inspect.signature(backend.stream).parameters["temperature"].default == REPLY_TEMPERATURE


def test_a_check_on_fewer_probes_is_recorded_and_shown_as_partial() -> None:
    code, out = cli("full_history", "--backend", "scripted", "--embedder", "hashing", "--max-probes", "1",
                    "--format", "json")  # fmt: skip
    report = json.loads(out)
    assert report["settings"]["max_probes"] == 1 and report["settings"]["reply_temperature"] == 0.7
    assert report["settings"]["stopping"] == "sequential" and report["settings"]["reply_max_tokens"] == 120
    assert report["coverage"]["partial"] == "1 of 14 probing questions (--max-probes 1)"
    assert report["coverage"]["probes"] == 1 and report["coverage"]["probes_available"] == 14
    _, text = cli("full_history", "--backend", "scripted", "--embedder", "hashing", "--max-probes", "1")
    assert text.splitlines()[1].startswith("  PARTIAL CHECK: 1 of 14 probing questions")
    _, whole = cli("full_history", "--backend", "scripted", "--embedder", "hashing", "--format", "json")
    assert json.loads(whole)["coverage"]["partial"] == "" and json.loads(whole)["settings"]["max_probes"] is None
    code, _ = cli("full_history", "--backend", "scripted", "--embedder", "hashing", "--max-probes", "0")
    assert code == 2


# ------------------------------------------------------------------------------------- load and latency


class Timed(ScriptedLLM):
    """Answers like a capable model; reports ``compute`` ms of model time per call (None: a remote one)."""

    def __init__(self, compute: float | None) -> None:
        super().__init__(capable_reply, model="timed")
        self.compute = compute

    def complete(self, *args: Any, **kw: Any) -> Completion:
        return replace(super().complete(*args, **kw), compute_ms=self.compute)


def busy_clock(monkeypatch: pytest.MonkeyPatch, seconds_per_call: float) -> None:
    """Each reply takes ``seconds_per_call`` of wall clock, as on a machine whose cores are all busy."""
    ticks = iter(range(10**6))
    monkeypatch.setattr(replies, "clock", lambda: next(ticks) / 2 * seconds_per_call)


def test_the_latency_verdict_is_the_models_time_not_the_wall_clock_of_a_busy_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy_clock(monkeypatch, 40.0)  # each reply 40 s on the wall clock; the model computed for 1.5 s
    result = preflight("none", Timed(1500.0), embedder=None)
    latency = next(c for c in result.checks if c.name == "reply_latency_p95_ms")
    assert latency.passed is True and latency.score == 1500.0
    assert "of model compute time" in latency.why and "(wall clock: p95 20000 ms)" in latency.why
    assert latency.examples[0]["basis"] == "compute" and result.conditions["latency_basis"] == "compute"
    assert len(result.conditions["load_average_start"]) == 3 and result.conditions["cpus"] >= 1
    # a remote endpoint has no model time of its own: its wall clock is what workers wait for
    remote = preflight("none", Timed(None), embedder=None)
    slow = next(c for c in remote.checks if c.name == "reply_latency_p95_ms")
    assert slow.passed is False and "of wall clock" in slow.why and slow.examples[0]["basis"] == "wall"


@pytest.mark.llm
def test_the_local_model_reports_its_compute_time() -> None:
    llm = LocalLLM(n_threads=1)
    out = llm.complete([{"role": "user", "content": "Say hello."}], max_tokens=4)
    assert out.compute_ms is not None and 0 < out.compute_ms <= out.latency_ms + 50


# ----------------------------------------------------------------------------------------- openers


def test_an_opener_that_names_a_word_of_everyday_chat_does_not_use_the_memory() -> None:
    memory = ["The user likes hiking in the Alps and would like to talk about their trip."]
    assert not uses_memory("What would you like to talk about?", memory)
    assert not uses_memory("Hello again! How are you feeling today?", ["The user is feeling good today."])
    assert uses_memory("Welcome back! How was the hiking trip in the Alps?", memory)


def test_an_arm_whose_openers_ask_what_to_talk_about_fails_the_opener_check() -> None:
    def generic_opener(messages: list[dict[str, str]]) -> str:
        if "has just come back to chat" in messages[-1]["content"]:
            return "Welcome! What would you like to talk about?"
        return capable_reply(messages)

    result = preflight("full_history", ScriptedLLM(generic_opener), embedder=HashingEmbedder(), sequential=False)
    opener = next(c for c in result.checks if c.name == "opener_uses_memory")
    assert opener.passed is False and opener.score == 0 and opener.examples


# ---------------------------------------------------------------------------- readiness in the arm


class Notebook(BaseSystem):
    """A new arm defined outside memory/: it writes each session's first user message through the LLM."""

    name = "notebook"
    label = "Notebook"
    source = "a test"

    def initial_state(self) -> dict[str, Any]:
        return {"notes": []}

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        return Prompt([ChatMessage("system", "Notes: " + "; ".join(state["notes"])), *chat_turns(session)],
                      memory=list(state["notes"]))  # fmt: skip

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        assert self.llm is not None
        note = self.llm.complete([{"role": "user", "content": "Note: " + session[0].text}], purpose="note").text
        return Update({"notes": [*state["notes"], note]})

    def readiness_tasks(self) -> list[Task]:
        items = [d for d in calibration()["dialogues"] if d["facts"]]

        def run(d: dict[str, Any]) -> dict[str, Any]:
            return {"note": self.end_session(self.initial_state(), [Turn("user", d["turns"][0]["text"])], START).state}

        def score(records: list[dict[str, Any]], items_: list[Any]) -> list[Check]:
            ok = [float(bool(r.get("note", {}).get("notes", [""])[0].strip())) for r in records]
            return [rate("note_written", 0.8, ok, len(items_), f"{int(sum(ok))} of {len(records)} notes written")]

        return [Task("notes", items, safe(run), score)]


START = datetime(2026, 3, 2, 18, 0)


def test_a_new_arm_brings_its_own_readiness_task_with_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.MEMORY_SYSTEMS, "notebook", Notebook)

    def fails_notes(messages: list[dict[str, str]]) -> str:
        if messages[-1]["content"].startswith("Note: "):
            raise LLMError("the model is down")
        return capable_reply(messages)

    result = preflight("notebook", ScriptedLLM(fails_notes), embedder=HashingEmbedder())
    note = next(c for c in result.checks if c.name == "note_written")
    assert note.passed is False and note.verdict == MECHANISM and result.verdicts[MECHANISM].failed == ["note_written"]
    assert llm_free_verdicts("notebook") == ()
    ready = preflight("notebook", ScriptedLLM(capable_reply), embedder=HashingEmbedder(), max_probes=1)
    assert next(c for c in ready.checks if c.name == "note_written").passed is True


def test_the_readiness_code_is_split_by_feature_and_no_module_is_over_800_lines() -> None:
    modules = [ROOT / "memory" / "preflight.py", *sorted((ROOT / "memory" / "readiness").glob("*.py"))]
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in modules}
    assert len(sizes) >= 4 and max(sizes.values()) <= 800, sizes
    source = (ROOT / "memory" / "preflight.py").read_text(encoding="utf-8")
    assert "memory.systems" not in source  # no ladder over the arms: each declares its own tasks


def test_the_reply_model_is_not_judged_on_recall_when_the_memory_delivered_no_answer() -> None:
    def reply(kind: str) -> ReplyRecord:
        return ReplyRecord(kind, "q?", "A full sentence.", "stop", 10.0, [], None, False, wall_ms=10.0)

    probe = {"probe": {"question": "q?", "answer": [["x"]]}, "delivered": False}
    items = [("probe", probe), ("message", "Hi!"), ("opener", 0)]
    records = [{"record": reply("probe"), "delivered": False, "right": False}, {"record": reply("message")},
               {"record": reply("opener")}]  # fmt: skip
    names = [c.name for c in reply_checks(records, items, 120)]
    assert "probe_answers_recalled" not in names and "reply_sentence_complete" in names
    delivered = [("probe", {**probe, "delivered": True}), *items[1:]]
    recalled = next(c for c in reply_checks(records, delivered, 120) if c.name == "probe_answers_recalled")
    assert recalled.passed is False and recalled.planned == 1
