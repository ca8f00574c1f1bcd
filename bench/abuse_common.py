"""What the abuse suite's cases share (bench/abuse.py runs them): a simulated client with its own address, a
worker's way into a study and onto the chat socket, and the studies the cases attack, made through the ORM
on the suite's own database. The attacks themselves go through the server only."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import Any

import httpx
from abuse import Site, new_id

MB = 2**20
MSG = re.compile(r'id="msg-(\d+)" data-seq="\d+" data-status="(\w+)"(?: data-client-id="([^"]+)")?')
ERROR = re.compile(r'<div id="chat-error"[^>]*>([^<]+)</div>')
SIGNALS = {"pasted": False, "paste_chars": 0, "typed_chars": 24, "typing_ms": 6000, "hidden_ms": 0}


# --------------------------------------------------------------------------------------------- clients


class Browser:
    """One client: its cookies, and its address as the proxy (the suite) reports it. ``claimed`` is what the
    client writes into X-Forwarded-For itself (the proxy appends the real address after it)."""

    def __init__(self, site: Site, address: str | None = None, claimed: str = "") -> None:
        self.site = site
        self.address = address or site.address()
        self.claimed = claimed
        self.http = httpx.Client(base_url=site.base, follow_redirects=False, timeout=120)

    def headers(self) -> dict[str, str]:
        return {"X-Forwarded-For": f"{self.claimed}, {self.address}" if self.claimed else self.address}

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(path, params=params or None, headers=self.headers())

    def post(self, path: str, data: dict[str, Any] | None = None, *, page: str | None = None) -> httpx.Response:
        """POST a form with the CSRF token (the page ``page``, or ``path``, is fetched first when needed)."""
        if "csrftoken" not in self.http.cookies:
            self.get(page or path)
        token = self.http.cookies.get("csrftoken", "")
        return self.http.post(path, data={**(data or {}), "csrfmiddlewaretoken": token}, headers=self.headers())

    def cookie_header(self) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.http.cookies.jar)

    def login(self, username: str, password: str = "pw") -> int:
        return self.post("/accounts/login/", {"username": username, "password": password}).status_code


def start_session(b: Browser, slug: str, pid: str, submission: str = "") -> int | None:
    """A worker's way in: the Prolific link, consent, the first chat page. The session id, or None if refused."""
    r = b.get(f"/s/{slug}/", PROLIFIC_PID=pid, STUDY_ID="st", SESSION_ID=submission or new_id())
    if r.status_code != 302:
        return None
    b.post(f"/s/{slug}/consent/", {"agree": "yes"})
    r = b.get(f"/s/{slug}/next/")
    found = re.search(r"/chat/(\d+)/", r.headers.get("location", ""))
    if not found:
        return None
    b.get(f"/chat/{found.group(1)}/")
    return int(found.group(1))


async def connect(b: Browser, session_id: int) -> Any:
    from websockets.asyncio.client import connect as ws_connect

    return await ws_connect(
        f"{b.site.ws}/ws/chat/{session_id}/", origin=b.site.base,  # type: ignore[arg-type]
        additional_headers={"Cookie": b.cookie_header(), **b.headers()}, open_timeout=20, ping_interval=None,
        max_size=None,
    )  # fmt: skip


async def say(ws: Any, text: str, signals: Any = SIGNALS, timeout: float = 60) -> str:
    """Send one message and wait for its reply to complete; "" when it did, else the refusal's text."""
    cid = uuid.uuid4().hex
    frame: dict[str, Any] = {"type": "message", "client_id": cid, "text": text}
    if signals is not None:
        frame["signals"] = signals
    await ws.send(json.dumps(frame))
    user_seq = 0
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        data = str(await asyncio.wait_for(ws.recv(), timeout=max(0.1, end - time.monotonic())))
        error = ERROR.search(data)
        if error and error.group(1).strip():
            return error.group(1).strip()
        for m in MSG.finditer(data):
            seq, status, client = int(m.group(1)), m.group(2), m.group(3)
            if client == cid:
                user_seq = seq
            elif user_seq and seq == user_seq + 1 and status in ("complete", "failed"):
                return "" if status == "complete" else "the reply failed"
    return "no answer in time"


# ---------------------------------------------------------------------------------------------- setup


def make_study(name: str, **fields: Any) -> Any:
    """An open study on the fake endpoint: one session of one message, every default limit but the flood's."""
    from django.contrib.auth.models import User

    from studies.models import Arm, Study

    rita, _ = User.objects.get_or_create(username="rita", defaults={"is_staff": True, "is_superuser": True})
    if not rita.password:
        rita.set_password("pw")
        rita.save()
    design = {"sessions_per_episode": 1, "episodes_per_worker": 1, "min_user_turns": 1, **fields}
    study = Study.objects.create(name=name, status=Study.Status.OPEN, created_by=rita, **design)
    study.add_default_metrics()
    Arm.objects.create(study=study, name="fake", memory_system="none", llm_backend="openai", llm_model="fake-model")
    return study


def database_mb(site: Site) -> float:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_database_size(current_database())")
        return float(cur.fetchone()[0]) / MB


def study_row_bytes(study: Any) -> int:
    """The bytes of every row the study's participants made (participants, episodes, sessions, messages and
    their signals, LLM call records, memory snapshots; ``pg_column_size`` of each row, indexes not counted).
    The database's own size moves in whole pages and files, too coarse for a minute's flood."""
    from django.db import connection

    from chat.models import ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, MessageSignals
    from studies.models import Participant

    tables = [
        (Participant, {"study": study}),
        (Episode, {"participant__study": study}),
        (ChatSession, {"episode__participant__study": study}),
        (Message, {"session__episode__participant__study": study}),
        (MessageSignals, {"message__session__episode__participant__study": study}),
        (LLMCallRecord, {"session__episode__participant__study": study}),
        (MemorySnapshot, {"session__episode__participant__study": study}),
    ]
    total = 0
    with connection.cursor() as cur:
        for model, where in tables:
            sql, params = model.objects.filter(**where).values("pk").query.sql_with_params()
            table = connection.ops.quote_name(model._meta.db_table)
            cur.execute(f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t WHERE t.id IN ({sql})", params)  # noqa: S608
            total += int(cur.fetchone()[0])
    return total


def researcher(site: Site) -> Browser:
    make_study(f"owner {uuid.uuid4().hex[:6]}")  # makes rita
    b = Browser(site)
    assert b.login("rita") == 302, "the researcher could not log in"
    return b


def warm_up(site: Site) -> None:
    """A few ordinary turns, so that every reply worker process has imported the app before the first case."""
    study = make_study(f"warm-up {uuid.uuid4().hex[:6]}")

    async def one(b: Browser, sid: int) -> None:
        ws = await connect(b, sid)
        for i in range(2):
            await say(ws, f"warming up {i}")
        await ws.close()

    browsers = [Browser(site) for _ in range(4)]
    sessions = [start_session(b, study.slug, new_id()) for b in browsers]

    async def go() -> None:
        await asyncio.gather(*(one(b, sid) for b, sid in zip(browsers, sessions, strict=True) if sid))

    asyncio.run(go())
