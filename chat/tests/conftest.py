"""Chat test helpers: a worker who entered through a Prolific link and consented, jobs run inline; a turn
and a rating by hand; a socket of the assembled site (the consumer tests)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from chat import arms, assignment, sidebyside, turns
from chat.forms import field_name
from chat.models import ChatSession, Message
from memory.base import ChatMessage, Prompt, Turn, Update
from memory.llm import ScriptedLLM
from runtime import executor
from runtime.models import Job
from studies.models import Arm, Participant, Study


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"  # replies and memory updates run in the caller, deterministically
    settings.CHAT_RETRY_DELAYS = [0, 0, 0]
    settings.CHAT_RETRY_MAX_ATTEMPTS = 4  # the default retries until the deadline: a failing reply ends sooner
    settings.CHAT_RETRY_JITTER = 0  # exact waits (test_reply_outages.py checks the site's jittered ones)
    settings.CHAT_MEMORY_RETRY_DELAYS = [0, 0, 0]
    settings.CHAT_MEMORY_RETRY_MAX_ATTEMPTS = 4
    settings.CHAT_TOKEN_FLUSH_SECONDS = 0  # every streamed piece is its own frame


def enter(client: Client, study: Study, pid: str = "worker1") -> Participant:
    """Open the Prolific link, consent, and return the participant."""
    client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid, "STUDY_ID": "st", "SESSION_ID": "se"})
    client.post(f"/s/{study.slug}/consent/", {"agree": "yes"})
    return Participant.objects.get(study=study, external_id=f"prolific:{pid}")


def start(client: Client, study: Study, pid: str = "worker1") -> ChatSession:
    """Enter, consent and open the first chat session."""
    participant = enter(client, study, pid)
    response = client.get(f"/s/{study.slug}/next/", follow=True)
    assert response.status_code == 200
    session = assignment.current_session(participant)
    assert session is not None
    return session


def ended(client: Client, study: Study, pid: str = "worker1") -> ChatSession:
    """Enter, open the first session, send one message and end the session (it waits for its rating)."""
    session = start(client, study, pid)
    turns.post_user_message(session, "c1", "Hello <b>bot</b>")
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    session.refresh_from_db()
    return session


def ratings(session: ChatSession, value: Any = "60", touched: str = "1", **overrides: Any) -> dict[str, Any]:
    """The rating form's data for every metric (``overrides`` by metric key; None leaves a metric out)."""
    data = {}
    for m in session.episode.participant.study.metrics.all():
        name = field_name(session.pk, m)
        data[name] = overrides.get(m.key, value)
        data[f"touched_{name}"] = touched
    return {k: v for k, v in data.items() if v is not None}


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``script(replies)``: every arm's LLM becomes one ScriptedLLM with these replies/exceptions."""

    def install(items: Any = None) -> ScriptedLLM:
        llm = ScriptedLLM(items)
        monkeypatch.setattr(arms, "build_llm", lambda arm: llm)
        return llm

    return install


@pytest.fixture
def hold(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``hold(*lanes)``: jobs sent to the runtime in these lanes (all when none is named) are held instead
    of run; returns the list of their ids, in the order sent. A test runs one with
    ``runtime.jobs.run(job_id)``, or lets it be lost."""
    real = executor.dispatch

    def install(*lanes: str) -> list[int]:
        sent: list[int] = []

        def dispatch(job_id: int, lane: str, *, countdown: float = 0) -> None:
            if lanes and lane not in lanes:
                real(job_id, lane, countdown=countdown)
            else:
                sent.append(job_id)

        monkeypatch.setattr(executor, "dispatch", dispatch)
        return sent

    return install


@pytest.fixture
def held(hold: Any) -> list[int]:
    """Every job sent to the runtime, held instead of run (see :func:`hold`)."""
    sent: list[int] = hold()
    return sent


def reply_job(message: Message) -> Job:
    """The newest job that writes (or wrote) the reply of placeholder ``message``."""
    found = Job.objects.of("chat.reply", message.pk).order_by("-id").first()
    assert found is not None, f"reply {message.pk} has no job"
    return found


def say(session: ChatSession, text: str, client_id: str | None = None) -> Message:
    """The worker sends ``text`` (its reply is written inline)."""
    msg, _ = turns.post_user_message(session, client_id or f"c-{text}", text)
    return msg


def rate_all(client: Client, session: ChatSession, value: int = 70) -> Any:
    """Post the rating page of ``session`` with every slider at ``value`` (and moved)."""
    data: dict[str, Any] = {}
    for m in session.episode.participant.study.metrics.all():
        data[field_name(session.pk, m)] = str(value)
        data[f"touched_{field_name(session.pk, m)}"] = "1"
    return client.post(f"/chat/{session.pk}/rate/", data)


# ------------------------------------------------------------------ a socket of the assembled site

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")  # as a browser sends it: the origin check compares the two (evalsite.origins)


def socket_worker(study: Study, pid: str = "worker1") -> tuple[bytes, int]:
    """A worker whose chat page is open: their session cookie and their session's id."""
    client = Client()
    session = start(client, study, pid)
    client.get(f"/chat/{session.pk}/")
    return f"sessionid={client.cookies['sessionid'].value}".encode(), session.pk


async def connect(cookie: bytes, session_id: int, origin: tuple[bytes, bytes] = ORIGIN) -> WebsocketCommunicator:
    from evalsite.asgi import application  # noqa: TID251  (the consumer tests drive the assembled site)

    comm = WebsocketCommunicator(application, f"/ws/chat/{session_id}/", headers=[HOST, origin, (b"cookie", cookie)])
    connected, _ = await comm.connect()
    assert connected
    return comm


async def refused(comm: WebsocketCommunicator) -> int | None:
    """Connect ``comm``; the code the server refused it with (a session this browser does not own: accepted, then
    closed at once with 4403, so that a browser sees the code; the origin check: the handshake refused, None's
    stand-in ``-1``), or None when the socket is open."""
    connected, code = await comm.connect()
    if not connected:
        return int(code) if isinstance(code, int) else -1
    if await comm.receive_nothing(timeout=0.3):
        return None
    out = await comm.receive_output()
    assert out["type"] == "websocket.close", out
    return int(out.get("code", 1000))


async def frames(comm: WebsocketCommunicator, timeout: float = 0.5) -> str:
    """Everything the server pushed until it goes quiet."""
    out = [await comm.receive_from(timeout=10)]  # something always answers; then drain until quiet
    while not await comm.receive_nothing(timeout=timeout):
        out.append(await comm.receive_from())
    return "".join(out)


async def send(comm: WebsocketCommunicator, text: str, client_id: str) -> str:
    await comm.send_to(text_data=json.dumps({"type": "message", "client_id": client_id, "text": text}))
    return await frames(comm)


def _messages(session_id: int) -> list[tuple[int, str, str, str]]:
    return list(
        Message.objects.filter(session_id=session_id).order_by("seq").values_list("seq", "speaker", "status", "text")
    )


messages_of = database_sync_to_async(_messages)


class SeeingMemory:
    """An arm that records the state each compose and update is given, and adds one item per turn."""

    is_qc = False

    def __init__(self) -> None:
        self.composed: list[dict[str, Any]] = []
        self.updated: list[dict[str, Any]] = []

    def initial_state(self) -> dict[str, Any]:
        return {"items": []}

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        self.composed.append(state)
        return Prompt([ChatMessage("system", "Be brief."), ChatMessage("user", session[-1].text)])

    def compose_opening(self, state: dict[str, Any], now: datetime) -> Prompt:
        return Prompt([ChatMessage("system", "Greet.")])

    def after_turn(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        self.updated.append(state)
        return Update({"items": [*state["items"], f"turn {len(session)}"]})

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        self.updated.append(state)
        return Update({"items": [*state["items"], "session end"]})


# ------------------------------------------------------------------ live side by side (chat/sidebyside.py)


@pytest.fixture
def pair_study(study: Study) -> Study:
    """The conftest's study, side by side, with two arms that both keep the whole history."""
    study.side_by_side = True
    study.episodes_per_worker = 1
    study.save()
    study.arms.all().delete()
    for name in ("Alpha history", "Beta history"):
        Arm.objects.create(study=study, name=name, memory_system="full_history", llm_backend="scripted")
    return study


SIGN = {"Alpha history": "Zebra", "Beta history": "Quokka", "Gamma": "Lemur"}  # each arm's word


@pytest.fixture
def signed(monkeypatch: pytest.MonkeyPatch) -> dict[str, ScriptedLLM]:
    """Each arm's LLM replies "<its word> here (n)." (:data:`SIGN`): the LLMs by arm name, to read what each was
    sent."""
    llms: dict[str, ScriptedLLM] = {}

    def build(arm: Arm) -> ScriptedLLM:
        if arm.name not in llms:
            count = iter(range(1, 1000))
            llms[arm.name] = ScriptedLLM(lambda messages, word=SIGN[arm.name]: f"{word} here ({next(count)}).")
        return llms[arm.name]

    monkeypatch.setattr(arms, "build_llm", build)
    return llms


def open_pair(client: Client, study: Study, pid: str = "worker1") -> ChatSession:
    """Enter, consent and open the first side-by-side page: side A's session (:func:`start`)."""
    return start(client, study, pid)


def vote_data(winner: str = "a", reason: str = "It remembered my dog.") -> dict[str, str]:
    return {"winner": winner, "reason": reason}


def play_session(client: Client, session: ChatSession, words: list[str], winner: str = "a") -> None:
    client.get(f"/chat/{session.pk}/")
    for i, text in enumerate(words):
        sidebyside.post_to_both(session.pk, f"c{session.pk}-{i}", text)
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    assert client.post(f"/chat/{session.pk}/rate/", vote_data(winner)).status_code == 302
