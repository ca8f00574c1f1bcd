"""Session integrity in a real browser (issue 8, item 4) against daphne and a fake OpenAI-compatible
endpoint that streams slowly: "End session" stays disabled while a reply streams and the server
refuses it even if the form is submitted anyway; and a reply whose server is restarted mid-stream
reaches the open page without a reload (the page reconnects, the dead job's lease lapses and the
reply is written again)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.tests.fake_openai import DONE, ScriptedEndpoint, serving, sse_chunk
from tests.live import (
    ROOT,
    consent,
    free_port,
    launch_chromium,
    prepare_site,
    runserver_command,
    site_env,
    wait_for_port,
)

pytestmark = [pytest.mark.browser]

SETUP = """
from studies.models import Arm, Study
s = Study.objects.create(name="Integrity study", slug="integrity", status="open", sessions_per_episode=2,
    episodes_per_worker=1, min_user_turns=1, completion_code="INTEG26")
s.add_default_metrics()
Arm.objects.create(study=s, name="Full history", memory_system="full_history", llm_backend="openai",
    llm_model="test-model")
"""


class _Slow(ScriptedEndpoint):
    """Replies stream one word per ``delay`` seconds; ``plan`` gives the delay of each next request."""

    plan: list[float] = []
    default_step = 0.0
    protocol_version = "HTTP/1.1"

    def answer(self, step: float) -> None:
        words = [
            "Nice",
            "to",
            "meet",
            "you",
            "again.",
            "I",
            "remember",
            "that",
            "you",
            "like",
            "gardening",
            "a",
            "lot.",
        ]
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for i, word in enumerate(words):
                self.wfile.write(sse_chunk(word if i == 0 else " " + word))
                self.wfile.flush()
                time.sleep(step)
            self.wfile.write(DONE)
        except OSError:  # the server that asked is gone (restarted)
            pass


class Site:
    """The web server (daphne through runserver, jobs in its threads), restartable on the same port."""

    def __init__(self, env: dict[str, str], port: int) -> None:
        self.env, self.port, self.proc = env, port, None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(runserver_command(self.port), cwd=ROOT, env=self.env)
        wait_for_port(self.port)

    def stop(self, *, crash: bool = False) -> None:
        """Stop the server; ``crash``: kill it, so its running reply jobs die with it."""
        if self.proc is not None:
            if crash:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with serving(_Slow) as endpoint:
        env = site_env(
            tmp_path / "db.sqlite3",
            LLM_BACKEND="openai",
            OPENAI_BASE_URL=endpoint,
            OPENAI_API_KEY="test-key",
            LLM_TIMEOUT_SECONDS="5",
            LLM_MAX_TOKENS="100",
            CHAT_JOB_LEASE_SECONDS="3",
        )
        prepare_site(env, SETUP)
        server = Site(env, free_port())
        server.start()
        try:
            yield server
        finally:
            server.stop()


def _send(page: Any, text: str) -> None:
    page.wait_for_selector("#conn.ok", timeout=15_000)
    page.fill("#text", text)
    page.keyboard.press("Enter")


def _streaming(page: Any, seq: int) -> None:
    page.wait_for_function(
        f"""() => {{ const m = document.getElementById('msg-{seq}');
                 return m && m.dataset.status === 'pending' && m.querySelector('.text').textContent.length > 0; }}""",
        timeout=20_000,
    )


def test_end_session_waits_for_the_streaming_reply_and_a_restart_mid_reply_needs_no_reload(site: Site) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{site.url}/s/integrity/?PROLIFIC_PID=integrity-worker&STUDY_ID=st&SESSION_ID=se")
        consent(page)
        page.wait_for_url("**/chat/*/")

        # 1. The reply streams slowly: "End session" is disabled, and a forced submit is refused.
        _Slow.plan = [0.3]
        _send(page, "Hi, I am Sam and I love gardening.")
        _streaming(page, 2)
        assert page.locator("#end-session").is_disabled()
        with page.expect_navigation():
            page.evaluate("document.getElementById('end-session').form.submit()")  # as without JS
        assert "/chat/" in page.url and "/rate/" not in page.url
        assert "wait for the chatbot" in page.content()
        page.wait_for_selector('#msg-2[data-status="complete"]', timeout=30_000)
        assert "gardening a lot." in page.locator("#msg-2 .text").inner_text()
        assert page.locator("#end-session").is_enabled()

        # 2. The server dies while the next reply streams and comes back: the reply arrives without a reload.
        page.evaluate("window.__sameDocument = true")
        _Slow.plan = [1.0, 0.0]  # the first job dies with its server; the one enqueued again is quick
        _send(page, "Do you remember my hobby?")
        _streaming(page, 4)
        site.stop(crash=True)
        site.start()
        page.wait_for_selector('#msg-4[data-status="complete"]', timeout=60_000)
        assert page.evaluate("window.__sameDocument") is True  # no reload happened
        assert "gardening a lot." in page.locator("#msg-4 .text").inner_text()
        assert page.locator("#msg-4").count() == 1
        assert errors == []
        browser.close()
