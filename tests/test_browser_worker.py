"""A crowdworker's 2-session episode in headless Chromium against a real daphne server and the real
local model (served by daphne through `manage.py runserver`): consent, a streamed reply, ratings, "one week later", the second session, the code.

Screenshots (desktop and phone width) go to artifacts/ (gitignored) for a human to look at.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.live import ROOT, consent, launch_chromium

pytestmark = [pytest.mark.browser, pytest.mark.llm]

ARTIFACTS = ROOT / "artifacts"
SETUP = """
from studies.models import Arm, Study
s = Study.objects.create(name="Browser study", slug="browser", status="open", sessions_per_episode=2,
    episodes_per_worker=1, min_user_turns=1, completion_code="BRWS2026", gap_days=7, gap_max_days=None)
s.add_default_metrics()
Arm.objects.create(study=s, name="Full history", memory_system="full_history", llm_backend="local")
"""
SITE_SETTINGS = {"LLM_BACKEND": "local", "LLM_MAX_TOKENS": "40"}  # the real local model (tests/conftest.py: live_site)


def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"worker-{name}-desktop.png"), full_page=True)
    size = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(ARTIFACTS / f"worker-{name}-phone.png"), full_page=True)
    page.set_viewport_size(size)


def chat_once(page: Any, text: str, seq: int) -> str:
    """Send a message and check that the reply streams in (partial text while still pending)."""
    page.wait_for_selector("#conn.ok", timeout=15_000)
    page.fill("#text", text)
    page.keyboard.press("Enter")
    page.wait_for_selector(f'#msg-{seq}[data-status="complete"]', timeout=15_000)
    streamed = page.wait_for_function(
        f"""() => {{ const m = document.getElementById('msg-{seq + 1}');
                 if (!m) return false;
                 if (m.dataset.status === 'pending' && m.querySelector('.text').textContent.length) window.__streamed = true;
                 return m.dataset.status !== 'pending' && (window.__streamed ? 'streamed' : 'whole'); }}""",
        polling="raf",
        timeout=90_000,
    ).json_value()
    return streamed


def rate(page: Any) -> None:
    sliders = page.locator('input[type="range"]')
    assert page.locator("#submit-ratings").is_disabled()
    for i in range(sliders.count()):
        sliders.nth(i).focus()
        for _ in range(i + 1):
            page.keyboard.press("ArrowRight")
    assert page.locator("#submit-ratings").is_enabled()


def test_a_worker_completes_a_two_session_episode_in_the_browser(server: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        page.goto(f"{server}/s/browser/?PROLIFIC_PID=browser-worker&STUDY_ID=st&SESSION_ID=se")
        assert "Consent" in page.content()
        shoot(page, "1-consent")
        consent(page)

        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#conn.ok", timeout=15_000)
        shoot(page, "2a-chat-empty")
        assert chat_once(page, "Hi! My name is Sam and I love gardening, especially tomatoes.", 1) == "streamed"
        assert page.locator("#msg-2 .text").inner_text().strip()
        assert page.locator("#end-session").is_enabled()
        shoot(page, "2-chat")
        page.click("#end-session")

        page.wait_for_url("**/rate/")
        shoot(page, "3-rating")
        rate(page)
        page.click("#submit-ratings")

        page.wait_for_url("**/wait/")
        assert "One week later" in page.content()
        shoot(page, "4-one-week-later")
        page.click("#start-session", timeout=60_000)

        page.wait_for_url("**/chat/*/")
        assert "Session 2" in page.content()
        # the bot opens session 2 (bot_opens_sessions is on by default): its message comes first
        page.wait_for_selector('#msg-1:not([data-status="pending"])', timeout=90_000)
        chat_once(page, "Do you remember what I grow in my garden?", 2)
        shoot(page, "5-chat-session-2")
        page.click("#end-session")
        page.wait_for_url("**/rate/")
        rate(page)
        page.click("#submit-ratings")

        page.wait_for_url("**/done/")
        assert page.locator("#completion-code").inner_text() == "BRWS2026"
        assert "cc=BRWS2026" in page.locator("#prolific-return").get_attribute("href")
        shoot(page, "6-done")
        assert errors == []
        browser.close()
