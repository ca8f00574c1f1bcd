"""LLMs that wrap an LLM: :class:`CheckedLLM` (a guard before every call), :class:`RetryingLLM` (retries of a
transient failure with backoff and jitter, for long offline jobs), :class:`RecordingLLM` (every call
recorded, for the researcher) and :class:`ReusingLLM` (a retried job keeps the calls it finished). Each is an :class:`memory.llm.LLM` whose model and tool support are the
wrapped one's; none talks to a back end itself (only memory/llm.py does)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from memory.llm import (
    LLM,
    REPLY_TEMPERATURE,
    Completion,
    LLMCall,
    LLMError,
    LLMTransientError,
    Messages,
    TextStream,
    Tools,
    finish_reason_of,
)


@dataclass
class _Wrapping:
    """An LLM around another one: its model and tool support are the inner one's."""

    inner: LLM

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def supports_tools(self) -> bool:
        return bool(getattr(self.inner, "supports_tools", False))

    @property
    def in_process(self) -> bool:
        """The innermost LLM's (``memory.llm.LocalLLM.in_process``), through any number of wrappers."""
        return bool(getattr(self.inner, "in_process", False))

    def _inner_complete(
        self, messages: Messages, max_tokens: int, temperature: float, purpose: str, tools: Tools | None
    ) -> Completion:
        # Only pass ``tools`` when offered, so a wrapped LLM written before tool calls still works.
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        return self.inner.complete(messages, max_tokens=max_tokens, temperature=temperature, purpose=purpose, **extra)

    def _inner_stream(self, messages: Messages, max_tokens: int, temperature: float, purpose: str) -> Iterator[str]:
        return self.inner.stream(messages, max_tokens=max_tokens, temperature=temperature, purpose=purpose)


@dataclass
class CheckedLLM(_Wrapping):
    """Calls ``check()`` before every call of the wrapped LLM: a background job that must stop (it lost its
    lease) raises there, before the call is made."""

    check: Callable[[], None] = field(default=lambda: None)

    def complete(
        self,
        messages: Messages,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        purpose: str = "",
        tools: Tools | None = None,
    ) -> Completion:
        self.check()
        return self._inner_complete(messages, max_tokens, temperature, purpose, tools)

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = REPLY_TEMPERATURE, purpose: str = ""
    ) -> Iterator[str]:
        self.check()
        return self._inner_stream(messages, max_tokens, temperature, purpose)


@dataclass
class RetryPolicy:
    """How long a long offline job (``memory eval``) keeps retrying one LLM call that fails transiently.

    Waits grow exponentially from ``base`` seconds up to ``cap``, each drawn at random between half and
    all of that ("equal jitter"), so parallel jobs do not retry in step; an endpoint's ``Retry-After``
    is honoured as the least wait. The call gives up (re-raising the last error) once the next wait
    would pass ``budget`` seconds since its first attempt."""

    budget: float = 600.0
    base: float = 2.0
    cap: float = 60.0

    def delay(self, attempt: int, asked: float | None, rng: random.Random) -> float:
        ceiling = min(self.cap, self.base * 2 ** max(0, attempt - 1))
        wait = rng.uniform(ceiling / 2, ceiling)
        return max(wait, asked) if asked is not None else wait


@dataclass
class RetryingLLM(_Wrapping):
    """Retries a call that raised :class:`LLMTransientError` (timeout, 5xx, 429, connection reset, empty
    output) with backoff and jitter until ``policy.budget`` is spent, then re-raises the last error.
    Other errors go through at once. ``on_retry(attempt, wait, error)`` is told before each wait (a CLI
    prints it); ``stats`` counts the retries and the time spent waiting. A stream is retried only
    until its first piece (after that a retry would repeat text the caller has already shown)."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    on_retry: Callable[[int, float, LLMTransientError], None] | None = None
    rng: random.Random = field(default_factory=random.Random)
    stats: dict[str, float] = field(default_factory=lambda: {"retries": 0, "calls_retried": 0, "waited_s": 0.0})

    def _attempts(self, call: Callable[[], Any]) -> Any:
        started = self.clock()
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except LLMTransientError as exc:
                wait = self.policy.delay(attempt, exc.retry_after, self.rng)
                if self.clock() - started + wait > self.policy.budget:
                    raise
                if attempt == 1:
                    self.stats["calls_retried"] += 1
                self.stats["retries"] += 1
                self.stats["waited_s"] = round(self.stats["waited_s"] + wait, 3)
                if self.on_retry is not None:
                    self.on_retry(attempt, wait, exc)
                self.sleep(wait)

    def complete(
        self,
        messages: Messages,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        purpose: str = "",
        tools: Tools | None = None,
    ) -> Completion:
        result: Completion = self._attempts(
            lambda: self._inner_complete(messages, max_tokens, temperature, purpose, tools)
        )
        return result

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = 0.7, purpose: str = ""
    ) -> TextStream:
        holder: list[TextStream] = []

        def first() -> tuple[Iterator[str], str | None]:
            inner = self._inner_stream(messages, max_tokens, temperature, purpose)
            return inner, next(inner, None)

        def chunks() -> Iterator[tuple[str, str | None]]:
            inner, piece = self._attempts(first)
            if piece is not None:
                yield piece, None
                yield from ((p, None) for p in inner)
            holder[0].finish_reason = finish_reason_of(inner)

        stream = TextStream(chunks())
        holder.append(stream)
        return stream


@dataclass
class RecordingLLM(_Wrapping):
    """Wraps an LLM and records every call (also failed ones) as :class:`LLMCall`."""

    calls: list[LLMCall] = field(default_factory=list)

    def complete(
        self,
        messages: Messages,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        purpose: str = "",
        tools: Tools | None = None,
    ) -> Completion:
        start = time.perf_counter()
        try:
            out = self._inner_complete(messages, max_tokens, temperature, purpose, tools)
        except LLMError as exc:
            self._record(purpose, messages, "", start, error=str(exc))
            raise
        self.calls.append(
            LLMCall(
                purpose=purpose,
                model=out.model,
                messages=[dict(m) for m in messages],
                # tool calls are stored as their JSON, so the record shows what the model asked for
                reply=out.text or (json.dumps([c.as_dict() for c in out.tool_calls]) if out.tool_calls else ""),
                latency_ms=round(out.latency_ms or (time.perf_counter() - start) * 1000, 1),
                prompt_tokens=out.prompt_tokens,
                completion_tokens=out.completion_tokens,
                finish_reason=out.finish_reason,
            )
        )
        return out

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = REPLY_TEMPERATURE, purpose: str = ""
    ) -> TextStream:
        start = time.perf_counter()
        pieces: list[str] = []
        holder: list[TextStream] = []

        def chunks() -> Iterator[tuple[str, str | None]]:
            inner: Iterator[str] = iter(())
            try:
                inner = self._inner_stream(messages, max_tokens, temperature, purpose)
                for piece in inner:
                    pieces.append(piece)
                    yield piece, None
            except LLMError as exc:
                self._record(purpose, messages, "".join(pieces), start, error=str(exc))
                raise
            except GeneratorExit:  # the caller closed the stream early: the call still happened
                close = getattr(inner, "close", None)
                if close is not None:
                    close()
                self._record(purpose, messages, "".join(pieces), start, error="stream closed by the caller")
                raise
            reason = finish_reason_of(inner)
            self._record(purpose, messages, "".join(pieces), start, completion_tokens=len(pieces), finish_reason=reason)
            holder[0].finish_reason = reason

        stream = TextStream(chunks())
        holder.append(stream)
        return stream

    def _record(
        self,
        purpose: str,
        messages: Messages,
        reply: str,
        start: float,
        *,
        error: str = "",
        completion_tokens: int | None = None,
        finish_reason: str | None = None,
    ) -> None:
        self.calls.append(
            LLMCall(
                purpose=purpose,
                model=self.inner.model,
                messages=[dict(m) for m in messages],
                reply=reply,
                latency_ms=round((time.perf_counter() - start) * 1000, 1),
                completion_tokens=completion_tokens,
                error=error,
                finish_reason=finish_reason,
            )
        )

    def drain(self) -> list[dict[str, Any]]:
        """The recorded calls as JSON dicts, clearing the record."""
        out = [c.as_dict() for c in self.calls]
        self.calls.clear()
        return out


def call_key(purpose: str, messages: Messages) -> str:
    """What identifies an LLM call for :class:`ReusingLLM`: its purpose and its messages."""
    return json.dumps([purpose, [[m.get("role", ""), m.get("content", "")] for m in messages]], ensure_ascii=False)


@dataclass
class ReusingLLM(_Wrapping):
    """Answers a ``complete`` call that an earlier attempt of the same job already made and finished (same
    purpose and messages) with that answer, without calling the model: a memory update retried because
    its embedding failed keeps the LLM step it finished. ``earlier``: the recorded calls of the earlier
    attempts (:meth:`RecordingLLM.drain`'s dicts); a call with an error, cut at ``max_tokens``, or that
    answered with tool calls is made again. Each recorded answer is used once. ``reused`` counts them."""

    earlier: list[dict[str, Any]] = field(default_factory=list)
    reused: int = 0

    def __post_init__(self) -> None:
        self._answers: dict[str, list[dict[str, Any]]] = {}
        for call in self.earlier:
            if call.get("error") or call.get("finish_reason") not in (None, "stop") or not call.get("reply"):
                continue
            key = call_key(str(call.get("purpose", "")), call.get("messages") or [])
            self._answers.setdefault(key, []).append(call)

    def complete(
        self,
        messages: Messages,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        purpose: str = "",
        tools: Tools | None = None,
    ) -> Completion:
        found = self._answers.get(call_key(purpose, messages)) if not tools else None
        if found:
            call = found.pop(0)
            self.reused += 1
            return Completion(
                text=str(call["reply"]), model=str(call.get("model") or self.model),
                prompt_tokens=call.get("prompt_tokens"), completion_tokens=call.get("completion_tokens"),
                finish_reason=call.get("finish_reason") or "stop",
            )  # fmt: skip
        return self._inner_complete(messages, max_tokens, temperature, purpose, tools)

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = 0.7, purpose: str = ""
    ) -> Iterator[str]:
        return self._inner_stream(messages, max_tokens, temperature, purpose)
