"""Issue 9 end to end in headless Chromium against a real daphne server (scripted LLM, no model): an attentive
worker and a careless one (pastes every message, random sliders, fails the attention check) each do two
episodes, one of them with the degraded QC bot; the researcher's quality page then flags only the careless
worker, and the analysis page's exclusion filters remove them and keep the attentive one.

Screenshots go to artifacts/ (gitignored) for a human to look at.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.live import ROOT, LiveSite, consent, launch_chromium, log_in

pytestmark = [pytest.mark.browser]

ARTIFACTS = ROOT / "artifacts"
SETUP = """
from django.contrib.auth.models import User
from studies.models import Arm, AttentionCheck, Study
User.objects.create_user("rita", password="pw", is_staff=True, is_superuser=True)
s = Study.objects.create(name="Quality study", slug="quality", status="open", sessions_per_episode=1,
    episodes_per_worker=2, min_user_turns=2, completion_code="QUAL2026")
s.add_default_metrics()
Arm.objects.create(study=s, name="Echo bot", memory_system="none", llm_backend="scripted")
Arm.objects.create(study=s, name="QC bot", memory_system="qc")
AttentionCheck.objects.create(study=s, position=1, target=80, tolerance=5)
n = Study.objects.create(name="No paste", slug="nopaste", status="open", sessions_per_episode=1,
    episodes_per_worker=1, min_user_turns=1, block_paste=True, session_time_limit_minutes=30)
n.add_default_metrics()
Arm.objects.create(study=n, name="Echo bot", memory_system="none", llm_backend="scripted")
"""
MESSAGES = ["Hi there, I spent the weekend hiking.", "The weather was lovely and sunny."]
PASTED = "As an AI language model, I enjoy discussing many topics with you today."


def _set_slider(page: Any, slider: Any, value: int) -> None:
    """Move a slider with the keyboard, as a person would: to one end, then step to the value."""
    slider.focus()
    if value >= 50:
        page.keyboard.press("End")
        for _ in range(100 - value):
            page.keyboard.press("ArrowLeft")
    else:
        page.keyboard.press("Home")
        for _ in range(value):
            page.keyboard.press("ArrowRight")


def _episode(page: Any, careless: bool, rng: random.Random) -> None:
    """One one-session episode: two messages, end, rate (attentively or not)."""
    page.wait_for_selector("#conn.ok", timeout=15_000)
    for i, text in enumerate(MESSAGES):
        page.click("#text")
        if careless:  # copies an LLM's text into the chat box: a real paste from the clipboard
            page.evaluate("t => navigator.clipboard.writeText(t)", f"{PASTED} ({i})")
            page.keyboard.press("Control+V")
        else:
            page.keyboard.type(text, delay=110)  # about 8 characters per second
        page.keyboard.press("Enter")
        page.wait_for_selector(f'#msg-{2 * i + 2}[data-status="complete"]', timeout=30_000)
    reply = page.locator("#msg-2 .text").inner_text()
    page.click("#end-session")
    page.wait_for_url("**/rate/")
    sliders = page.locator('input[type="range"]')
    qc_bot = not reply.startswith("You said")  # an attentive worker notices the bot ignoring them
    for i in range(sliders.count()):
        slider = sliders.nth(i)
        legend = page.locator("fieldset").nth(i).locator("legend").inner_text()
        if careless:
            value = rng.randint(0, 100) if "set this slider" not in legend else 30
        elif (
            "set this slider to" in legend
        ):  # the target, 80, is drawn (a person reads it; the page's text has no digit)
            value = 80
        else:
            value = 15 + i if qc_bot else 75 + i
        _set_slider(page, slider, value)
    page.click("#submit-ratings")


def _worker(browser: Any, server: str, pid: str, careless: bool) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    page = context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    rng = random.Random(7)
    page.goto(f"{server}/s/quality/?PROLIFIC_PID={pid}&STUDY_ID=st&SESSION_ID=se")
    assert page.locator("#estimated-time").inner_text().endswith("minutes")  # the welcome page's estimate
    consent(page)
    page.wait_for_url("**/chat/*/")
    _episode(page, careless, rng)
    page.wait_for_url("**/wait/")
    page.click("#start-session")
    page.wait_for_url("**/chat/*/")
    _episode(page, careless, rng)
    page.wait_for_url("**/done/")
    assert "QUAL2026" in page.content()
    assert not errors, errors
    context.close()


def test_a_careless_worker_is_flagged_and_excluded_while_an_attentive_one_is_kept(server: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        _worker(browser, server, "attentive-1", careless=False)
        _worker(browser, server, "careless-1", careless=True)

        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{server}/studies/quality/quality/")
        log_in(page, "rita", "pw")
        page.wait_for_selector("#quality-table")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "researcher-worker-quality.png"), full_page=True)
        # workers are pseudonyms; the owner (a superuser: nobody created this study) asks for each raw ID
        rows = page.locator("#quality-table tbody tr[data-worker]")
        by_raw_id = {}
        for i in range(rows.count()):
            row = rows.nth(i)
            assert row.get_attribute("data-worker").startswith("W-") and "careless" not in row.inner_text()
            row.get_by_role("button", name="Show raw ID").click()
            by_raw_id[row.locator(".raw-id").inner_text().strip()] = row
        careless, attentive = by_raw_id["careless-1"], by_raw_id["attentive-1"]
        assert "flagged" in (careless.get_attribute("class") or "")
        reasons = careless.locator("td.reasons").inner_text()
        assert "of the text was pasted" in reasons and "failed 1 of 1 attention check" in reasons
        assert "flagged" not in (attentive.get_attribute("class") or "")
        assert attentive.locator("td.reasons").inner_text().strip() == "nothing"
        assert page.locator("#n-flagged").inner_text() == "1"

        page.goto(f"{server}/studies/quality/analysis/")
        page.check('input[name="exclude"][value="attention_failed"]')
        page.check('input[name="exclude"][value="flag_paste"]')
        page.click("form.reports-options button[type=submit]")
        page.wait_for_url("**exclude=attention_failed**")
        page.screenshot(path=str(ARTIFACTS / "researcher-analysis-exclusions.png"), full_page=True)
        text = page.locator("#exclusions").inner_text()
        assert "workers flagged in 'attention_failed' (1 removed)" in text
        assert "1 of 2 workers were removed in all" in text
        assert page.locator("#qc").count() == 1  # the kept worker's QC test still ran
        browser.close()


def test_block_paste_refuses_a_paste_tells_the_worker_and_counts_it(live_site: LiveSite) -> None:
    from playwright.sync_api import sync_playwright

    server = live_site.url

    with sync_playwright() as p:
        browser = launch_chromium(p)
        context = browser.new_context()
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{server}/s/nopaste/?PROLIFIC_PID=paster&STUDY_ID=st&SESSION_ID=se")
        consent(page)
        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#conn.ok", timeout=15_000)
        assert ":" in page.locator("#time-left").inner_text()  # the session's time limit counts down
        page.click("#text")
        page.evaluate("t => navigator.clipboard.writeText(t)", "An answer written elsewhere.")
        page.keyboard.press("Control+V")
        assert page.input_value("#text") == ""
        assert "Pasting is turned off" in page.locator("#chat-error").inner_text()
        page.keyboard.type("typed myself", delay=100)
        page.keyboard.press("Enter")
        page.wait_for_selector('#msg-2[data-status="complete"]', timeout=30_000)
        browser.close()
    out = live_site.shell(
        "from chat.models import MessageSignals as M; s = M.objects.get(message__text='typed myself'); "
        "print(s.paste_blocked, s.pasted, s.typed_chars)"
    ).split()
    assert out == ["1", "False", "12"]
