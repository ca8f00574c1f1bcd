"""A web process running a power simulation stops when it is told to (issue 21: with the largest simulation
running, daphne ignored SIGTERM: the simulation's pool thread was joined at exit, after 10+ CPU minutes).
The real server on loopback; a researcher starts the largest plan the form allows, then daphne gets SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.live import daphne_command, free_port, prepare_site, site_env

SETUP = """
import json, secrets
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from studies.models import Arm, Study
user = User.objects.create_user("rita", password="pw", is_staff=True, is_superuser=True)
study = Study.objects.create(name="plan", slug="plan", created_by=user)
study.add_default_metrics()
for name, system in (("a", "none"), ("b", "full_history")):
    Arm.objects.create(study=study, name=name, memory_system=system)
store = SessionStore()
store[SESSION_KEY], store[BACKEND_SESSION_KEY] = str(user.pk), "django.contrib.auth.backends.ModelBackend"
store[HASH_SESSION_KEY] = user.get_session_auth_hash()
store.create()
open(OUT, "w").write(json.dumps({"session": store.session_key, "csrf": "a" * 64}))
"""

BIG = {"pilot": "assumed", "worker_sd": 11.5, "scale_sd": 0.2, "episode_sd": 10, "session_sd": 10, "residual_sd": 22,
       "careless_rate": 0.05, "effect": 0.05, "effect_unit": "latent", "target": 0.8, "test": "cluster-t",
       "family": "metric", "studies": 1000, "max_workers": 2000}  # fmt: skip


def children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def test_daphne_stops_at_sigterm_while_the_largest_power_simulation_runs(tmp_path: Path) -> None:
    out = tmp_path / "cookie.json"
    env = site_env(tmp_path / "db.sqlite3", LOG_LEVEL="WARNING", PLAN_CPU_SECONDS="600")
    prepare_site(env, SETUP.replace("OUT", repr(str(out))))
    creds = json.loads(out.read_text())
    cookie = f"sessionid={creds['session']}; csrftoken={creds['csrf']}"
    port = free_port()
    server = subprocess.Popen(daphne_command(port), cwd=Path(__file__).resolve().parent.parent, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        from tests.live import wait_for_port

        wait_for_port(port)
        base = f"http://127.0.0.1:{port}/studies/plan/plan/"

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: object, **kwargs: object) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect())
        body = urllib.parse.urlencode({**BIG, "csrfmiddlewaretoken": creds["csrf"]}).encode()
        request = urllib.request.Request(base, data=body, headers={"Cookie": cookie})
        try:
            opener.open(request, timeout=60)
        except urllib.error.HTTPError as exc:
            assert exc.code == 302, exc.read()[:2000]
            location = exc.headers["Location"]
        job = location.split("job=")[1].split("#")[0]
        poll = urllib.request.Request(f"{base}{job}/", headers={"Cookie": cookie})
        end = time.monotonic() + 90
        while "Simulating studies" not in opener.open(poll, timeout=30).read().decode():
            if time.monotonic() >= end:
                pytest.fail("the simulation never started")
            time.sleep(0.5)
        time.sleep(2)  # well into its CPU-bound search
        running = children(server.pid)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError("daphne kept running 20 s after SIGTERM") from None
        time.sleep(1)
        for pid in running:  # the simulation's process went with it
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
