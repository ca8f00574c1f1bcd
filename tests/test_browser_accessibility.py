"""Issue 26, item 6: every worker page checked by axe-core (axe-playwright-python, which ships axe.min.js) in
headless Chromium against a real server: the consent page, the questions before the first session (with an error
shown), the comprehension check, a chat session, the rating page, the wait page, the questions after the last
session, the completion page, the declined page and the page of a worker who failed the comprehension check, with no
serious or critical violation; each step has its own page title."""

from __future__ import annotations

from typing import Any

import pytest

from tests.live import consent, launch_chromium, rate_every_slider

pytestmark = [pytest.mark.browser]

SETUP = """
from studies.models import Arm, Study
from studies.questions import LIKERT_LABELS, Question
s = Study.objects.create(name="Accessible study", slug="a11y", status="open", sessions_per_episode=2,
    episodes_per_worker=1, min_user_turns=1, completion_code="A11Y2026", gap_days=7, gap_max_days=None,
    comprehension_attempts=1)
s.add_default_metrics()
Arm.objects.create(study=s, name="Echo", memory_system="none", llm_backend="scripted")
Question.objects.create(study=s, block="pre", kind="choice", text="Have you used a chatbot before?", choices=["Yes", "No"])
Question.objects.create(study=s, block="pre", kind="likert", text="I like trying new apps.", choices=LIKERT_LABELS[5],
    required=False, order=1)
Question.objects.create(study=s, block="pre", kind="text", text="Which apps do you use most?", required=False, order=2)
Question.objects.create(study=s, block="check", kind="choice", text="What do you do after each session?",
    choices=["Nothing", "Rate the chatbot"], correct=1)
Question.objects.create(study=s, block="post", kind="text", text="Any comments?", required=False)
"""


def serious(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page, as readable lines."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v.get("impact") in ("serious", "critical")
    ]


def test_every_worker_page_passes_axe_core(server: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
        page.set_default_timeout(20_000)
        found: dict[str, list[str]] = {}
        titles: dict[str, str] = {}

        def check(step: str) -> None:
            found[step] = serious(page)
            titles[step] = page.title()

        page.goto(f"{server}/s/a11y/?PROLIFIC_PID=a11y1&STUDY_ID=st&SESSION_ID=se")
        check("consent")
        consent(page)
        page.wait_for_url("**/questions/pre/")
        page.click("#submit-answers")  # a required question left out: the page says so
        page.wait_for_selector("#form-errors")
        check("questions before")
        page.get_by_label("Yes", exact=True).check()
        page.click("#submit-answers")
        page.wait_for_url("**/check/")
        check("comprehension check")
        page.get_by_label("Rate the chatbot", exact=True).check()
        page.click("#submit-answers")
        for k in (1, 2):
            if "/wait/" in page.url:
                check("wait")
                page.click("#start-session")
            page.wait_for_url("**/chat/*/")
            page.wait_for_selector("#conn.ok", timeout=15_000)
            assert page.evaluate("document.activeElement && document.activeElement.id") == "text", "focus on the box"
            page.keyboard.type("Hello there, this is an accessibility check.")
            page.keyboard.press("Enter")
            page.wait_for_selector('.msg[data-status="complete"]:last-child', timeout=30_000)
            check(f"session {k}")
            page.click("#end-session")
            page.wait_for_url("**/rate/")
            check("rating")
            rate_every_slider(page)
            page.wait_for_url(lambda url: "/wait/" in url or "/questions/post/" in url)
        check("questions after")
        page.click("#submit-answers")
        page.wait_for_url("**/done/")
        check("done")
        page = browser.new_context().new_page()  # another worker declines consent
        page.goto(f"{server}/s/a11y/?PROLIFIC_PID=a11y2&STUDY_ID=st&SESSION_ID=se")
        page.click("#decline")
        page.wait_for_url("**/declined/")
        check("declined")
        page = browser.new_context().new_page()  # a third fails the comprehension check (one try)
        page.goto(f"{server}/s/a11y/?PROLIFIC_PID=a11y3&STUDY_ID=st&SESSION_ID=se")
        consent(page)
        page.get_by_label("No", exact=True).check()
        page.click("#submit-answers")
        page.wait_for_url("**/check/")
        page.get_by_label("Nothing", exact=True).check()
        page.click("#submit-answers")
        page.wait_for_url("**/stopped/")
        check("cannot continue")
        browser.close()
        problems = {step: v for step, v in found.items() if v}
        assert not problems, problems
        assert len(set(titles.values())) == len(titles), titles  # each step its own title
