"""A socket the server refuses (this browser no longer owns the session: its sign-in expired, another worker's
link was opened) in headless Chromium against daphne: the chat page and the side-by-side page see the refusal
as such (close code 4403, not a failed handshake's 1006), stop reconnecting, and tell the worker to reload."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.live import consent, launch_chromium

pytestmark = [pytest.mark.browser]

SETUP = """
from studies import demo
from studies.models import Arm, Study
s = Study.objects.create(name="Refusal study", slug="refusal", status="open", sessions_per_episode=1,
    episodes_per_worker=1, min_user_turns=1, completion_code="REFUSE26")
s.add_default_metrics()
Arm.objects.create(study=s, name="No memory", memory_system="none", llm_backend="scripted")
pair, _ = demo.seed_side_by_side_study()
pair.arms.update(llm_backend="scripted")
"""

# Every socket the page opens, and the code it closed with (null while open).
RECORD_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  function Recorded(url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    const entry = { ws: ws, code: null };
    window.__sockets.push(entry);
    ws.addEventListener("close", (evt) => { entry.code = evt.code; });
    return ws;
  }
  Recorded.prototype = Native.prototype;
  ["CONNECTING", "OPEN", "CLOSING", "CLOSED"].forEach((k) => { Recorded[k] = Native[k]; });
  window.WebSocket = Recorded;
})();
"""


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = launch_chromium(p)
        yield launched
        launched.close()


def _refused(browser: Any, entry: str) -> None:
    context = browser.new_context()
    context.add_init_script(RECORD_SOCKETS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(entry)
    consent(page)
    page.wait_for_url("**/chat/*/")
    page.wait_for_selector("#conn.ok", timeout=15_000)
    context.clear_cookies()  # the browser no longer owns the session
    page.evaluate("window.__sockets[window.__sockets.length - 1].ws.close()")  # the connection drops
    # the page opens the socket again (1-3 s later) and the server refuses it
    page.wait_for_function("window.__sockets.length >= 2 && window.__sockets[1].code !== null", timeout=15_000)
    assert page.evaluate("window.__sockets[1].code") == 4403
    assert "reload" in page.locator("#conn").inner_text().lower()
    # no reconnecting after the refusal: well past the reconnect's 1-3 s (and htmx's own backoff), one attempt
    page.wait_for_timeout(5000)
    assert page.evaluate("window.__sockets.length") == 2
    assert not errors
    context.close()


def test_the_chat_page_stops_at_the_servers_refusal(server: str, browser: Any) -> None:
    _refused(browser, f"{server}/s/refusal/?PROLIFIC_PID=refused-worker&STUDY_ID=st&SESSION_ID=se")


def test_the_side_by_side_page_stops_at_the_servers_refusal(server: str, browser: Any) -> None:
    _refused(browser, f"{server}/s/demo-side-by-side/?PROLIFIC_PID=refused-pair&STUDY_ID=st&SESSION_ID=se")
