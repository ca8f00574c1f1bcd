"""What an oversized request costs the web process, with and without the body limit (evalsite.bodylimit).

Starts daphne on loopback twice: once with the application as deployed (``evalsite.asgi:application``:
the limit inside daphne, evalsite/serverlimit.py, and in front of Django, evalsite/bodylimit.py) and once
with the bare Django application (``bench/plain_asgi.py``, how it was before the limits). Each time it
sends, one at a time, a large POST to the login page (anonymous, urlencoded), the same CSV upload to the
ratings import page anonymously, and a large CSV upload there as a logged-in researcher (with a valid CSRF
token and the upload grant of the session: studies/limits.py), and prints the status, the time until the
answer and daphne's peak resident memory (VmHWM) after each request.

    .venv/bin/python bench/bench_body_limit.py [--mb 200]
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.live import daphne_command, free_port, prepare_site, serving  # noqa: E402 (needs ROOT on the path)

MB = 2**20
CHUNK = MB


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def researcher_cookies() -> tuple[str, str]:
    """A logged-in researcher's session cookie and a CSRF token, made directly in the database."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    from studies.limits import GRANT_COOKIE, grant_for
    from studies.models import Study

    user = User.objects.create_user("bench", password="x", is_staff=True, is_superuser=True)
    Study.objects.create(name="bench", slug="bench", created_by=user)
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    token = secrets.token_urlsafe(48)[:64].ljust(64, "a")
    token = "".join(c if c.isalnum() else "a" for c in token)
    grant = grant_for(str(store.session_key))  # what the browser gets at login: it may send large files
    return f"sessionid={store.session_key}; csrftoken={token}; {GRANT_COOKIE}={grant}", token


def body(size: int, prefix: bytes = b"", suffix: bytes = b"") -> Iterator[bytes]:
    yield prefix
    row = b"w1,u1,arm,50\n"
    block = row * (CHUNK // len(row))
    sent = 0
    while sent < size:
        yield block
        sent += len(block)
    yield suffix


def send(port: int, path: str, chunks: Iterator[bytes], length: int, headers: dict[str, str]) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    try:
        conn.putrequest("POST", path)
        for k, v in {**headers, "Content-Length": str(length)}.items():
            conn.putheader(k, v)
        conn.endheaders()
        try:
            for chunk in chunks:
                conn.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the end of the body
        status = conn.getresponse().status
    finally:
        conn.close()
    return status, time.perf_counter() - start


def run(app: str, size: int, env: dict[str, str], cookie: str, token: str) -> list[tuple[str, int, float, float]]:
    port = free_port()
    rows = []
    with serving(daphne_command(port, app), env, port, quiet=True) as server:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        status, seconds = send(port, "/accounts/login/", body(size, b"username=a&password="), size + 20, form)
        rows.append(("login page, urlencoded", status, seconds, peak_rss_mb(server.pid)))

        boundary = "benchboundary"
        fields = "".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
            for k, v in {
                "name": "bench",
                "layout": "wide",
                "worker": "w",
                "unit": "u",
                "arm": "arm",
                "metrics": "score",
            }.items()  # fmt: skip
        )
        head = (
            f'{fields}--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n'
            "Content-Type: text/csv\r\n\r\nw,u,arm,score\n"
        ).encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        chunks = list(body(size))[1:-1]
        length = len(head) + sum(len(c) for c in chunks) + len(tail)
        anonymous = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        status, seconds = send(port, "/studies/bench/analysis/import/", iter([head, *chunks, tail]), length, anonymous)
        rows.append(("ratings import, anonymous", status, seconds, peak_rss_mb(server.pid)))
        headers = {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Cookie": cookie,
            "X-CSRFToken": token,
            "Referer": f"http://127.0.0.1:{port}/",
        }
        status, seconds = send(port, "/studies/bench/analysis/import/", iter([head, *chunks, tail]), length, headers)
        rows.append(("ratings import, researcher", status, seconds, peak_rss_mb(server.pid)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of each request body (MB)")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="memeval-bench-")
    env = dict(os.environ)
    env.update({"DATABASE_URL": f"sqlite:///{tmp}/db.sqlite3", "DEBUG": "1", "LOG_LEVEL": "ERROR",
                "DJANGO_SETTINGS_MODULE": "evalsite.settings", "LLM_BACKEND": "scripted", "EMBEDDER": "hashing"})  # fmt: skip
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "LLM_BACKEND", "EMBEDDER")})
    prepare_site(env)
    import django

    django.setup()
    cookie, token = researcher_cookies()
    print(f"daphne (1 process) on loopback; one {args.mb} MB request at a time; peak RSS = daphne's VmHWM after it")
    print(f"{'application':<34} {'request':<27} {'status':>6} {'seconds':>8} {'peak RSS MB':>12}")
    for label, app in [
        ("without the limits (plain Django)", "bench.plain_asgi:application"),
        ("with the limit (application)", "evalsite.asgi:application"),
    ]:
        for request, status, seconds, rss in run(app, args.mb * MB, env, cookie, token):
            print(f"{label:<34} {request:<27} {status:>6} {seconds:>8.1f} {rss:>12.0f}")


if __name__ == "__main__":
    main()
