"""Persona cards in headless Chromium against a real daphne server: a worker of the demo persona study
(``seed_demo``'s ``demo-cards``: an update, a forget and an in-chat probe) plays their card through two
sessions, then the researcher's analysis page shows what the bot remembered (the probe tables). The arms
run on the scripted backend (an echo: it answers nothing right), so the test checks the flow and the tables,
not an arm's recall; the scoring and the stages are chat/tests/test_persona_probes.py's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live import ROOT, consent, launch_chromium, log_in, rate_every_slider

pytestmark = [pytest.mark.browser]

ARTIFACTS = ROOT / "artifacts"
SETUP = """
from django.contrib.auth.models import User
from studies import demo
User.objects.create_superuser("rita", "", "pw")
study, _ = demo.seed_persona_study()
study.arms.update(llm_backend="scripted")
study.arms.filter(memory_system="none").update(active=False)
"""


def send(page: Any, text: str, seq: int) -> int:
    """Send a message and wait for the bot's reply; returns the next free seq."""
    page.fill("#text", text)
    page.keyboard.press("Enter")
    page.wait_for_selector(f'#msg-{seq + 1}:not([data-status="pending"])', timeout=30_000)
    return seq + 2


def rate(page: Any) -> None:
    rate_every_slider(page, "ArrowRight")


def test_a_worker_plays_a_persona_card_through_two_sessions_and_the_report_shows_the_probes(server: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/s/demo-cards/?PROLIFIC_PID=card-worker&STUDY_ID=st&SESSION_ID=se")
        consent(page)
        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#conn.ok", timeout=15_000)
        card = page.locator("#persona-card")
        assert card.is_visible() and card.locator("li.fact").count() >= 5
        facts = [t.strip() for t in card.locator("li.task").all_inner_texts()]
        assert len(facts) == 5 and all(f.startswith("Mention: ") for f in facts)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "persona-1-card.png"), full_page=True)
        seq = 1
        for fact in facts:  # the worker brings up each fact of the card, in their own words
            seq = send(
                page, "About me: " + fact.removeprefix("Mention: ").replace("Your ", "My ").replace("You ", "I "), seq
            )
        page.click("#end-session")
        page.wait_for_url("**/rate/")
        rate(page)
        page.wait_for_url("**/wait/")
        page.click("#start-session", timeout=60_000)
        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#conn.ok", timeout=15_000)
        page.wait_for_selector('#msg-1:not([data-status="pending"])', timeout=30_000)
        card = page.locator("#persona-card")
        assert "changed" in card.locator("li.fact.changed").first.inner_text()
        tasks = {t.get_attribute("data-op"): t.inner_text() for t in card.locator("li.task").all()}
        assert set(tasks) == {"update", "forget", "probe"}
        page.screenshot(path=str(ARTIFACTS / "persona-2-changes.png"), full_page=True)
        seq = page.locator("#messages .msg").count() + 1
        seq = send(page, tasks["update"].removeprefix("Tell the chatbot what changed: ").split(" (before")[0]
                   .replace("You ", "I "), seq)  # fmt: skip
        seq = send(page, "Please forget what I told you about my pet.", seq)
        question = re.search("\u201c(.+?)\u201d", tasks["probe"])
        assert question is not None
        seq = send(page, question.group(1), seq)
        page.click("#end-session")
        page.wait_for_url("**/rate/")
        rate(page)
        page.wait_for_url("**/done/")

        page.goto(f"{server}/studies/demo-cards/analysis/")
        log_in(page, "rita", "pw")
        page.wait_for_url("**/analysis/")
        # session 2's probes are stored by the memory update's job: the page refreshes until they are there
        page.wait_for_function(
            "() => document.querySelectorAll('#probes-inline').length === 1", polling=500, timeout=60_000
        )
        probes = page.locator("#probes")
        text = probes.text_content() or ""
        assert (
            "Recall of current facts" in text and "never written (extraction)" in text and "Deletion honoured" in text
        )
        page.screenshot(path=str(ARTIFACTS / "persona-3-report.png"), full_page=True)
        assert not errors, errors
        browser.close()
