"""A researcher sets up a study in headless Chromium: log in, create it with two arms, open it, make an
invite link (htmx), read an episode. Screenshots go to artifacts/ for a human to look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chat.models import ArmJob
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from runtime import executor, leases
from runtime.models import Job
from studies import memorycompat
from studies.models import Arm, Study
from studies.tests.conftest import arm_job, make_finished_episode, make_ready
from tests.live import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


@pytest.fixture
def browser(chromium: Any) -> Any:
    """The module's Chromium (conftest.py): each test opens its own contexts."""
    return chromium


def _login(page: Any, url: str) -> None:
    page.goto(f"{url}/studies/")
    log_in(page, "rita", "pw")
    page.locator("h1", has_text="Studies").wait_for()


def test_a_researcher_creates_opens_and_inspects_a_study_in_the_browser(
    live_server: Any,
    researcher: Any,
    study: Study,
    browser: Any,
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    finished_episode = make_finished_episode(study)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(20_000)
    _login(page, live_server.url)

    page.click("text=New study")
    page.fill("#id_name", "Browser pilot")
    page.fill("#id_sessions_per_episode", "3")
    page.fill("#id_arms-0-name", "No memory")
    page.select_option("#id_arms-0-memory_system", "none")
    page.click("[data-add-form=arms]")  # the second arm row is cloned from the formset's empty form
    page.fill("#id_arms-1-name", "Summaries")
    page.select_option("#id_arms-1-memory_system", "memory_accumulate")
    page.fill("#id_arms-1-params", '{"k": 3, "nope": 1}')
    page.click("button:has-text('Create study')")
    page.get_by_text("Unknown parameter(s) for memory_accumulate: nope").wait_for()
    page.fill("#id_arms-1-params", '{"k": 3}')
    page.click("button:has-text('Create study')")
    page.locator("h1", has_text="Browser pilot").wait_for()

    created = Study.objects.get(name="Browser pilot")
    assert [(a.name, a.params) for a in created.arms.all()] == [("No memory", {}), ("Summaries", {"k": 3})]
    assert created.metrics.count() == 5 and created.status == Study.Status.DRAFT

    make_ready(created)  # the readiness checks themselves are another test's (below)
    page.click("button:has-text('Open to workers')")
    page.get_by_text("The study is now open.").wait_for()
    created.refresh_from_db()
    assert created.status == Study.Status.OPEN
    assert "PROLIFIC_PID={{%PROLIFIC_PID%}}" in page.input_value("#prolific-link")

    page.evaluate("window.stillTheSamePage = true")
    page.fill("#id_invite_id", "lab-07")
    page.click("#invite button:has-text('Generate')")
    page.locator("#invite-link").wait_for()
    assert f"/s/{created.slug}/join/" in page.input_value("#invite-link")
    assert page.evaluate("window.stillTheSamePage === true")  # htmx swapped the fragment in place, no reload
    page.fill("#id_invite_id", "")
    page.fill("#id_count", "3")
    page.click("#invite button:has-text('Generate')")
    page.locator("#invite-links").wait_for()
    assert len(page.input_value("#invite-links").split()) == 3
    # a refused form (400) is swapped in with its error too (htmx 2 swaps no 4xx by default: templates/base.html)
    page.fill("#id_invite_id", "lab 07")
    page.click("#invite button:has-text('Generate')")
    page.locator("#invite .error").wait_for()
    assert "slug" in page.inner_text("#invite .error").lower() and page.locator("#invite-links").count() == 0
    assert page.evaluate("window.stillTheSamePage === true")
    page.screenshot(path=str(ARTIFACTS / "researcher-browser-study.png"), full_page=True)

    page.goto(f"{live_server.url}/studies/{study.slug}/episodes/{finished_episode.pk}/")
    page.locator("summary", has_text="reply").first.click()
    page.get_by_text("You are a friendly chatbot.").wait_for()
    assert page.get_by_text("Memory after session 1").is_visible()
    page.screenshot(path=str(ARTIFACTS / "researcher-browser-episode.png"), full_page=True)

    phone = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    _login(phone, live_server.url)
    phone.goto(f"{live_server.url}{created.get_absolute_url()}")
    width = phone.evaluate("document.documentElement.scrollWidth")
    wide = phone.evaluate(
        "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 390 && !e.closest('.table-scroll'))"
        ".slice(0, 8).map(e => e.tagName + '.' + e.className + ' ' + getComputedStyle(e).position + ' ' + (e.id || '') + ' ' + Math.round(e.getBoundingClientRect().right))"
    ) + phone.evaluate(
        "(() => { let e = document.querySelector('table.readiness'), out = []; while (e) { const s = getComputedStyle(e);"
        " out.push(e.tagName + '.' + e.className + ' w=' + Math.round(e.getBoundingClientRect().width) + ' ox=' + s.overflowX"
        " + ' d=' + s.display); e = e.parentElement; } return out; })()"
    )
    assert width <= 390, f"the study page scrolls sideways on a phone ({width}px): {wide}"
    phone.screenshot(path=str(ARTIFACTS / "researcher-browser-study-phone.png"), full_page=True)


def test_a_researcher_sees_arm_readiness_and_opens_the_study_as_a_pilot_in_the_browser(
    live_server: Any, researcher: Any, study: Study, browser: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The readiness checks are a scripted stand-in here (they are memory.preflight's to test) that fails
    one check, as the embedded model does. Jobs run inline: the live server's in-memory SQLite cannot
    take writes from job threads beside the page's requests; the progress poll is shown on a job row
    that the test moves on itself."""
    settings.CHAT_JOB_MODE = "inline"

    def not_ready(memory_system: str, llm: Any, **kw: Any) -> dict[str, Any]:
        kw["progress"](5, 5, "replies 5/5")
        return {"arm": memory_system, "backend": kw["backend"], "model": llm.model, "ready": False, "checks": [FAILED]}

    monkeypatch.setattr(memorycompat, "run_preflight", not_ready)
    study.status = Study.Status.DRAFT
    study.save()
    arm = study.arms.get(memory_system="none")
    running = arm_job(  # a live job: its heartbeat holds the lease (runtime/leases.py)
        arm, status="running", attempts=1, done=2, total=5, step="replies 2/5", lease_until=leases.later(600)
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(20_000)
    _login(page, live_server.url)
    page.goto(f"{live_server.url}{study.get_absolute_url()}")

    card = page.locator("#readiness")
    assert card.locator("tr", has_text="Full history").locator(".arm-llm").inner_text() == "scripted · scripted"
    assert card.locator("tr", has_text="Full history").locator(".readiness-not_checked").is_visible()
    assert "2/5 replies 2/5" in card.locator("tr", has_text="No memory").inner_text()
    result = {"arm": "none", "backend": "scripted", "model": "scripted", "ready": False, "checks": [FAILED]}
    ArmJob.objects.filter(pk=running.pk).update(result=result)
    Job.objects.filter(pk=running.job.pk).update(status="done", done=5)
    card.locator("tr", has_text="No memory").locator(".readiness-not_ready").wait_for()  # htmx polled the card

    page.click("#readiness button:has-text('Check every arm')")
    page.get_by_text("Readiness checks started for No memory, Full history.").wait_for()
    assert card.locator(".readiness-not_ready").count() == 2
    assert "failed reply_no_prompt_text" in page.locator(".not-ready").inner_text()
    card.locator("summary", has_text="1 check, 1 failed").first.click()
    card.get_by_text("3 of 4 replies quote the prompt").first.wait_for()
    page.screenshot(path=str(ARTIFACTS / "researcher-browser-readiness.png"), full_page=True)

    page.click("button:has-text('Open to workers')")
    page.get_by_text("The study was not opened: not every arm is ready").wait_for()
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT

    page.click("button:has-text('Open as pilot (not for publication)')")
    page.get_by_text("The study is now open as a pilot: not for publication.").wait_for()
    assert page.locator("h1 .pilot-mark").inner_text() == "pilot: not for publication"
    study.refresh_from_db()
    assert (study.status, study.pilot) == (Study.Status.OPEN, True)
    page.screenshot(path=str(ARTIFACTS / "researcher-browser-pilot.png"), full_page=True)
    page.click("a:has-text('Analysis')")
    page.locator("h1 .pilot-mark").wait_for()


def test_a_researcher_sees_the_demo_model_up_front_and_a_rule_based_arms_two_verdicts_in_the_browser(
    live_server: Any, researcher: Any, study: Study, browser: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The check of a rule-based arm answers its memory mechanism at once (the real readiness checks,
    no model call) and queues the reply model; the queue is held here and the reply model's verdict is
    written by the test (the real checks on the scripted backend, which echoes), as a worker would."""
    settings.CHAT_JOB_MODE = "inline"
    # the reply model's run waits in the queue
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    study.status = Study.Status.DRAFT
    study.save()
    Arm.objects.create(study=study, name="Demo summary", memory_system="memory_update", llm_backend="local")
    arm = study.arms.get(memory_system="full_history")
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(20_000)
    _login(page, live_server.url)
    page.goto(f"{live_server.url}{study.get_absolute_url()}")

    banner = page.locator("#demo-model")
    assert banner.is_visible() and "Demo summary runs on the embedded demo model" in banner.inner_text()
    assert banner.bounding_box()["y"] < page.locator("#readiness").bounding_box()["y"]  # up front
    assert "Full history" not in banner.inner_text()  # it runs on the scripted backend

    row = page.locator(f"#readiness-arm-{arm.pk}")
    row.locator("button:has-text('Check')").click()
    page.get_by_text("Readiness checks started for Full history.").wait_for()
    row = page.locator(f"#readiness-arm-{arm.pk}")
    assert row.locator(".verdict-mechanism").inner_text() == "memory mechanism: ready"
    assert row.locator(".verdict-reply_model").inner_text() == "reply model: checking…"
    assert row.locator(".queued").inner_text() == "queued: waiting for the model"

    job = ArmJob.objects.get(arm=arm)
    result = memorycompat.run_preflight(
        "full_history", ScriptedLLM(model="scripted"), embedder=HashingEmbedder(), params={}, backend="scripted"
    )
    ArmJob.objects.filter(pk=job.pk).update(result=result)
    Job.objects.filter(pk=job.job.pk).update(status="done", done=30, total=30, finished_at=leases.later(0))
    row.locator(".verdict-reply_model.verdict-not_ready").wait_for()  # htmx polled the card
    assert row.locator(".verdict-mechanism").inner_text() == "memory mechanism: ready"
    assert row.locator(".verdict-reply_model").inner_text().startswith("reply model: not ready failed ")
    assert row.locator(".readiness-not_ready").is_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "researcher-browser-two-verdicts.png"), full_page=True)


FAILED = {
    "name": "reply_no_prompt_text",
    "score": 0.25,
    "threshold": 1.0,
    "passed": False,
    "why": "3 of 4 replies quote the prompt",
    "examples": [],
}
