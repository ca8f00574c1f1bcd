"""Live side by side in headless Chromium against a real daphne server: a worker of the demo side-by-side study
(``seed_demo``'s ``demo-side-by-side``) chats with bots A and B through two sessions, both bots reply to every
message, the worker votes after each session, and the researcher's pairwise leaderboard shows the live votes.
The arms run on the scripted backend (an echo): the test checks the flow, the sides and the blinding; whose reply
is whose and a slow side are chat/tests/test_side_by_side.py's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.live import ROOT, consent, launch_chromium, log_in

pytestmark = [pytest.mark.browser]

ARTIFACTS = ROOT / "artifacts"
SETUP = """
from django.contrib.auth.models import User
from django.utils import timezone
from chat.models import ChatSession, Episode, SideBySideVote
from studies import demo
from studies.models import Participant
User.objects.create_superuser("rita", "", "pw")
study, _ = demo.seed_side_by_side_study()
study.arms.update(llm_backend="scripted")
first, second = study.arms.order_by("id")
for i, winner in enumerate(["a", "b", "a"]):  # three earlier workers' votes: a leaderboard needs a few judges
    p = Participant.objects.create(study=study, external_id=f"prolific:earlier{i}", source="prolific",
                                   consented_at=timezone.now(), completed_at=timezone.now())
    a = Episode.objects.create(participant=p, arm=first, index=1, side="a", status="completed")
    b = Episode.objects.create(participant=p, arm=second, index=1, side="b", lead=a, status="completed")
    for e in (a, b):
        ChatSession.objects.create(episode=e, index=1, status="done", simulated_start=study.session_start(1),
                                   started_at=timezone.now())
    SideBySideVote.objects.create(session=a.sessions.get(), winner=winner, reason="An earlier worker's vote.")
"""
ARM_NAMES = ("No memory", "Full history", "full_history", "memory_system")


def send(page: Any, text: str, seq: int) -> int:
    """Send a message to both bots and wait for both replies; returns the next free seq."""
    page.fill("#text", text)
    page.keyboard.press("Enter")
    for side in ("a", "b"):
        page.wait_for_selector(f'#{side}-msg-{seq + 1}[data-status="complete"]', timeout=30_000)
    return seq + 2


def vote(page: Any, winner: str, reason: str) -> None:
    page.wait_for_url("**/rate/")
    page.check(f'input[name="winner"][value="{winner}"]')
    page.fill("#reason", reason)
    page.click("#submit-ratings")


def test_a_worker_chats_with_two_bots_votes_each_session_and_the_leaderboard_counts_the_votes(server: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        frames: list[str] = []
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload))))
        page.goto(f"{server}/s/demo-side-by-side/?PROLIFIC_PID=pair-worker&STUDY_ID=st&SESSION_ID=se")
        consent(page)
        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#conn.ok", timeout=15_000)
        assert page.locator(".pair-side").count() == 2
        assert page.locator("#end-session").is_disabled()
        seq = send(page, "Hello, I have a cat called Miso.", 1)
        assert page.locator("#end-session").is_disabled()  # the minimum is two answered turns on both sides
        seq = send(page, "Miso likes to sleep on my keyboard.", seq)
        for side in ("a", "b"):  # both bots answered both messages
            assert page.locator(f'.pair-side[data-side="{side}"] .msg.bot[data-status="complete"]').count() == 2
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "side-by-side-1-chat.png"), full_page=True)
        page.click("#end-session")
        vote(page, "a", "A answered more naturally.")

        page.wait_for_url("**/wait/")
        page.click("#start-session", timeout=60_000)
        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#conn.ok", timeout=15_000)
        for side in ("a", "b"):  # each bot's opener of session 2 (the echo's fails: then its Retry button)
            page.wait_for_selector(f'#{side}-msg-1:not([data-status="pending"])', timeout=30_000)
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: the bots stacked
        a_box = page.locator('.pair-side[data-side="a"]').bounding_box()
        b_box = page.locator('.pair-side[data-side="b"]').bounding_box()
        assert a_box and b_box and b_box["y"] >= a_box["y"] + a_box["height"] - 1
        page.screenshot(path=str(ARTIFACTS / "side-by-side-2-phone.png"), full_page=True)
        seq = send(page, "Do you remember my cat?", 2)
        seq = send(page, "She is three years old now.", seq)
        page.click("#end-session")
        vote(page, "tie", "Both were about as good.")
        page.wait_for_url("**/done/")
        assert "SIDE1234" in page.content()

        text = " ".join(frames)
        for name in ARM_NAMES:  # blinding: no arm in any socket message
            assert name not in text, name
        assert '"side": "a"' in text and '"side": "b"' in text

        page.goto(f"{server}/studies/demo-side-by-side/analysis/pairwise/")
        log_in(page, "rita", "pw")
        page.wait_for_url("**/analysis/pairwise/")
        sources = page.locator("#pairwise-sources").inner_text()
        assert "0 ACUTE-Eval, 5 live side by side" in " ".join(sources.split())  # 3 earlier and this worker's 2
        table = page.locator("#pairwise-table").inner_text()
        assert "No memory" in table and "Full history" in table
        page.screenshot(path=str(ARTIFACTS / "side-by-side-3-leaderboard.png"), full_page=True)
        page.goto(f"{server}/studies/demo-side-by-side/analysis/")
        plot = page.locator("#pairwise-plot")
        assert plot.is_visible() and plot.evaluate("img => img.naturalWidth > 100")
        assert not errors, errors
        browser.close()
