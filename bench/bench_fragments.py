"""What a socket fragment costs: the partials of chat/session.html rendered through the template engine at
every call, against chat/fragments.py's stencils (each partial rendered once per shape, then filled in).

    .venv/bin/python bench/bench_fragments.py [--n 20000]

A chat turn sends a handful of message and control fragments and one token fragment per streamed piece of
the reply (coalesced to one per CHAT_TOKEN_FLUSH_SECONDS), so the token is the one that counts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")


def per_call_us(fn: Callable[[], object], n: int) -> float:
    fn()
    best = float("inf")
    for _ in range(5):  # the best of five rounds: the machine is shared
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    import django

    django.setup()
    from django.template.loader import get_template

    from chat import fragments
    from chat.models import Message

    page = fragments.PAGE
    msg = Message(seq=7, speaker="bot", status="complete", text="Nice to meet you <again> & how are you?")
    engine = {
        "message": lambda: get_template(f"{page}#messages-oob").render({"messages_list": [msg]}),
        "token": lambda: get_template(f"{page}#token-oob").render({"seq": 7, "piece": " word"}),
        "controls": lambda: get_template(f"{page}#controls-oob").render(
            {"turns": 2, "min_turns": 3, "pending": True, "oob": True}
        ),
    }
    stencil = {
        "message": lambda: fragments.message(msg),
        "token": lambda: fragments.token(7, " word"),
        "controls": lambda: fragments.controls(2, 3, pending=True),
    }
    for name in engine:
        assert engine[name]() == stencil[name](), name
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, n={args.n}")
    print("fragment   engine us/call   stencil us/call   ratio")
    for name in engine:
        e, s = per_call_us(engine[name], args.n // 10), per_call_us(stencil[name], args.n)
        print(f"{name:<10} {e:>14.1f}   {s:>15.1f}   {e / s:>5.1f}")


if __name__ == "__main__":
    main()
