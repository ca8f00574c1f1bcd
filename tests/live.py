"""Live servers for the end-to-end tests and the benchmarks: a free loopback port, a prepared SQLite
site, daphne (directly or through ``manage.py runserver``) started and stopped, and headless Chromium.

The bench scripts import it too (``from tests.live import ...`` with the repository root on sys.path), so
that a server is started the same way where it is measured and where it is tested.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, tries: int = 150) -> None:
    """Wait (0.2 s a try) until something accepts connections on ``port``."""
    for _ in range(tries):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {port}")


def site_env(db: Path | str, **extra: str) -> dict[str, str]:
    """This process's environment for a server on the SQLite file ``db`` (DEBUG, the hashing embedder, no
    Redis: the embedded default), with ``extra`` on top."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "EMBEDDER": "hashing",
        "DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "evalsite.settings",
        **extra,
    }
    env.pop("REDIS_URL", None)
    return env


#: Migrated SQLite databases of this process, by settings module: a site is migrated once per process, and each later
#: site starts as a copy (a migrate is a Django start and every migration: seconds; a copy is milliseconds). What a
#: migrate makes depends on ``INSTALLED_APPS`` and the migrations, which the environment of a test server (backend,
#: model, log level, limits) does not change.
_MIGRATED: dict[str, Path] = {}


def _sqlite_path(env: Mapping[str, str]) -> Path | None:
    url = env.get("DATABASE_URL", "")
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of the SQLite database ``source`` (its WAL included) into ``target``."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _migrate(env: Mapping[str, str]) -> None:
    """``manage.py migrate`` of the database ``env`` names; a new SQLite one as a copy of the first this process
    migrated (the same migrations made the same schema and rows: content types, permissions)."""
    db = _sqlite_path(env)
    key = env.get("DJANGO_SETTINGS_MODULE", "")
    if db is not None and not db.exists() and key in _MIGRATED:
        _copy_sqlite(_MIGRATED[key], db)
        return
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    if db is not None and key not in _MIGRATED:
        template = Path(tempfile.mkdtemp(prefix="memeval-migrated-")) / "db.sqlite3"
        atexit.register(shutil.rmtree, template.parent, ignore_errors=True)
        _copy_sqlite(db, template)
        _MIGRATED[key] = template


def prepare_site(env: Mapping[str, str], setup: str = "") -> None:
    """Migrate the database ``env`` names and run ``setup`` (Python for ``manage.py shell -c``) in it."""
    _migrate(env)
    if setup:
        subprocess.run([sys.executable, "manage.py", "shell", "-c", setup], cwd=ROOT, env=env, check=True)


def shell(env: Mapping[str, str], code: str) -> str:
    """Run ``code`` (Python for ``manage.py shell -c``) in the database ``env`` names; the last line it printed
    (empty when it printed nothing). Its error output is the assertion's message when it fails."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return (done.stdout.strip().splitlines() or [""])[-1]


@dataclass(frozen=True)
class LiveSite:
    """A running site: its address and the environment that names its database."""

    url: str
    env: dict[str, str]

    def shell(self, code: str) -> str:
        """Run ``code`` in the site's database (manage.py shell); the last line it printed."""
        return shell(self.env, code)


def runserver_command(port: int) -> list[str]:
    """daphne's runserver: the ASGI app plus static files (WhiteNoise is only on in production)."""
    return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]


def daphne_command(port: int, app: str = "evalsite.asgi:application") -> list[str]:
    """daphne itself, as deployed, serving ``app``."""
    return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]


@contextmanager
def serving(
    command: list[str], env: Mapping[str, str], port: int, *, quiet: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (a server listening on ``port``) until the block ends; ``quiet`` drops its output."""
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        wait_for_port(port)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def log_in(page: Any, username: str, password: str) -> None:
    """Fill in and send the login form the page shows."""
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form button.button")


def consent(page: Any) -> None:
    """Agree on the consent page the page shows and start."""
    page.check('input[name="agree"]')
    page.click("text=Start")


def rate_every_slider(page: Any, key: str = "End") -> None:
    """Move every slider of the rating page with the keyboard (``key`` once each) and save."""
    sliders = page.locator('input[type="range"]')
    for i in range(sliders.count()):
        sliders.nth(i).focus()
        page.keyboard.press(key)
    page.click("#submit-ratings")


def launch_chromium(playwright: Any) -> Any:
    """Headless Chromium from the system package (``playwright install`` is never run here)."""
    return playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
