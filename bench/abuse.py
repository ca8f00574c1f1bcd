"""The abuse suite: the attacks of issue 21 run against a real server, with the cases held and failed by severity.

It starts the production shape on loopback as bench/faults.py does (its own PostgreSQL and Redis, daphne, a
Celery worker per queue, a fake OpenAI-compatible endpoint), with ``TRUSTED_PROXIES=127.0.0.1``: the suite
plays the reverse proxy, so each simulated client has its own address, which it writes into
``X-Forwarded-For`` the way nginx's ``proxy_add_x_forwarded_for`` does (after whatever the client wrote
itself). The limits are set low for the run (``LIMITS``); every case then does what an attacker did, with raw
HTTP and websockets, and checks what the server let happen. bench/abuse_cases.py has the cases.

    .venv/bin/python bench/abuse.py                   # every case; the floods run 120 s each
    .venv/bin/python bench/abuse.py --quick           # 30 s floods, smaller uploads, downloads and slow-client crowds
    .venv/bin/python bench/abuse.py --cases flood-one-client slow-clients --keep
    .venv/bin/python bench/abuse.py --quick --flood-seconds 20 --limit LLM_CALLS_PER_MINUTE=30   # tests/test_abuse_suite.py

Prints one row per case (severity, held or FAILED, what was measured) and the count held and failed per
severity; ``--json`` writes the same. Exit status 1 when a case failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

from faults import Stack  # noqa: E402 (bench/ on the path)

# The limits of the run: low, so that an attack reaches them within seconds.
LIMITS = {
    "TRUSTED_PROXIES": "127.0.0.1",
    "LLM_CALLS_PER_MINUTE": "90",
    "NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE": "5",
    "CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE": "60",
    "HTTP_READ_TIMEOUT_SECONDS": "5",
    "HTTP_BODY_MIN_BYTES_PER_SECOND": "1024",
    "PLAN_CPU_SECONDS": "120",
    "PLAN_QUEUE": "3",
    "LOGIN_FAILURE_LIMIT": "10",
    "LOG_LEVEL": "ERROR",
}
STUDY_NEW_PER_MINUTE = 20  # the flood studies' own limit on new participants (--limit STUDY_NEW_PER_MINUTE=N)


@dataclass
class Outcome:
    case: str
    severity: str
    held: bool
    measured: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Case:
    name: str
    severity: str  # High, Medium, Low
    what: str
    run: Callable[[Any], tuple[bool, str, dict[str, Any]]]


class Site:
    """The running stack and what the cases share: its URLs, the researcher's account, a fresh address each time."""

    def __init__(
        self, stack: Stack, quick: bool, limits: dict[str, str], study_new_per_minute: int, flood_seconds: float
    ) -> None:
        self.stack = stack
        self.quick = quick
        self.limits = limits  # the server's limits of this run (its environment)
        self.study_new_per_minute = study_new_per_minute
        self.flood_seconds = flood_seconds
        self.base = f"http://127.0.0.1:{stack.web_port}"
        self.ws = f"ws://127.0.0.1:{stack.web_port}"
        self._next = 1

    def address(self) -> str:
        """A client address nobody has used yet in this run (TEST-NET and benchmark ranges)."""
        self._next += 1
        n = self._next
        return f"198.18.{n // 250}.{n % 250 + 1}"

    def daphne_pid(self) -> int:
        assert self.stack.daphne is not None
        return int(self.stack.daphne.pid)

    def llm_requests(self) -> int:
        return int(self.stack.llm.requests)

    def forget_limits(self) -> None:
        """Drop every limit's counters from Redis (between cases, so one case's flood does not bind the next)."""
        import redis

        client = redis.Redis.from_url(self.stack.env["REDIS_URL"])
        for key in client.scan_iter(match="*rl:*"):
            client.delete(key)
        for key in client.scan_iter(match="*login-device-failures*"):
            client.delete(key)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(
    names: list[str] | None,
    quick: bool,
    keep: bool,
    ports: list[int] | None,
    overrides: dict[str, str] | None = None,
    flood_seconds: float | None = None,
) -> list[Outcome]:
    from abuse_cases import CASES

    chosen = [c for c in CASES if not names or c.name in names]
    overrides = dict(overrides or {})
    study_new = int(overrides.pop("STUDY_NEW_PER_MINUTE", STUDY_NEW_PER_MINUTE))
    limits = {**LIMITS, **overrides}
    stack = Stack(*(ports or []))
    stack.env.update(limits)
    stack.llm.word_delay = 0.01  # replies come fast: the limits, not the model, must stop a flood
    outcomes = []
    try:
        stack.start()
        os.environ.update({k: stack.env[k] for k in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})
        os.environ.update(limits)
        import django

        django.setup()
        from django.db import connections

        connections.close_all()
        seconds = flood_seconds or (30.0 if quick else 120.0)
        site = Site(stack, quick, limits, study_new, seconds)
        from abuse_cases import warm_up

        warm_up(site)  # the reply workers' first tasks import everything: not part of any case
        for case in chosen:
            site.forget_limits()
            t0 = time.monotonic()
            try:
                held, measured, numbers = case.run(site)
            except Exception as exc:  # noqa: BLE001 (a case that cannot run is a failed case, with why)
                held, measured, numbers = False, f"the case could not run: {type(exc).__name__}: {exc}", {}
            connections.close_all()
            numbers["seconds"] = round(time.monotonic() - t0, 1)
            outcomes.append(Outcome(case.name, case.severity, held, measured, numbers))
            print(f"  {'held  ' if held else 'FAILED'} {case.severity:<6} {case.name}: {measured}", file=sys.stderr)
    finally:
        from django.db import connections

        connections.close_all()
        stack.stop()
        if not keep:
            stack.cleanup()
        else:
            print(f"logs kept in {stack.tmp}", file=sys.stderr)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    lines = [f"{'severity':<8} {'case':<28} {'result':<7} measured"]
    order = {"High": 0, "Medium": 1, "Low": 2}
    for o in sorted(outcomes, key=lambda o: order.get(o.severity, 3)):
        lines.append(f"{o.severity:<8} {o.case:<28} {'held' if o.held else 'FAILED':<7} {o.measured}")
    lines.append("")
    for severity in order:
        of = [o for o in outcomes if o.severity == severity]
        if of:
            held = sum(o.held for o in of)
            lines.append(f"{severity:<8} {held} held, {len(of) - held} failed")
    return "\n".join(lines)


def main() -> None:
    from abuse_cases import CASES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=[c.name for c in CASES], help="default: all")
    parser.add_argument("--quick", action="store_true", help="shorter floods and fewer slow connections")
    parser.add_argument("--keep", action="store_true", help="keep the services' logs")
    parser.add_argument("--ports", type=int, nargs=3, metavar=("PG", "REDIS", "WEB"), help="default: free ports")
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    parser.add_argument("--flood-seconds", type=float, help="how long each flood runs (default 120, --quick 30)")
    parser.add_argument(
        "--limit", action="append", default=[], metavar="NAME=VALUE",
        help="a limit of the run other than LIMITS' (an environment variable, or STUDY_NEW_PER_MINUTE)",
    )  # fmt: skip
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.limit)
    unknown = set(overrides) - set(LIMITS) - {"STUDY_NEW_PER_MINUTE"}
    if unknown:
        parser.error(
            f"--limit: unknown {', '.join(sorted(unknown))} (one of {', '.join([*LIMITS, 'STUDY_NEW_PER_MINUTE'])})"
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that `finally` stops the services
    t0 = time.monotonic()
    load = os.getloadavg()
    outcomes = run(args.cases, args.quick, args.keep, args.ports, overrides, args.flood_seconds)
    if args.json:
        args.json.write_text(json.dumps([_plain(asdict(o)) for o in outcomes], indent=1, default=str))
    print(table(outcomes))
    end = os.getloadavg()
    print(f"\nwall {time.monotonic() - t0:.0f} s; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, "
          f"{end[0]:.2f} {end[1]:.2f} {end[2]:.2f} at the end; limits of the run: "
          + ", ".join(f"{k}={v}" for k, v in {**LIMITS, **overrides}.items() if k != "LOG_LEVEL"))  # fmt: skip
    sys.exit(0 if all(o.held for o in outcomes) else 1)


def _plain(value: Any) -> Any:
    """JSON-safe: every mapping key a string."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def new_id() -> str:
    """A Prolific-looking ID (24 hex digits), invented."""
    return uuid.uuid4().hex[:24]


SESSION_LINK = re.compile(r"/chat/(\d+)/")

if __name__ == "__main__":
    main()
