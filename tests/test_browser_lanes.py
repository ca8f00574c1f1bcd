"""Lanes that protect people, in headless Chromium against the embedded default (daphne, SQLite, the job
runtime's lanes, a readiness check in its low-priority process lane): a researcher starts an arm's readiness
check, whose model calls hang on an OpenAI-compatible endpoint that does not answer, and while the study page
shows the check running, a worker chats and gets every reply (the chat arm's scripted stand-in model: the words
do not matter here, only that the reply does not wait behind the check).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from chat.tests.fake_openai import ScriptedEndpoint, completion, serving
from tests.live import consent, free_port, launch_chromium, log_in, prepare_site, runserver_command, site_env
from tests.live import serving as serving_site

pytestmark = [pytest.mark.browser]

SETUP = """
from django.contrib.auth.models import User
from studies.models import Arm, Study
User.objects.create_user("rita", password="pw", is_staff=True, is_superuser=True)
s = Study.objects.create(name="Lanes", slug="lanes", status="open", sessions_per_episode=1, episodes_per_worker=1,
    min_user_turns=1, completion_code="LANES", created_by=User.objects.get(username="rita"))
s.add_default_metrics()
Arm.objects.create(study=s, name="Chat arm", memory_system="none", llm_backend="scripted")
Arm.objects.create(study=s, name="Checked arm", memory_system="none", llm_backend="openai", llm_model="held-model",
    active=False)
"""


class Held(ScriptedEndpoint):
    """Holds every request until ``released`` (then answers); ``arrived`` is set by the first one."""

    arrived = threading.Event()
    released = threading.Event()

    def answer(self, step: Any) -> None:
        type(self).arrived.set()
        type(self).released.wait(120)
        self.send_json(200, completion("Fine."))


@pytest.fixture
def site(tmp_path: Any) -> Iterator[str]:
    Held.arrived, Held.released = threading.Event(), threading.Event()
    with serving(Held) as endpoint:
        env = site_env(tmp_path / "db.sqlite3", LLM_BACKEND="scripted", OPENAI_BASE_URL=endpoint,
                       OPENAI_API_KEY="test-key", LLM_TIMEOUT_SECONDS="120", RUNTIME_PROCESS_LANES="long,plan")  # fmt: skip
        prepare_site(env, SETUP)
        port = free_port()
        with serving_site(runserver_command(port), env, port, quiet=True):
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                Held.released.set()  # the check's call answers, so nothing waits on it at the server's exit


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


def test_a_workers_reply_arrives_while_a_readiness_check_runs(site: str, browser: Any) -> None:
    researcher = browser.new_context().new_page()
    researcher.set_default_timeout(30_000)
    researcher.goto(f"{site}/studies/lanes/")
    log_in(researcher, "rita", "pw")
    researcher.locator("#readiness").wait_for()
    researcher.locator("#readiness tr", has_text="Checked arm").locator("button", has_text="Check").click()
    researcher.get_by_text("Readiness checks started for Checked arm.").wait_for()
    assert Held.arrived.wait(120), "the readiness check never called its model"  # it runs, and hangs there
    researcher.reload()
    jobs = researcher.locator("#jobs")
    assert "running" in jobs.locator("tr", has_text="readiness checks of arm Checked arm").inner_text()

    worker = browser.new_context().new_page()
    worker.set_default_timeout(30_000)
    worker.goto(f"{site}/s/lanes/?PROLIFIC_PID=lanes-worker&STUDY_ID=st&SESSION_ID=se")
    consent(worker)
    worker.wait_for_url("**/chat/*/")
    worker.wait_for_selector("#conn.ok")
    for seq, text in ((1, "Hello while the check runs"), (3, "And once more")):
        worker.fill("#text", text)
        worker.keyboard.press("Enter")
        worker.wait_for_selector(f'#msg-{seq + 1}[data-status="complete"]')
        assert text in worker.locator(f"#msg-{seq + 1}").inner_text()  # the scripted stand-in echoes it
    assert not Held.released.is_set()  # the check was still waiting for its model the whole time
    researcher.reload()
    assert "running" in researcher.locator("#jobs tr", has_text="readiness checks of arm Checked arm").inner_text()
