"""Fixtures the browser tests share (test modules never import each other; tests/live.py has the helpers)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.live import LiveSite, free_port, prepare_site, runserver_command, serving, site_env


@pytest.fixture(scope="module")
def live_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    """A real server for the test module (``manage.py runserver``: daphne, the jobs in its threads) on a fresh SQLite
    database, set up by the module's ``SETUP`` (Python for ``manage.py shell``), with the scripted LLM unless the
    module's ``SITE_SETTINGS`` (settings by environment variable) say otherwise. ``MEMEVAL_BROWSER_PORT`` fixes its
    port (to watch it by hand)."""
    module = request.module
    name = module.__name__.rsplit(".", 1)[-1].removeprefix("test_browser_")
    settings = {"LLM_BACKEND": "scripted", **getattr(module, "SITE_SETTINGS", {})}
    env = site_env(tmp_path_factory.mktemp(name) / "db.sqlite3", **settings)
    prepare_site(env, getattr(module, "SETUP", ""))
    port = int(os.environ.get("MEMEVAL_BROWSER_PORT", "0")) or free_port()
    with serving(runserver_command(port), env, port):
        yield LiveSite(f"http://127.0.0.1:{port}", env)


@pytest.fixture(scope="module")
def server(live_site: LiveSite) -> str:
    """The address of the module's :func:`live_site`."""
    return live_site.url
