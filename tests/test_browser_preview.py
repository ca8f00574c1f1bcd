"""Issue 26's preview in headless Chromium against a real server: a researcher previews a draft study as a worker
(consent, a session with each arm in turn, the ratings, the wait page, the completion page) under a banner that
says nothing is recorded; the study page then counts no participant, and ending the preview deletes it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.live import LiveSite, consent, launch_chromium, log_in, rate_every_slider

pytestmark = [pytest.mark.browser]

SETUP = """
from django.contrib.auth.models import User
from studies.models import Arm, Study
olga = User.objects.create_user("olga", password="olga-pw-2026", is_staff=True)
s = Study.objects.create(name="Draft memory study", slug="draft", status="draft", sessions_per_episode=2,
    episodes_per_worker=1, min_user_turns=1, completion_code="PREV2026", created_by=olga, gap_days=7, gap_max_days=None)
s.add_default_metrics()
Arm.objects.create(study=s, name="Echo A", memory_system="none", llm_backend="scripted")
Arm.objects.create(study=s, name="Echo B", memory_system="full_history", llm_backend="scripted")
"""


def _session(page: Any) -> None:
    """One session as a worker: a message, the reply, end, rate every slider."""
    page.wait_for_selector("#conn.ok", timeout=15_000)
    assert page.locator("#preview-banner").is_visible()
    page.click("#text")
    page.keyboard.type("Hello, I am previewing this study.")
    page.keyboard.press("Enter")
    page.wait_for_selector('#msg-2[data-status="complete"], #msg-3[data-status="complete"]', timeout=30_000)
    page.click("#end-session")
    page.wait_for_url("**/rate/")
    rate_every_slider(page)


def test_a_researcher_previews_a_draft_study_as_a_worker_and_nothing_is_recorded(live_site: LiveSite) -> None:
    from playwright.sync_api import sync_playwright

    server = live_site.url

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
        page.set_default_timeout(20_000)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/studies/draft/")
        log_in(page, "olga", "olga-pw-2026")
        page.click("#start-preview")
        assert "nothing is recorded" in page.locator("#preview-banner").inner_text()
        consent(page)
        seen = 0
        for _ in range(4):  # two arms x two sessions, a wait page before each later session and new arm
            if "/wait/" in page.url:
                page.click("#start-session")
            page.wait_for_url("**/chat/*/")
            _session(page)
            seen += 1
            page.wait_for_url(lambda url: "/wait/" in url or "/done/" in url)
        assert seen == 4 and "/done/" in page.url
        assert "PREV2026" in page.content() and page.locator("#preview-banner").is_visible()
        arms = live_site.shell(
            "from chat.models import Episode; "
            "print(sorted(Episode.objects.filter(participant__source='preview').values_list('arm__name', flat=True)))"
        )
        assert arms == "['Echo A', 'Echo B']"

        page.goto(f"{server}/studies/draft/")
        assert page.locator("dt:text('Participants') + dd").inner_text() == "0"
        page.goto(f"{server}/s/draft/done/")
        page.locator("#preview-banner button").click()
        page.wait_for_url("**/studies/draft/")
        assert "Preview ended" in page.content()
        assert live_site.shell("from studies.models import Participant; print(Participant.objects.count())") == "0"
        assert not errors, errors
        browser.close()
