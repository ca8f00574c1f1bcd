"""Issue 26, item 4 in headless Chromium against a real server: a worker answers the questions before the first
session (a Likert scale, a single choice, a free text), fails then passes the comprehension check, chats, rates,
answers the questions after the last session and gets the completion code; a second worker fails every try and meets
the page that ends the study for them, with Prolific's return instruction. The database then holds what each did."""

from __future__ import annotations

from typing import Any

import pytest

from tests.live import LiveSite, consent, launch_chromium, rate_every_slider

pytestmark = [pytest.mark.browser]

SETUP = """
from studies.models import Arm, Study
from studies.questions import LIKERT_LABELS, Question
s = Study.objects.create(name="Questions study", slug="quest", status="open", sessions_per_episode=1,
    episodes_per_worker=1, min_user_turns=1, completion_code="QUEST2026", comprehension_attempts=2)
s.add_default_metrics()
Arm.objects.create(study=s, name="Echo", memory_system="none", llm_backend="scripted")
Question.objects.create(study=s, block="pre", kind="likert", text="I chat with chatbots often.", choices=LIKERT_LABELS[5])
Question.objects.create(study=s, block="pre", kind="choice", text="Your device?", choices=["Phone", "Computer"], order=1)
Question.objects.create(study=s, block="pre", kind="text", text="What do you hope a chatbot remembers?", max_chars=80,
    order=2)
Question.objects.create(study=s, block="check", kind="choice", text="How many chat sessions will you have?",
    choices=["None", "One"], correct=1)
Question.objects.create(study=s, block="post", kind="text", text="How did the chatbot do?", order=0)
"""


def _worker(browser: Any, server: str, pid: str) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{server}/s/quest/?PROLIFIC_PID={pid}&STUDY_ID=st&SESSION_ID=se-{pid}")
    consent(page)
    page.wait_for_url("**/questions/pre/")
    return page


def _pick(page: Any, label: str) -> None:
    page.get_by_label(label, exact=True).check()


def test_a_worker_answers_before_fails_then_passes_the_check_and_answers_after(live_site: LiveSite) -> None:
    from playwright.sync_api import sync_playwright

    server = live_site.url

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = _worker(browser, server, "questy1")
        assert page.title() == "Before you start · Chatbot study"
        _pick(page, "Agree")
        page.fill("textarea", "That my cat is called Mistral")
        page.click("#submit-answers")  # the device is required: the page says so, and keeps the rest
        page.wait_for_selector("#form-errors")
        assert page.locator("textarea").input_value() == "That my cat is called Mistral"
        assert page.get_by_label("Agree", exact=True).is_checked()
        _pick(page, "Computer")
        page.click("#submit-answers")
        page.wait_for_url("**/check/")
        assert page.title() == "Check your understanding · Chatbot study"
        assert page.locator("#attempts-left").inner_text() == "2"
        _pick(page, "None")
        page.click("#submit-answers")
        page.wait_for_selector("#check-retry")
        assert page.locator("#attempts-left").inner_text() == "1"
        _pick(page, "One")
        page.click("#submit-answers")
        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#conn.ok", timeout=15_000)
        page.keyboard.type("Hello, my cat is called Mistral.")
        page.keyboard.press("Enter")
        page.wait_for_selector('.msg[data-status="complete"]:last-child', timeout=30_000)
        page.click("#end-session")
        page.wait_for_url("**/rate/")
        rate_every_slider(page)
        page.wait_for_url("**/questions/post/")
        assert page.title() == "A few last questions · Chatbot study"
        page.fill("textarea", "It remembered my cat.")
        page.click("#submit-answers")
        page.wait_for_url("**/done/")
        assert page.locator("#completion-code").inner_text() == "QUEST2026"
        browser.close()
    stored = live_site.shell(
        "from studies.questions import answers_of; from studies.models import Participant; "
        "p = Participant.objects.get(external_id='prolific:questy1'); "
        "print([(a.question.block, a.text) for a in answers_of(p)], "
        "list(p.comprehension_attempts.values_list('passed', flat=True)), p.completed_at is not None)"
    )
    assert stored == (
        "[('pre', 'Agree'), ('pre', 'Computer'), ('pre', 'That my cat is called Mistral'), "
        "('post', 'It remembered my cat.')] [False, True] True"
    )


def test_a_worker_who_fails_every_try_is_stopped_with_the_prolific_return_instruction(live_site: LiveSite) -> None:
    from playwright.sync_api import sync_playwright

    server = live_site.url

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = _worker(browser, server, "questy2")
        _pick(page, "Disagree")
        _pick(page, "Phone")
        page.fill("textarea", "Nothing in particular")
        page.click("#submit-answers")
        page.wait_for_url("**/check/")
        _pick(page, "None")
        page.click("#submit-answers")
        page.wait_for_selector("#check-retry")
        _pick(page, "None")
        page.click("#submit-answers")
        page.wait_for_url("**/stopped/")
        assert page.title() == "You cannot continue · Chatbot study"
        assert "Please return your submission on Prolific" in page.locator("#prolific-return-instruction").inner_text()
        page.goto(f"{server}/s/quest/next/")  # no way round it
        assert page.url.endswith("/s/quest/stopped/")
        page.goto(f"{server}/s/quest/check/")
        assert page.url.endswith("/s/quest/stopped/")
        browser.close()
    stored = live_site.shell(
        "from studies.models import Participant; p = Participant.objects.get(external_id='prolific:questy2'); "
        "print(list(p.comprehension_attempts.values_list('passed', flat=True)), p.episodes.count(), p.started_at)"
    )
    assert stored == "[False, False] 0 None"
