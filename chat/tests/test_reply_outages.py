"""Transient faults that need no person (issue 27): an LLM outage longer than a few retries, a 429 with
``Retry-After`` (honoured, and by every caller of the endpoint), a stream too slow to keep its slot, an
endpoint that hangs (each read capped by the reply's time left), an endpoint that ignores ``max_tokens``,
and an embeddings endpoint that fails. Each against a fake OpenAI-compatible endpoint on loopback or a
scripted fake; time is the fake's (a clock advanced by the script), never a timed assertion."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from chat import arms, replies, sessions, turns
from chat.models import ChatSession, LLMCallRecord, MemorySnapshot, Message
from chat.tests.conftest import start
from chat.tests.fake_openai import DONE, ScriptedEndpoint, sse_chunk, study_on_endpoint
from memory import llm as llm_module
from memory.embed import HashingEmbedder, OpenAIEmbedder
from memory.llm import Cooldowns, LLMTransientError, OpenAILLM, TextStream, time_limit
from runtime import executor
from runtime import jobs as runtime_jobs
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


class _Endpoint(ScriptedEndpoint):
    """Each request gets the next step of ``plan``: ``"ok"`` (a short streamed reply), ``"503"``,
    ``"429:<s>"`` (with ``Retry-After``), ``"hang"`` (headers never sent until ``released`` is set or 30 s
    pass; ``hang_over`` is set then), ``"flood"`` (600 words, a word a piece, ignoring ``max_tokens``), ``"blob"`` (one
    piece of 5,000 characters). ``requests`` counts them; ``embeddings`` are answered by ``embed_plan``."""

    plan: list[str] = []
    embed_plan: list[str] = []
    requests = 0
    released = threading.Event()
    hang_over = threading.Event()
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        type(self).requests += 1
        if self.path.endswith("/embeddings"):
            step = self.embed_plan.pop(0) if self.embed_plan else "ok"
            if step != "ok":
                return self.send_json(int(step), {"error": {"message": "injected", "type": "server_error"}})
            vectors = [
                {"object": "embedding", "index": i, "embedding": [1.0, float(i), 0.5]}
                for i in range(len(body["input"]))
            ]
            return self.send_json(200, {"object": "list", "data": vectors, "model": "e", "usage": {"prompt_tokens": 1, "total_tokens": 1}})  # fmt: skip
        self.answer(self.plan.pop(0) if self.plan else "ok")

    def answer(self, step: str) -> None:
        kind, _, arg = step.partition(":")
        if kind in ("503", "429"):
            raw = json.dumps({"error": {"message": "injected", "type": "server_error"}}).encode()
            self.send_response(int(kind))
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            if arg:
                self.send_header("retry-after", arg)
            self.end_headers()
            self.wfile.write(raw)
            return
        if kind == "hang":
            type(self).released.wait(30)
            type(self).hang_over.set()
            return
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            if kind == "flood":
                words = " ".join(f"Sentence number {i} is here." for i in range(120)).split()  # a token a word
                pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
            elif kind == "blob":
                pieces = ["A very long sentence. " * 230]
            else:
                pieces = ["Nice to", " meet", " you", " again."]
            for piece in pieces:
                self.wfile.write(sse_chunk(piece))
            self.wfile.write(DONE)
            self.wfile.flush()
        except OSError:  # the client closed the stream (the cap): nothing more to send
            pass


@pytest.fixture
def endpoint(settings: Any, study: Study) -> Iterator[type[_Endpoint]]:
    _Endpoint.requests = 0
    _Endpoint.embed_plan = []
    _Endpoint.released = threading.Event()
    _Endpoint.hang_over = threading.Event()
    with study_on_endpoint(settings, study, _Endpoint, timeout=20.0) as handler:
        yield handler
    _Endpoint.released.set()


@pytest.fixture(autouse=True)
def cooldowns(monkeypatch: pytest.MonkeyPatch) -> Cooldowns:
    """A fresh process-local store of endpoints' cooldowns for each test."""
    store = Cooldowns()
    monkeypatch.setattr(llm_module, "COOLDOWNS", store)
    return store


def test_an_outage_longer_than_a_few_retries_is_retried_until_it_ends(
    client: Client, study: Study, endpoint: type[_Endpoint], settings: Any
) -> None:
    settings.CHAT_RETRY_MAX_ATTEMPTS = 0  # the site's default: no limit but the deadline
    endpoint.plan = ["503"] * 7 + ["ok"]  # on the old policy (1 + 3 retries) this reply failed
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert (reply.status, reply.text) == (Message.Status.COMPLETE, "Nice to meet you again.")
    assert LLMCallRecord.objects.filter(message=reply).count() == 8


def test_the_site_policy_backs_off_with_jitter_until_the_deadline(settings: Any) -> None:
    settings.CHAT_RETRY_DELAYS, settings.CHAT_RETRY_JITTER, settings.CHAT_RETRY_MAX_ATTEMPTS = [1, 2, 4, 8], 0.5, 0
    policy = replies.reply_policy()
    error = LLMTransientError("HTTP 503")
    waits = [policy.next_wait(n, error, remaining=1000.0) for n in range(1, 12)]
    assert all(w is not None for w in waits)  # no attempt limit: only the deadline ends the retries
    assert all(0.5 <= w <= 1.0 for w in waits[:1]) and all(4.0 <= w <= 8.0 for w in waits[3:])  # type: ignore[operator]
    assert len({round(w, 6) for w in waits[3:]}) > 1  # type: ignore[arg-type]  # jittered, not in step
    assert policy.next_wait(5, error, remaining=3.0) is None  # no retry would start before the deadline


def test_retry_after_is_the_least_wait_and_holds_every_caller_off_the_endpoint(
    client: Client, study: Study, endpoint: type[_Endpoint], monkeypatch: pytest.MonkeyPatch, cooldowns: Cooldowns
) -> None:
    endpoint.plan = ["429:20", "ok"]
    countdowns: list[float] = []
    seen: list[int] = []

    def dispatch(job_id: int, lane: str, *, countdown: float = 0) -> None:
        countdowns.append(countdown)
        if countdown:  # the wait: another caller now finds the endpoint in cooldown, without a request
            before = endpoint.requests
            other = OpenAILLM("test-model", base_url=arms.settings.OPENAI_BASE_URL, api_key="k")
            with pytest.raises(LLMTransientError) as held:
                other.complete([{"role": "user", "content": "hi"}])
            seen.append(endpoint.requests - before)
            assert held.value.retry_after is not None and held.value.retry_after > 15
            cooldowns._until.clear()  # the 20 s have passed
        runtime_jobs.run(job_id)

    monkeypatch.setattr(executor, "dispatch", dispatch)
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    assert countdowns[1] >= 20.0  # honoured, not the 0 s of the test's back-off
    assert seen == [0]  # the other caller made no request while the endpoint asked to wait
    assert session.messages.get(seq=2).status == Message.Status.COMPLETE


class _SlowThenFast:
    """A scripted LLM whose first stream trickles (the fake clock moves 1 s a piece: 1 token/s) and whose
    next ones are quick; ``pieces_read`` counts what the slow one gave before it was closed."""

    model = "slow-fake"
    supports_tools = False

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.streams = 0
        self.pieces_read = 0

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not used")

    def stream(self, messages: Any, **kwargs: Any) -> TextStream:
        self.streams += 1
        slow = self.streams == 1

        def chunks() -> Iterator[tuple[str, str | None]]:
            for i in range(60):
                if slow:
                    self.now[0] += 1.0
                    self.pieces_read += 1
                yield (f"word{i} " if slow else ("Quick answer." if i == 0 else "")), None
                if not slow:
                    return

        return TextStream(chunks())


def test_a_slow_stream_gives_its_slot_back_and_is_retried(
    client: Client, study: Study, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.CHAT_STREAM_GRACE_SECONDS, settings.CHAT_MIN_TOKENS_PER_SECOND = 3.0, 3.0
    now = [1000.0]
    monkeypatch.setattr(replies, "clock", lambda: now[0])
    fake = _SlowThenFast(now)
    monkeypatch.setattr(arms, "build_llm", lambda arm: fake)
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert (reply.status, reply.text) == (Message.Status.COMPLETE, "Quick answer.")
    assert fake.pieces_read <= 5  # cut a few seconds in, not read to its 60th second
    first = LLMCallRecord.objects.filter(message=reply).order_by("pk").first()
    assert first is not None and "too slowly" in first.error


def test_the_in_process_models_slow_stream_is_not_cut(
    client: Client, study: Study, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    # the local model's speed is this machine's: another try would be no faster, so it is not cut
    settings.CHAT_STREAM_GRACE_SECONDS, settings.CHAT_MIN_TOKENS_PER_SECOND, settings.CHAT_ATTEMPT_SECONDS = 3, 3, 600
    now = [1000.0]
    monkeypatch.setattr(replies, "clock", lambda: now[0])
    fake = _SlowThenFast(now)
    fake.in_process = True  # type: ignore[attr-defined]
    monkeypatch.setattr(arms, "build_llm", lambda arm: fake)
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert reply.status == Message.Status.COMPLETE and fake.streams == 1 and fake.pieces_read == 60


def test_an_attempt_is_bounded_even_when_its_stream_is_fast_enough(
    client: Client, study: Study, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.CHAT_ATTEMPT_SECONDS, settings.CHAT_MIN_TOKENS_PER_SECOND = 10.0, 0.0  # no rate check
    now = [1000.0]
    monkeypatch.setattr(replies, "clock", lambda: now[0])
    fake = _SlowThenFast(now)
    monkeypatch.setattr(arms, "build_llm", lambda arm: fake)
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert reply.status == Message.Status.COMPLETE and fake.pieces_read <= 11
    first = LLMCallRecord.objects.filter(message=reply).order_by("pk").first()
    assert first is not None and "longer than 10 s" in first.error


def test_a_hanging_endpoint_is_left_after_the_stall_bound_not_the_client_timeout(
    client: Client, study: Study, endpoint: type[_Endpoint], settings: Any
) -> None:
    # the client's read timeout is 60 s, the endpoint hangs up to 30 s: the reply's own bound (0.5 s a read)
    # must cut the hanging request, so the reply is written while the endpoint still hangs
    settings.CHAT_STALL_SECONDS = 0.5
    settings.LLM_TIMEOUT_SECONDS = 60.0  # the old default, longer than the endpoint's 30 s hang
    endpoint.plan = ["hang", "ok"]
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert (reply.status, reply.text) == (Message.Status.COMPLETE, "Nice to meet you again.")
    assert not endpoint.hang_over.is_set()  # the hanging request was abandoned, not waited out
    first = LLMCallRecord.objects.filter(message=reply).order_by("pk").first()
    assert first is not None and "Timeout" in first.error


def test_each_request_is_capped_by_the_time_left() -> None:
    llm = OpenAILLM("m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=60.0, connect_timeout=5.0)
    with time_limit(lambda: 2.5):
        capped = llm_module.request_timeout(llm.client)
    assert (capped.read, capped.connect) == (2.5, 2.5)
    assert llm_module.request_timeout(llm.client).read == 60.0
    with time_limit(lambda: 0.0), pytest.raises(LLMTransientError):
        llm.complete([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("step", ["flood", "blob"])
def test_a_reply_over_the_token_cap_is_cut_to_the_cap_on_the_page_and_in_the_database(
    client: Client, study: Study, endpoint: type[_Endpoint], settings: Any, step: str
) -> None:
    settings.LLM_MAX_TOKENS = 20  # the endpoint ignores it: 600 sentences, or one 5,000-character piece
    endpoint.plan = [step]
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert reply.status == Message.Status.COMPLETE
    assert 0 < len(reply.text) <= 20 * replies.CHARS_PER_TOKEN  # the cap's characters, whatever the pieces
    assert step == "blob" or len(reply.text.split()) <= 20  # a token a piece: no more pieces than the cap
    assert reply.text.endswith(".")  # cut back to a whole sentence
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert "Sentence number 30 " not in page and ("A very long sentence. " * 12) not in page


def test_embedding_failures_are_transient_llm_errors(endpoint: type[_Endpoint]) -> None:
    from django.conf import settings

    embedder = OpenAIEmbedder("e", base_url=settings.OPENAI_BASE_URL, api_key="k")
    endpoint.embed_plan = ["503", "ok"]
    with pytest.raises(LLMTransientError):
        embedder.embed(["hello"])
    assert embedder.embed(["hello", "there"]).shape == (2, 3)


class _FlakyEmbedder(HashingEmbedder):
    """The hashing embedder, failing its first ``failures`` calls as an embeddings endpoint in an outage."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def embed(self, texts: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise LLMTransientError("HTTP 503 (embeddings)")
        return super().embed(texts)


def test_a_memory_update_whose_embedding_failed_keeps_its_finished_llm_step(
    client: Client, study: Study, script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    study.min_user_turns = 1
    study.save()
    study.arms.update(memory_system="memorybank")
    llm = script(["Nice."])
    monkeypatch.setattr(arms, "get_embedder", lambda: _FlakyEmbedder(0))
    session = start(client, study)
    turns.post_user_message(session, "c1", "I have a dog called Rex and I walk him every morning")
    before = len(llm.calls)
    flaky = _FlakyEmbedder(1)  # the update's first embedding fails, after its LLM calls
    monkeypatch.setattr(arms, "get_embedder", lambda: flaky)
    sessions.end_session(session)
    snapshot = MemorySnapshot.objects.get(session=session)
    assert (snapshot.status, snapshot.attempts) == (MemorySnapshot.Status.DONE, 2)
    made = len(llm.calls) - before
    assert made >= 1 and flaky.failures == 0
    calls = snapshot.trace["llm_calls"]
    assert len(calls) == made  # the second attempt answered them from the first one's record, calling nothing
    nxt = ChatSession.objects.get(episode=session.episode, index=2)
    assert nxt.status == ChatSession.Status.READY


def test_a_memory_update_is_retried_past_the_old_four_attempts(
    client: Client, study: Study, script: Any, settings: Any
) -> None:
    settings.CHAT_MEMORY_RETRY_MAX_ATTEMPTS = 0  # the site's default: until CHAT_MEMORY_RETRY_SECONDS
    study.min_user_turns = 1
    study.save()
    study.arms.update(memory_system="rsum")
    outage = [LLMTransientError("HTTP 503")] * 6
    script(["Nice.", *outage, "User has a dog called Rex."])
    session = start(client, study)
    turns.post_user_message(session, "c1", "I have a dog called Rex")
    sessions.end_session(session)
    snapshot = MemorySnapshot.objects.get(session=session)
    assert (snapshot.status, snapshot.attempts) == (MemorySnapshot.Status.DONE, 7)


def test_time_limit_is_per_thread() -> None:
    seen: list[float | None] = []
    with time_limit(lambda: 1.0):
        thread = threading.Thread(target=lambda: seen.append(llm_module.time_left()))
        thread.start()
        thread.join()
        assert llm_module.time_left() == 1.0
    assert seen == [None] and llm_module.time_left() is None


class _FakeRedis:
    """What RedisCooldowns uses of a Redis client: SET NX PX, PTTL, PEXPIRE (time stands still)."""

    def __init__(self) -> None:
        self.ttl: dict[str, int] = {}

    def set(self, name: str, value: bytes, *, px: int, nx: bool) -> bool:
        if nx and name in self.ttl:
            return False
        self.ttl[name] = px
        return True

    def pttl(self, name: str) -> int:
        return self.ttl.get(name, -2)

    def pexpire(self, name: str, ms: int) -> None:
        self.ttl[name] = ms


def test_the_shared_cooldown_is_kept_in_redis_and_never_shortened() -> None:
    from chat.cooldowns import RedisCooldowns

    store = RedisCooldowns("redis://127.0.0.1:1/0")
    store._redis = _FakeRedis()
    other = RedisCooldowns("redis://127.0.0.1:1/0")  # another process: nothing of its own
    other._redis = store._redis
    store.hold("http://endpoint/v1", 20)
    store.hold("http://endpoint/v1", 5)  # a shorter Retry-After does not shorten it
    assert other.remaining("http://endpoint/v1") == 20.0
    store.hold("http://endpoint/v1", 30)
    assert other.remaining("http://endpoint/v1") == 30.0 and other.remaining("http://elsewhere/v1") == 0.0


def test_an_unreachable_redis_never_fails_a_call_and_the_process_keeps_the_cooldown() -> None:
    from chat.cooldowns import RedisCooldowns

    store = RedisCooldowns("redis://127.0.0.1:1/0")  # nothing listens on port 1: refused at once
    store.hold("http://endpoint/v1", 20)
    assert 0 < store.remaining("http://endpoint/v1") <= 20
