"""The web process's memory while researchers download a large study export in parallel (issue 21).

Fills a SQLite database with one study whose LLM-call export is about ``--mb`` MB (``--records`` call
records with long prompts), starts daphne on loopback and has ``--parallel`` clients download
``/studies/<slug>/data/llm-calls.jsonl`` at once, reading as fast as they can. It samples daphne's resident
memory (VmRSS) every 0.1 s and prints, per application: the memory before, the highest sample during the
downloads, the bytes each client got and the seconds it took, with the load average.

Two applications: memeval's (downloads produced while they are sent: infra/streaming.py) and the same with
the downloads served as before (``bench/collected_downloads_asgi.py``: Django collects a synchronous
iterator into a list before sending).

    .venv/bin/python bench/bench_downloads.py [--mb 150] [--parallel 4]
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.live import daphne_command, free_port, prepare_site, serving  # noqa: E402 (needs ROOT on the path)

MB = 2**20


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fill(mb: int) -> tuple[str, str]:
    """A researcher's session cookie and the slug of a study whose llm-calls export is about ``mb`` MB."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from chat.models import ChatSession, Episode, LLMCallRecord
    from studies.models import Arm, Participant, Study

    user = User.objects.create_user("bench", password="x", is_staff=True, is_superuser=True)
    study = Study.objects.create(name="downloads", slug="downloads", created_by=user)
    arm = Arm.objects.create(study=study, name="arm", memory_system="none")
    prompt = [{"role": "system", "content": "You are a friendly chatbot. " * 100},
              {"role": "user", "content": "Tell me about your week. " * 150}]  # fmt: skip
    per_record = 8_000  # bytes of JSON per record, about
    records = max(1, mb * MB // per_record)
    sessions = []
    for w in range(max(1, records // 500)):
        p = Participant.objects.create(study=study, external_id=f"w{w}", source="invite", consented_at=timezone.now())
        ep = Episode.objects.create(participant=p, arm=arm, index=1)
        sessions.append(ChatSession.objects.create(episode=ep, index=1, simulated_start=study.simulated_start))
    batch = []
    for i in range(records):
        batch.append(LLMCallRecord(session=sessions[i % len(sessions)], purpose="reply", model="bench",
                                   messages=prompt, reply="A reply of some length. " * 20))  # fmt: skip
        if len(batch) == 2000:
            LLMCallRecord.objects.bulk_create(batch)
            batch = []
    LLMCallRecord.objects.bulk_create(batch)
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return f"sessionid={store.session_key}", study.slug


def download(port: int, path: str, cookie: str, out: dict[str, float]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    start = time.perf_counter()
    conn.request("GET", path, headers={"Cookie": cookie})
    response = conn.getresponse()
    size = 0
    while chunk := response.read(256 * 1024):
        size += len(chunk)
    conn.close()
    out.update(status=response.status, bytes=size, seconds=time.perf_counter() - start)


def run(
    app: str, env: dict[str, str], cookie: str, slug: str, parallel: int
) -> tuple[float, float, list[dict[str, float]]]:
    port = free_port()
    with serving(daphne_command(port, app), env, port, quiet=True) as server:
        path = f"/studies/{slug}/data/llm-calls.jsonl"
        warm = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        warm.request("GET", "/accounts/login/")
        warm.getresponse().read()
        warm.close()
        before = rss_mb(server.pid)
        results: list[dict[str, float]] = [{} for _ in range(parallel)]
        threads = [threading.Thread(target=download, args=(port, path, cookie, r)) for r in results]
        for t in threads:
            t.start()
        peak = before
        while any(t.is_alive() for t in threads):
            peak = max(peak, rss_mb(server.pid))
            time.sleep(0.1)
        return before, peak, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=150, help="size of the export (MB, about)")
    parser.add_argument("--parallel", type=int, default=4, help="clients downloading at once")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="memeval-bench-")
    env = dict(os.environ)
    env.update({"DATABASE_URL": f"sqlite:///{tmp}/db.sqlite3", "DEBUG": "1", "LOG_LEVEL": "ERROR",
                "DJANGO_SETTINGS_MODULE": "evalsite.settings", "LLM_BACKEND": "scripted", "EMBEDDER": "hashing"})  # fmt: skip
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "LLM_BACKEND", "EMBEDDER")})
    prepare_site(env)
    import django

    django.setup()
    t0 = time.perf_counter()
    cookie, slug = fill(args.mb)
    print(f"study filled in {time.perf_counter() - t0:.0f} s; daphne (1 process) on loopback, {args.parallel} parallel "
          f"downloads of the llm-calls export; RSS = daphne's VmRSS, sampled every 0.1 s")  # fmt: skip
    print(f"{'application':<42} {'RSS before':>10} {'RSS peak':>9} {'MB each':>8} {'s (slowest)':>11}  load average")
    for label, app in [
        ("downloads collected first (before)", "bench.collected_downloads_asgi:application"),
        ("downloads produced while sent (now)", "evalsite.asgi:application"),
    ]:
        load = os.getloadavg()
        before, peak, results = run(app, env, cookie, slug, args.parallel)
        sizes = {round(r.get("bytes", 0) / MB, 1) for r in results}
        assert all(r.get("status") == 200 for r in results), results
        slowest = max(r["seconds"] for r in results)
        print(f"{label:<42} {before:>10.0f} {peak:>9.0f} {'/'.join(map(str, sorted(sizes))):>8} {slowest:>11.1f}  "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
