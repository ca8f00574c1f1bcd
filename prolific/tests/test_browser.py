"""The researcher reviews a wave in headless Chromium against the fake Prolific server: the clean submission is
approved in bulk, the flagged one rejected with the suggested category and message, both seen on Prolific."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from prolific import services
from prolific.models import Submission, Wave
from prolific.tests.conftest import fail_attention, worker
from prolific.tests.fake_prolific import FakeProlific
from studies.models import Study

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "tok-BROWSER-SECRET"


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeProlific]:
    with FakeProlific(TOKEN) as server:
        settings.PROLIFIC_API_TOKEN = TOKEN
        settings.PROLIFIC_API_URL = server.url
        yield server


def test_a_researcher_reviews_a_wave_in_the_browser(
    live_server: Any, researcher: Any, study: Study, browser: Any, fake: FakeProlific
) -> None:
    for i in range(2):
        fake.add_submission("W1", f"sub{i}", f"pid{i}")
        worker(study, f"pid{i}", f"sub{i}")
    fail_attention(study, "pid1")
    wave = Wave.objects.create(study=study, number=1, prolific_study_id="W1", bonus_per_episode=Decimal("1"))
    services.sync_wave(wave)

    page = browser.new_page()
    page.goto(f"{live_server.url}/studies/{study.slug}/prolific/")
    page.fill("input[name=username]", "rita")
    page.fill("input[name=password]", "pw")
    page.click("form button.button")
    page.locator("h1", has_text="Prolific").wait_for()
    assert TOKEN not in page.content()
    page.click("text=Approve every submission with nothing to report")
    page.locator(".flash-success", has_text="1 submission(s) with nothing to report approved").wait_for()
    row = page.locator("#sub-sub1")
    assert row.locator("select[name=category]").input_value() == "FAILED_CHECK"
    assert "attention check" in row.locator("textarea[name=message]").input_value()
    row.locator("button", has_text="Reject on Prolific").click()
    page.locator(".flash-success", has_text="sub1: rejected on Prolific").wait_for()
    assert [(s, b["action"]) for s, b in fake.transitions] == [("sub0", "APPROVE"), ("sub1", "REJECT")]
    assert Submission.objects.get(submission_id="sub1").rejection_category == "FAILED_CHECK"
    page.click("text=Pay bonuses")
    page.locator(".flash-success", has_text="Bonuses paid to 1 worker(s)").wait_for()
