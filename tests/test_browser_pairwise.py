"""Judges in headless Chromium: two crowdworkers from the Prolific link judge ACUTE-Eval pairs (two finished
episodes side by side, session by session, every question with a reason); one fails the check pair and is left
out; the researcher's dashboard shows the leaderboard. Screenshots go to artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pairwise.models import Comparison, Judge, Vote
from pairwise.tests.factories import finished_study

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


@pytest.fixture
def browser(chromium: Any) -> Any:
    """The module's Chromium (conftest.py): each test opens its own contexts."""
    return chromium


def judge_all(page: Any, live_server: Any, comparison: Comparison, pid: str, *, fail_check: bool) -> list[bool]:
    """Judge every pair through the pages; returns which pairs were check pairs (told by the database)."""
    page.goto(f"{live_server.url}/p/{comparison.slug}/?PROLIFIC_PID={pid}&STUDY_ID=st&SESSION_ID=se")
    page.get_by_label("I have read the above and agree to take part.").check()
    page.locator("#start").click()
    checks = []
    for n in range(comparison.slots_per_judge):
        page.locator("#acute-form").wait_for()
        assert page.locator(".acute-session[data-side=left] .session-title").count() == 2
        assert page.locator(".acute-session[data-side=right] .session-title").count() == 2
        pair_id = int(page.url.rstrip("/").split("/")[-1])
        from pairwise.models import Judgement

        j = Judgement.objects.select_related("left_arm", "right_arm").get(pk=pair_id)
        checks.append(j.is_check)
        side = "left" if n % 2 == 0 else "right"  # both sides, so the position bias is not total
        if j.is_check:
            qc_side = "left" if j.left_arm.is_qc else "right"
            side = qc_side if fail_check else ("right" if qc_side == "left" else "left")
        text = page.content()
        for arm in (j.left_arm, j.right_arm):  # blind: the judge never sees which arm is which
            assert arm.name not in text and arm.memory_system not in page.locator("#conversations").inner_text()
        if n == 0:
            page.screenshot(path=str(ARTIFACTS / f"acute-pair-{pid}.png"), full_page=True)
            # a reason too short is refused by the browser (minlength) before anything is sent
            page.locator("#submit-pair").click()
            assert page.locator("#acute-form input:invalid").count() > 0
        for q in comparison.questions:
            page.locator(f"#q-{q} input[type=radio][value={side}]").check()
            page.locator(f"#q-{q} input[name=reason_{q}]").fill(f"pair {n + 1}: it remembered my beagle")
        page.locator("#submit-pair").click()
    page.locator("#completion-code").wait_for()
    assert page.locator("#completion-code").inner_text() == comparison.completion_code
    return checks


def test_crowdworkers_judge_acute_pairs_a_failed_check_excludes_one_and_the_dashboard_shows_the_leaderboard(
    browser: Any, live_server: Any, study: Any, researcher: Any
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    finished_study(study, workers=6)
    comparison = Comparison.objects.create(
        study=study, name="Memory ACUTE", status=Comparison.Status.OPEN, pairs_per_judge=3, checks_per_judge=1,
        questions=["engaging", "remembers", "fewer_errors"],
    )  # fmt: skip
    good = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
    assert sum(judge_all(good, live_server, comparison, "GOOD1", fail_check=False)) == 1
    careless = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
    assert sum(judge_all(careless, live_server, comparison, "CARELESS", fail_check=True)) == 1
    third = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
    judge_all(third, live_server, comparison, "GOOD2", fail_check=False)
    assert Judge.objects.get(external_id="GOOD1").passed_checks is True
    assert Judge.objects.get(external_id="CARELESS").passed_checks is False
    assert Vote.objects.count() == 3 * 4 * 3

    # the researcher's dashboard: the leaderboard with its plot, the failed judge left out
    ctx = browser.new_context(viewport={"width": 1300, "height": 1000})
    page = ctx.new_page()
    from django.test import Client

    client = Client()
    client.force_login(researcher)
    ctx.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
    page.goto(f"{live_server.url}/studies/{study.slug}/analysis/")
    plot = page.locator("#pairwise-plot")
    plot.wait_for()
    assert page.evaluate("document.getElementById('pairwise-plot').naturalWidth") > 100  # an SVG was drawn
    page.goto(f"{live_server.url}/studies/{study.slug}/analysis/pairwise/")
    rows = page.locator("#pairwise-table tbody tr")
    assert rows.count() == 3
    assert "by 2 judges" in page.content()  # the careless judge is left out
    page.screenshot(path=str(ARTIFACTS / "acute-leaderboard.png"), full_page=True)


def test_an_annotator_judges_from_the_annotation_page_until_every_pair_of_arms_has_its_target(
    browser: Any, live_server: Any, study: Any, annotator: Any
) -> None:
    from django.test import Client

    from pairwise.models import Judgement

    finished_study(study, workers=3)
    comparison = Comparison.objects.create(
        study=study, name="Annotator ACUTE", audience=Comparison.Audience.ANNOTATORS, status=Comparison.Status.OPEN,
        pairs_per_judge=2, checks_per_judge=1, target_per_pair=1, questions=["remembers"],
    )  # fmt: skip
    client = Client()
    client.force_login(annotator)
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    ctx.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
    page = ctx.new_page()
    page.goto(f"{live_server.url}/annotate/")
    page.locator(f"#comparison-{comparison.pk} a.button").click()
    answered = 0
    while True:
        page.wait_for_selector("#acute-form, #no-more-pairs")
        if page.locator("#no-more-pairs").count():
            break
        j = Judgement.objects.select_related("left_arm", "right_arm").get(pk=int(page.url.rstrip("/").split("/")[-1]))
        side = "right" if j.left_arm.is_qc else "left"  # the real arm on check pairs
        page.locator(f"#q-remembers input[type=radio][value={side}]").check()
        page.locator("#q-remembers input[name=reason_remembers]").fill("asked about the beagle again")
        page.locator("#submit-pair").click()
        answered += 1
        assert answered < 10, "the annotator was never told there is nothing left"
    judge = Judge.objects.get(comparison=comparison, user=annotator)
    real = judge.judgements.filter(is_check=False)
    # three pairs of real arms, one judgement each, plus the check pair at its position
    assert real.count() == 3 and judge.judgements.filter(is_check=True).count() == 1 and answered == 4
    assert len({tuple(sorted((j.left_arm_id, j.right_arm_id))) for j in real}) == 3
    assert judge.passed_checks is True
