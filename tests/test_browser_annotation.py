"""An annotator in headless Chromium labels operation pairs with the keyboard and edits a summary.

Runs against pytest-django's live server (no websocket needed). Screenshots go to artifacts/ for a
human to look at: the workspace should be fast to use for hours.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from annotation import services
from annotation.models import Label, Queue
from annotation.sources import add_items

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _keys_ready(page: Any) -> None:
    """Until the workspace's script has bound its keys: it is deferred, so the page shows (and the test
    could press a key) a moment before (static/js/annotation.js marks the form when done)."""
    page.locator("#ann-form[data-ready]").wait_for(state="attached")


ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"]

MEMORY = ["Couldn't sleep well", "Has a dog", "Back hurts but hasn't seen a doctor yet", "Lives alone"]
SUMMARY = [
    "Sleeping well after taking sleeping tablets",
    "The dog likes carrots",
    "Receiving physiotherapy at the hospital",
]
TRANSCRIPT = [
    {"speaker": "bot", "text": "Hello! How have you been sleeping lately?"},
    {"speaker": "user", "text": "Much better, the doctor gave me sleeping tablets."},
    {"speaker": "bot", "text": "That's good to hear. How is your dog?"},
    {"speaker": "user", "text": "He's great, he loves carrots now, funny dog."},
    {"speaker": "bot", "text": "And your back?"},
    {"speaker": "user", "text": "I'm getting physiotherapy at the hospital twice a week."},
]


def pair(i: int, j: int) -> dict[str, Any]:
    return {
        "unit": "episode-1-session-2",
        "payload": {
            "m": MEMORY[i],
            "s": SUMMARY[j],
            "i": i,
            "j": j,
            "memory_before": MEMORY,
            "summary": SUMMARY,
            "transcript": TRANSCRIPT,
            "operator_op": "APPEND",
        },
        "meta": {"arm": "memory_update (secret)"},
    }


@pytest.fixture
def browser_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        yield page
        browser.close()


def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"annotation-{name}.png"), full_page=True)


def test_an_annotator_labels_pairs_with_the_keyboard_and_edits_a_summary(
    live_server, annotator, researcher, browser_page
):
    pairs = Queue.objects.create(
        name="Memory operations, study 1",
        kind=Queue.Kind.PAIRS,
        labels_per_item=3,
        instructions="Label each pair of a memory sentence m and a new summary sentence s.",
    )
    add_items(pairs, [pair(0, 0), pair(1, 1), pair(2, 2)])
    summaries = Queue.objects.create(name="Session summaries", kind=Queue.Kind.SUMMARIES, summary_mode=Queue.Mode.CHAIN)
    add_items(
        summaries,
        [
            {
                "payload": {
                    "summary": ["Sleeps well with tablets.", "Had three eggs for breakfast.", "Dog likes carrots."],
                    "transcript": TRANSCRIPT,
                }
            }
        ],
    )
    client = Client()
    client.force_login(annotator)
    page = browser_page
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )

    page.goto(f"{live_server.url}/annotate/")
    page.get_by_text("Memory operations, study 1").wait_for()
    shoot(page, "home")
    page.locator(f"a[href='/annotate/q/{pairs.pk}/']").click()

    # pair 1: REPLACE with key 2, Enter submits
    _keys_ready(page)
    assert page.get_by_test_id("m").inner_text() == "Couldn't sleep well"
    assert "secret" not in page.content()
    page.keyboard.press("2")
    assert page.locator(".ann-op.selected").get_attribute("data-op") == "REPLACE"
    page.get_by_text("Draft saved").wait_for()
    shoot(page, "pair-selected")
    page.set_viewport_size({"width": 390, "height": 844})
    shoot(page, "pair-phone")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.keyboard.press("Enter")
    page.get_by_text("1 done").wait_for()
    _keys_ready(page)

    # pair 2: definitions are one key away; APPEND with key 3
    assert page.get_by_test_id("m").inner_text() == "Has a dog"
    page.keyboard.press("?")
    page.locator("dialog#defs").wait_for(state="visible")
    shoot(page, "definitions")
    page.keyboard.press("Escape")
    page.locator("dialog#defs").wait_for(state="hidden")
    page.keyboard.press("3")
    page.keyboard.press("Enter")
    page.get_by_text("2 done").wait_for()
    _keys_ready(page)

    # pair 3: FUSION with F, the fused sentence autosaves and survives a reload
    page.keyboard.press("f")
    fused = page.locator("#fused_text")
    fused.wait_for(state="visible")
    fused.type("Receiving physiotherapy at the hospital for back pain")
    page.get_by_text("Draft saved").wait_for()
    page.wait_for_timeout(1200)  # let the debounced autosave of the full sentence land
    page.reload()
    _keys_ready(page)
    assert page.locator("#fused_text").input_value() == "Receiving physiotherapy at the hospital for back pain"
    shoot(page, "fusion-restored")
    page.locator("#fused_text").press("Enter")
    page.get_by_text("All done").wait_for()
    shoot(page, "pairs-done")

    # summary editing: correct the generated summary, Ctrl+Enter submits
    page.goto(f"{live_server.url}/annotate/q/{summaries.pk}/")
    text = page.locator("#summary-text")
    _keys_ready(page)
    assert "Had three eggs for breakfast." in text.input_value()
    shoot(page, "summary")
    text.fill(
        "Sleeps well after taking sleeping tablets.\nHas a dog that likes carrots.\nReceiving physiotherapy for back pain."
    )
    text.press("Control+Enter")
    page.get_by_text("All done").wait_for()

    ops = list(Label.objects.filter(item__queue=pairs).order_by("created_at").values_list("op", "fused_text"))
    assert ops == [("REPLACE", ""), ("APPEND", ""), ("FUSION", "Receiving physiotherapy at the hospital for back pain")]
    revision = Label.objects.get(item__queue=summaries)
    assert revision.sentences == [
        "Sleeps well after taking sleeping tablets.",
        "Has a dog that likes carrots.",
        "Receiving physiotherapy for back pain.",
    ]
    assert revision.changed

    # the researcher's view of the same queue
    client.force_login(researcher)
    page.context.clear_cookies()
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )
    page.goto(f"{live_server.url}/annotate/queues/{pairs.pk}/")
    page.get_by_text("Gold labels vs the seed").wait_for()
    shoot(page, "researcher-queue")

    # a 1/1/1 split reaches the adjudication list, where the researcher decides
    split = Queue.objects.create(name="Split votes", kind=Queue.Kind.PAIRS)
    add_items(split, [pair(3, 2)])
    group = Group.objects.get(name="annotators")
    for name, op in [("a1", "APPEND"), ("a2", "DELETE"), ("a3", "PASS")]:
        user = User.objects.create_user(name)
        user.groups.add(group)
        asg = services.claim_next_item(split, user)
        services.submit_label(asg.pk, annotator=user, op=op)
    page.goto(f"{live_server.url}/annotate/queues/{split.pk}/adjudication/")
    page.locator("select[name=label]").select_option("APPEND")
    shoot(page, "adjudication")
    page.get_by_role("button", name="Decide").click()
    page.get_by_text("Decided: APPEND").wait_for()
    item = split.items.get()
    assert (item.gold_label, item.gold_method, item.adjudicated_by_id) == ("APPEND", "adjudicated", researcher.pk)
