"""The study form's worker-quality part (issue 9): the QC arm like any arm, its design rules, attention checks,
timing and paste settings."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from studies.forms import qc_design_problem
from studies.models import Study
from studies.tests.conftest import ARMS, STUDY, formset

pytestmark = pytest.mark.django_db

QC = {"name": "QC bot", "memory_system": "qc", "params": "{}", "llm_backend": "", "llm_model": "", "active": True}
CHECK = {"statement": "Please set this slider to 80.", "target": 80, "tolerance": 5, "position": 2,
         "low_label": "Strongly disagree", "high_label": "Strongly agree"}  # fmt: skip


@pytest.fixture
def rclient(client: Client, researcher: Any) -> Client:
    client.force_login(researcher)
    return client


def post(rclient: Client, study: dict[str, Any] | None = None, arms: Any = None, checks: Any = None) -> Any:
    data = {**STUDY, **(study or {}), **formset("arms", ARMS if arms is None else arms), **formset("metrics", [])}
    if checks is not None:
        data.update(formset("attention", checks))
    return rclient.post(reverse("studies:create"), {k: v for k, v in data.items() if v is not None})


def test_the_qc_arm_is_chosen_like_any_arm_and_marked_qc_automatically(rclient: Client) -> None:
    response = post(rclient, arms=[*ARMS, QC], study={"episodes_per_worker": 3})
    assert response.status_code == 302
    study = Study.objects.get(name="Memory pilot")
    assert study.arms.get(name="QC bot").is_qc and not study.arms.get(name="Full").is_qc
    page = rclient.get(reverse("studies:edit", args=[study.slug])).content.decode()
    assert '<option value="qc"' in page and "is_qc" not in page  # no hand-set checkbox any more


def test_a_qc_arm_needs_two_episodes_per_worker(rclient: Client) -> None:
    response = post(rclient, arms=[ARMS[0], QC], study={"episodes_per_worker": 1})
    assert response.status_code == 400
    assert "at least 2 episodes per worker" in response.content.decode()
    assert not Study.objects.exists()


def test_a_design_where_nobody_could_pass_the_qc_test_is_refused() -> None:
    problem = qc_design_problem(qc_arms=1, episodes_per_worker=2, sessions=1, qc_metrics=1)
    assert "smallest possible p-value" in problem
    assert qc_design_problem(qc_arms=1, episodes_per_worker=2, sessions=3, qc_metrics=5) == ""
    assert "at most one" in qc_design_problem(qc_arms=2, episodes_per_worker=3, sessions=3, qc_metrics=5)


def test_attention_checks_and_timing_settings_are_saved_with_the_study(rclient: Client) -> None:
    settings = {"estimated_minutes": 30, "session_time_limit_minutes": 12, "abandon_after_minutes": 90,
                "block_paste": True, "prolific_decline_code": "C0NSENTNO"}  # fmt: skip
    response = post(rclient, study=settings, checks=[CHECK, {**CHECK, "position": 4, "target": 15}])
    assert response.status_code == 302, response.content.decode()[:2000]
    study = Study.objects.get(name="Memory pilot")
    assert (study.estimated_time_minutes, study.session_time_limit_minutes, study.abandon_after_minutes) == (30, 12, 90)
    assert study.block_paste and "cc=C0NSENTNO" in study.decline_url()
    assert [(c.position, c.target) for c in study.attention_checks.all()] == [(2, 80), (4, 15)]


def test_an_attention_check_after_the_last_session_or_with_a_huge_tolerance_is_refused(rclient: Client) -> None:
    late = post(rclient, checks=[{**CHECK, "position": 99}])  # 3 sessions x 2 episodes = 6
    assert late.status_code == 400 and "placed after session 99" in late.content.decode()
    loose = post(rclient, checks=[{**CHECK, "tolerance": 50}])
    assert loose.status_code == 400 and "lets almost any slider position pass" in loose.content.decode()


def test_a_form_posted_without_the_new_fields_keeps_their_defaults(rclient: Client) -> None:
    assert post(rclient).status_code == 302
    study = Study.objects.get(name="Memory pilot")
    assert study.abandon_after_minutes == 120 and not study.block_paste and study.session_time_limit is None


def _press_add_attention(page: str) -> dict[str, str]:
    """The form a browser posts after "Add an attention check" (the page's script clones the template row with
    the next form number and bumps TOTAL_FORMS) when the researcher changes nothing in the new row."""
    from studies.tests.conftest import RenderedForm

    form = RenderedForm()
    form.feed(page)
    data = dict(form.data)
    total = int(data["attention-TOTAL_FORMS"])
    row = page.split('<template id="attention-empty">', 1)[1].split("</template>", 1)[0]
    added = RenderedForm()
    added.feed(row.replace("__prefix__", str(total)))
    assert f"attention-{total}-statement" in added.data and added.data[f"attention-{total}-target"] == "80"
    data.update(added.data)
    data["attention-TOTAL_FORMS"] = str(total + 1)
    return data


def test_an_attention_check_added_and_saved_as_shown_is_saved_on_create(rclient: Client) -> None:
    page = rclient.get(reverse("studies:create")).content.decode()
    data = {**_press_add_attention(page), **{k: str(v) for k, v in STUDY.items()}, **formset("arms", ARMS)}
    response = rclient.post(reverse("studies:create"), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    study = Study.objects.get(name="Memory pilot")
    check = study.attention_checks.get()
    assert (check.target, check.tolerance, check.position) == (80, 5, 2) and "set this slider to 80" in check.statement
    detail = rclient.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert "0 attention check(s)" not in detail and "1 attention check(s)" in detail  # Prolific wants two here


def test_an_attention_check_added_and_saved_as_shown_is_saved_on_edit(rclient: Client, study: Study) -> None:
    url = reverse("studies:edit", args=[study.slug])
    response = rclient.post(url, _press_add_attention(rclient.get(url).content.decode()))
    assert response.status_code == 302, response.content.decode()[:3000]
    assert study.attention_checks.count() == 1
    # the saved check is kept as it is, and a second one added and saved as shown joins it
    assert rclient.post(url, _press_add_attention(rclient.get(url).content.decode())).status_code == 302
    assert study.attention_checks.count() == 2


def test_an_added_attention_check_marked_for_deletion_is_not_saved(rclient: Client, study: Study) -> None:
    url = reverse("studies:edit", args=[study.slug])
    data = _press_add_attention(rclient.get(url).content.decode())
    data["attention-0-DELETE"] = "on"
    assert rclient.post(url, data).status_code == 302
    assert not study.attention_checks.exists()


def test_reply_pacing_is_on_by_default_and_its_schedule_is_saved_with_the_study(rclient: Client) -> None:
    page = rclient.get(reverse("studies:create")).content.decode()
    assert '<option value="True" selected>On:' in page  # the create form offers pacing on
    assert post(rclient).status_code == 302  # a form posted without the pacing fields keeps pacing on
    study = Study.objects.get(name="Memory pilot")
    assert study.pace_replies and (study.pace_min_seconds, study.pace_chars_per_second) == (2.0, 30.0)
    detail = rclient.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert "no sooner than 2 s after the worker's message, then at most 30 characters/s" in detail
    Study.objects.all().delete()
    assert post(rclient, study={"pace_replies": "False", "pace_min_seconds": 0.5}).status_code == 302
    study = Study.objects.get(name="Memory pilot")
    assert not study.pace_replies and study.pace_min_seconds == 0.5


def test_the_pacing_cannot_change_once_workers_have_started(rclient: Client, study: Study) -> None:
    from chat.models import Episode
    from studies.models import Participant
    from studies.tests.conftest import edit_data

    p = Participant.objects.create(study=study, external_id="w", source="invite")
    Episode.objects.create(participant=p, arm=study.arms.first(), index=1)
    response = rclient.post(reverse("studies:edit", args=[study.slug]), {**edit_data(study, {}), "pace_min_seconds": 9})
    assert response.status_code == 400 and "cannot change any more" in response.content.decode()
