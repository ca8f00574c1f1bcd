"""The abuse suite's attacks on the server itself (bench/abuse.py): logins, uploads, downloads, slow
connections and the chat socket's replays."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import statistics
import threading
import time
import uuid
from collections import Counter
from typing import Any

import httpx
from abuse import Site, new_id, rss_mb
from abuse_common import MB, Browser, connect, make_study, researcher, start_session

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
    timeout = float(site.limits["HTTP_READ_TIMEOUT_SECONDS"])
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
        {
            "connections": 2 * n,
            "closed_max_s": round(max(closed), 1),
            "late": late,
            "never_closed": sum(1 for c in closed if c >= limit),
            "watched_s": limit,
        },
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
