"""The abuse suite's attacks on the way in (bench/abuse.py): floods of invented participants, a quota filled
by consents, a worker's Prolific ID or resume-code attempts taken by someone else."""

from __future__ import annotations

import asyncio
import contextlib
import random
import string
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from abuse import Site, new_id
from abuse_common import Browser, connect, database_mb, make_study, say, start_session, study_row_bytes

# --------------------------------------------------------------------------------------------- floods

LETTERS = string.ascii_letters + string.digits + " .,"


@dataclass
class Flood:
    participants: int = 0
    entries_refused: int = 0
    turns: int = 0
    refusals: Counter[str] = field(default_factory=Counter)  # the server's refusals of a message, by text
    errors: Counter[str] = field(default_factory=Counter)  # sockets that failed


async def _flooder(site: Site, slug: str, address: Any, deadline: float, stats: Flood, chars: int) -> None:
    """One attacker's socket: invent a participant, chat until refused, invent the next. Every message is as
    long as the study allows (``chars``) and random: the most a turn can store."""
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
        except Exception as exc:  # noqa: BLE001
            stats.errors[f"{type(exc).__name__}: {exc}"[:60]] += 1
            continue
        try:
            while time.monotonic() < deadline:
                wait = max(5.0, deadline - time.monotonic() + 5)  # a reply still owed at the deadline: 5 s more
                text = "".join(random.choices(LETTERS, k=chars))  # random: PostgreSQL cannot compress it
                refused = await say(ws, text, timeout=wait)
                if refused:
                    stats.refusals[refused[:60]] += 1
                    break
                stats.turns += 1
        except Exception as exc:  # noqa: BLE001 (a closed socket: invent the next one)
            stats.errors[f"{type(exc).__name__}: {exc}"[:60]] += 1
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

    study = make_study(f"flood {uuid.uuid4().hex[:6]}", max_new_participants_per_minute=site.study_new_per_minute)
    seconds = site.flood_seconds
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
        await asyncio.gather(
            *(_flooder(site, study.slug, address, end, stats, int(study.max_message_chars)) for _ in range(8))
        )

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
    call_limit = int(site.limits["LLM_CALLS_PER_MINUTE"])
    # What reached the database is bounded by the turns a minute the limits let through: on one address its
    # message limit, from many addresses the LLM call ceiling (a message is refused while it is reached; a
    # message whose reply still waits for its call is not counted yet, so each of the 8 sockets can have one
    # more stored).
    if one_address:
        new_limit = int(site.limits["NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE"])
        message_limit = int(site.limits["CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE"])
        turn_limit = message_limit
    else:
        new_limit, message_limit = site.study_new_per_minute, call_limit
        turn_limit = call_limit + 8
    # a flood too short or too slow to meet a limit proves nothing: the server must have refused an entry or a
    # message, or held the calls at the ceiling (replies then wait for a slot, and the sockets for them)
    reached = stats.entries_refused > 0 or sum(stats.refusals.values()) > 0 or calls_60 >= call_limit
    held = reached and calls_60 <= call_limit and made_60 <= new_limit and stored_60 <= turn_limit
    rows_kb = study_row_bytes(study) / 1024  # what the flood stored (its study started empty)
    kb_per_turn = rows_kb / max(1, len(stored))
    mb_per_hour_at_limit = kb_per_turn * min(turn_limit, call_limit + 8) * 60 / 1024
    limits = f"limits: {call_limit} calls, {new_limit} participants, {message_limit} messages"
    numbers = {"seconds": round(elapsed, 1), "llm_calls": calls, "llm_calls_most_in_60s": calls_60,
               "participants": len(made), "participants_most_in_60s": made_60, "user_messages": len(stored),
               "user_messages_most_in_60s": stored_60, "db_mb": round(grown, 2), "rows_kb": round(rows_kb, 1),
               "db_mb_per_hour": round(grown * 3600 / elapsed, 1), "rows_kb_per_turn": round(kb_per_turn, 1),
               "rows_mb_per_hour_at_the_limit": round(mb_per_hour_at_limit, 1), "entries_refused": stats.entries_refused,
               "refusals": dict(stats.refusals.most_common(4)), "socket_errors": dict(stats.errors.most_common(4)),
               "reached": reached,
               "limits": {"llm_calls": call_limit, "participants": new_limit, "messages": message_limit,
                          "turns": turn_limit}}  # fmt: skip
    measured = (
        f"8 sockets, {elapsed:.0f} s, {len(made)} invented participants ({stats.entries_refused} entries refused), "
        f"{len(stored)} turns, {calls} LLM calls; most in any 60 s: {calls_60} calls, {made_60} participants, "
        f"{stored_60} turns ({limits}); stored {rows_kb:.0f} kB of rows, {kb_per_turn:.1f} kB a turn, so at most "
        f"{mb_per_hour_at_limit:.1f} MB/h at these limits (the database file grew {grown:.2f} MB)"
        + ("" if reached else "; NO LIMIT WAS REACHED (the flood proves nothing)")
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
