"""The LLM protocol: finish reasons in every backend, the scripted fake's token cap, the recorder, and
the local backend's over-long prompts as clear, non-transient LLM errors."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memory import llm as llm_module
from memory.llm import (
    Completion,
    LLMError,
    LLMTransientError,
    LocalLLM,
    ReplyFirstLock,
    ReplyGate,
    ScriptedLLM,
    finish_reason_of,
    mark_reply_thread,
)
from memory.llmwrap import CheckedLLM, RecordingLLM

MESSAGES = [{"role": "user", "content": "hi"}]


def test_the_scripted_model_cuts_a_reply_longer_than_max_tokens_and_says_so() -> None:
    out = ScriptedLLM(["one two three four five"]).complete(MESSAGES, max_tokens=3)
    assert (out.text, out.finish_reason, out.cut) == ("one two three", "length", True)
    out = ScriptedLLM(["one two"]).complete(MESSAGES, max_tokens=3)
    assert (out.text, out.finish_reason, out.cut) == ("one two", "stop", False)


def test_the_scripted_model_keeps_line_breaks_when_it_cuts() -> None:
    out = ScriptedLLM(["- a b\n- c d\n- e f"]).complete(MESSAGES, max_tokens=4)
    assert out.text == "- a b\n-" and out.cut


def test_a_script_can_return_a_completion_with_any_finish_reason() -> None:
    cut = Completion("I was saying", "scripted", finish_reason="length")
    assert ScriptedLLM([cut]).complete(MESSAGES).finish_reason == "length"
    assert ScriptedLLM(lambda m: cut).complete(MESSAGES).text == "I was saying"


def test_a_scripted_stream_reports_its_finish_reason_at_the_end() -> None:
    stream = ScriptedLLM(["a b c d"]).stream(MESSAGES, max_tokens=2)
    assert list(stream) == ["a", " b"] and finish_reason_of(stream) == "length"
    stream = ScriptedLLM(["a b"]).stream(MESSAGES, max_tokens=9)
    assert "".join(stream) == "a b" and finish_reason_of(stream) == "stop"


def test_the_recorder_keeps_the_finish_reason_of_completions_and_streams() -> None:
    rec = RecordingLLM(ScriptedLLM(["x y z"]))
    rec.complete(MESSAGES, max_tokens=2, purpose="a")
    stream = rec.stream(MESSAGES, max_tokens=9, purpose="b")
    assert "".join(stream) == "x y z" and finish_reason_of(stream) == "stop"
    calls = rec.drain()
    assert [(c["purpose"], c["finish_reason"]) for c in calls] == [("a", "length"), ("b", "stop")]


def test_the_recorder_records_a_failed_stream_and_reraises() -> None:
    rec = RecordingLLM(ScriptedLLM([LLMTransientError("timeout")]))
    with pytest.raises(LLMTransientError):
        list(rec.stream(MESSAGES))
    assert rec.calls[0].error == "timeout"


def test_a_checked_model_asks_before_every_call_and_makes_none_once_the_check_raises() -> None:
    inner = ScriptedLLM(["a b", "c d", "e f"], supports_tools=True)
    stopped: list[bool] = [False]

    def check() -> None:
        if stopped[0]:
            raise RuntimeError("lease lost")

    llm = CheckedLLM(inner, check=check)
    assert llm.complete(MESSAGES).text == "a b" and "".join(llm.stream(MESSAGES)) == "c d"
    assert (llm.model, llm.supports_tools) == ("scripted", True)
    stopped[0] = True
    with pytest.raises(RuntimeError):
        llm.complete(MESSAGES)
    with pytest.raises(RuntimeError):
        llm.stream(MESSAGES)
    assert len(inner.calls) == 2


class _FakeLlama:
    """Stands in for llama_cpp.Llama: one token per word, and llama.cpp's ValueError on overflow."""

    def __init__(self, n_ctx: int) -> None:
        self.n_ctx = n_ctx

    def tokenize(self, data: bytes, add_bos: bool = False) -> list[int]:
        return [0] * len(data.split())

    def create_chat_completion(self, messages: list[dict[str, str]], max_tokens: int, **kw: Any) -> Any:
        n = sum(len(m["content"].split()) for m in messages)
        if n + max_tokens > self.n_ctx:
            raise ValueError(f"Requested tokens ({n + max_tokens}) exceed context window of {self.n_ctx}")
        return {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {}}


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> LocalLLM:
    monkeypatch.setattr(llm_module, "_llama", lambda path, n_ctx, n_threads=2: _FakeLlama(n_ctx))
    return LocalLLM(model_path=str(tmp_path / "model.gguf"), n_ctx=200)


def test_an_over_long_prompt_on_the_local_backend_is_a_clear_non_transient_llm_error(local: LocalLLM) -> None:
    with pytest.raises(LLMError, match="too long for the local model") as caught:
        local.complete([{"role": "system", "content": "word " * 500}, {"role": "user", "content": "hi"}])
    assert not isinstance(caught.value, LLMTransientError)
    with pytest.raises(LLMError, match="too long"):
        list(local.stream([{"role": "system", "content": "word " * 500}]))


def test_the_local_backend_still_drops_the_oldest_turns_to_fit(local: LocalLLM) -> None:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 30} for i in range(9)]
    out = local.complete([{"role": "system", "content": "Be nice."}, *turns], max_tokens=20)
    assert out.text == "ok" and out.finish_reason == "stop"


def test_a_value_error_from_llama_cpp_becomes_an_llm_error(monkeypatch: pytest.MonkeyPatch, local: LocalLLM) -> None:
    monkeypatch.setattr(LocalLLM, "_fit", lambda self, messages, max_tokens: [dict(m) for m in messages])
    with pytest.raises(LLMError, match="refused the prompt"):
        local.complete([{"role": "user", "content": "word " * 500}])


@pytest.mark.llm
def test_the_real_local_model_reports_length_and_refuses_an_over_long_prompt() -> None:
    real = LocalLLM()
    out = real.complete([{"role": "user", "content": "Tell me a long story about a dog."}], max_tokens=5)
    assert out.finish_reason == "length"
    with pytest.raises(LLMError, match="too long") as caught:
        real.complete([{"role": "system", "content": "word " * 9000}], max_tokens=10)
    assert not isinstance(caught.value, LLMTransientError)


def test_a_waiting_reply_takes_the_local_model_before_a_memory_update_that_waited_longer() -> None:
    """Replies and memory updates share one llama.cpp context per process (one call at a time): a
    reply waits for the call in progress, not behind the update's next calls."""
    lock = ReplyFirstLock()
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def current_call() -> None:
        with lock:
            holding.set()
            release.wait(10)
            order.append("call in progress")

    def memory_update_call() -> None:
        with lock:
            order.append("memory update")

    def reply_call() -> None:
        mark_reply_thread()
        with lock:
            order.append("reply")

    first = threading.Thread(target=current_call)
    first.start()
    assert holding.wait(5)
    memory = threading.Thread(target=memory_update_call)
    memory.start()
    time.sleep(0.05)  # the update waits first (not asserted: it only makes the test harder to pass)
    reply = threading.Thread(target=reply_call)
    reply.start()
    deadline = time.monotonic() + 5
    while lock._replies_waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert lock._replies_waiting == 1
    release.set()
    for t in (first, memory, reply):
        t.join(5)
    assert order == ["call in progress", "reply", "memory update"]


def test_the_local_model_lock_still_admits_one_call_at_a_time() -> None:
    lock = ReplyFirstLock()
    inside = 0
    most = 0
    guard = threading.Lock()

    def call(urgent: bool) -> None:
        nonlocal inside, most
        if urgent:
            mark_reply_thread()
        for _ in range(200):
            with lock:
                with guard:
                    inside += 1
                    most = max(most, inside)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=call, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most == 1 and not any(t.is_alive() for t in threads)


def test_a_background_process_waits_while_a_reply_holds_the_gate_and_a_reply_never_waits(tmp_path: Path) -> None:
    """memory.llm.ReplyGate: replies share the lock file; a background caller's wait_clear returns only once
    no reply holds it (a second reply does not wait for the first)."""
    gate = ReplyGate(tmp_path / "replies.lock")
    cleared = threading.Event()
    with gate.reply():
        with gate.reply():  # another reply at the same time: shared, it does not wait
            pass

        def wait() -> None:
            gate.wait_clear(poll=0.01)
            cleared.set()

        waiter = threading.Thread(target=wait)
        waiter.start()
        assert not cleared.wait(0.3)  # held back while the reply runs
    assert cleared.wait(10)
    waiter.join()
    assert gate.waited > 0
    gate.wait_clear()  # nothing holds it: returns at once


@pytest.mark.llm
def test_the_local_model_in_a_background_process_pauses_between_tokens_and_answers_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With MEMEVAL_YIELD_TO_REPLIES=1 (a process lane's child) a call of the local model waits at each token
    while a reply holds the gate, and its answer is the one it gives without waiting."""
    gate = ReplyGate(tmp_path / "replies.lock")
    monkeypatch.setattr(llm_module, "REPLY_GATE", gate)
    llm = LocalLLM()
    plain = llm.complete(MESSAGES, max_tokens=12)
    monkeypatch.setenv("MEMEVAL_YIELD_TO_REPLIES", "1")
    out: list[Completion] = []
    with gate.reply():
        worker = threading.Thread(target=lambda: out.append(llm.complete(MESSAGES, max_tokens=12)))
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and not out  # paused while the reply runs
    worker.join(60)
    assert out and out[0].text == plain.text and gate.waited > 0
