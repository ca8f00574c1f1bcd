"""Creating and editing a study on the researcher page: arms, parameters, metrics, design rules."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat.models import Episode
from studies.forms import check_params
from studies.models import Participant, Study
from studies.tests.conftest import ARMS, STUDY, RenderedForm, edit_data, formset

pytestmark = pytest.mark.django_db


@pytest.fixture
def rclient(client: Client, researcher: Any) -> Client:
    client.force_login(researcher)
    return client


def post_new(
    rclient: Client,
    study: dict[str, Any] | None = None,
    arms: list[dict[str, Any]] | None = None,
    metrics: list[dict[str, Any]] | None = None,
) -> Any:
    data = {
        **STUDY,
        **(study or {}),
        **formset("arms", ARMS if arms is None else arms),
        **formset("metrics", metrics or []),
    }
    return rclient.post(reverse("studies:create"), {k: v for k, v in data.items() if v is not None})


def test_a_researcher_creates_a_study_with_arms_and_the_default_metrics(rclient: Client, researcher: Any) -> None:
    response = post_new(rclient)
    study = Study.objects.get(name="Memory pilot")
    assert response.status_code == 302 and response["Location"] == study.get_absolute_url()
    assert study.status == Study.Status.DRAFT and study.created_by == researcher
    assert [(a.name, a.memory_system, a.params) for a in study.arms.all()] == [
        ("No memory", "none", {}),
        ("Full", "full_history", {"max_history_tokens": 900}),
    ]
    assert study.arms.get(name="Full").llm_model == "gpt-4o-mini"
    assert [m.key for m in study.metrics.all()] == [
        "coherence",
        "consistency",
        "engagingness",
        "humanness",
        "memorability",
    ]


def test_a_study_can_have_its_own_metric_instead_of_the_defaults(rclient: Client) -> None:
    metric = {
        "key": "fun",
        "statement": "Chatting was fun.",
        "low_label": "No fun",
        "high_label": "Great fun",
        "reversed": True,
        "order": 0,
    }
    post_new(rclient, study={"add_default_metrics": None}, metrics=[metric])
    m = Study.objects.get(name="Memory pilot").metrics.get()
    assert (m.key, m.statement, m.low_label, m.high_label, m.reversed) == (
        "fun",
        "Chatting was fun.",
        "No fun",
        "Great fun",
        True,
    )


def test_it_rejects_unknown_parameters_with_a_clear_message(rclient: Client) -> None:
    arms = [ARMS[0], {**ARMS[1], "params": '{"max_history_tokens": 900, "windw": 3}'}]
    response = post_new(rclient, arms=arms)
    assert response.status_code == 400
    assert "Unknown parameter(s) for full_history: windw. Known: max_history_tokens." in response.content.decode()
    assert not Study.objects.filter(name="Memory pilot").exists()


def test_it_rejects_parameters_that_are_not_a_json_object(rclient: Client) -> None:
    response = post_new(rclient, arms=[ARMS[0], {**ARMS[1], "params": "[1, 2]"}])
    assert response.status_code == 400
    assert "Parameters must be a JSON object" in response.content.decode()
    response = post_new(rclient, arms=[ARMS[0], {**ARMS[1], "params": "{not json"}])
    assert response.status_code == 400


def test_parameter_types_must_match_the_defaults() -> None:
    assert check_params("full_history", {"max_history_tokens": 500}) == {"max_history_tokens": 500}
    with pytest.raises(Exception, match="max_history_tokens must be a int"):
        check_params("full_history", {"max_history_tokens": "lots"})
    with pytest.raises(Exception, match="this system has no parameters"):
        check_params("none", {"k": 1})


def test_episodes_per_worker_cannot_exceed_the_active_arms(rclient: Client) -> None:
    arms = [ARMS[0], {**ARMS[1], "active": False}]
    response = post_new(rclient, arms=arms)
    assert response.status_code == 400
    assert "2 episodes per worker need at least 2 active arms" in response.content.decode()
    assert not Study.objects.filter(name="Memory pilot").exists()
    assert post_new(rclient, study={"episodes_per_worker": 1}, arms=arms).status_code == 302


def test_a_study_needs_at_least_one_metric(rclient: Client) -> None:
    response = post_new(rclient, study={"add_default_metrics": None})
    assert response.status_code == 400
    assert "Add at least one metric" in response.content.decode()


def test_slider_design_fields_are_validated(rclient: Client) -> None:
    response = post_new(rclient, study={"sessions_per_episode": 0, "gap_days": -1})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "sessions_per_episode" in errors and "gap_days" in errors


def _episode(study: Study) -> Episode:
    p = Participant.objects.create(study=study, external_id="w1", source="invite")
    return Episode.objects.create(participant=p, arm=study.arms.get(memory_system="full_history"), index=1)


def test_editing_a_study_updates_its_fields_and_adds_an_arm(rclient: Client, study: Study) -> None:
    Study.objects.filter(pk=study.pk).update(status=Study.Status.CLOSED)  # an open study gets no new QC arm
    study.refresh_from_db()
    summaries = {"name": "Summaries", "memory_system": "qc", "params": "{}", "active": True}
    data = {**edit_data(study, {}, extra_arms=(summaries,)), "name": "Renamed", "sessions_per_episode": 3}
    response = rclient.post(reverse("studies:edit", args=[study.slug]), data)
    assert response.status_code == 302
    study.refresh_from_db()
    assert study.name == "Renamed" and study.sessions_per_episode == 3
    assert study.arms.count() == 3 and study.arms.get(name="Summaries").is_qc


def test_an_arm_with_episodes_cannot_change_its_memory_system(rclient: Client, study: Study) -> None:
    _episode(study)
    response = rclient.post(reverse("studies:edit", args=[study.slug]), edit_data(study, {"memory_system": "none"}))
    assert response.status_code == 400
    assert "This arm already has episodes: its memory_system cannot change" in response.content.decode()
    assert study.arms.filter(memory_system="full_history").exists()


def test_an_arm_with_episodes_cannot_be_deleted_but_can_be_deactivated(rclient: Client, study: Study) -> None:
    _episode(study)
    study.arms.create(name="Third", memory_system="none")  # two arms stay active for 2 episodes per worker
    url = reverse("studies:edit", args=[study.slug])
    response = rclient.post(url, edit_data(study, {"DELETE": True}))
    assert response.status_code == 400
    assert "has episodes and cannot be deleted" in response.content.decode()
    response = rclient.post(url, edit_data(study, {"active": False}))
    assert response.status_code == 302
    assert not study.arms.get(memory_system="full_history").active


def test_the_new_study_page_lists_every_memory_system_and_its_parameters(rclient: Client) -> None:
    from memory.registry import MEMORY_SYSTEMS

    body = rclient.get(reverse("studies:create")).content.decode()
    for name, cls in MEMORY_SYSTEMS.items():
        assert f'value="{name}"' in body
        for param in cls.params:
            assert param in body


def test_the_design_is_frozen_once_workers_have_started(rclient: Client, study: Study) -> None:
    _episode(study)
    data = edit_data(study, {})
    data["gap_days"] = 3
    response = rclient.post(reverse("studies:edit", args=[study.slug]), data)
    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["gap_days"]
    assert "Workers have already started episodes" in response.content.decode()
    data["gap_days"] = study.gap_days
    data["min_user_turns"] = 8  # not part of the design the data depend on
    assert rclient.post(reverse("studies:edit", args=[study.slug]), data).status_code == 302
    study.refresh_from_db()
    assert study.min_user_turns == 8


def test_two_arms_of_a_study_cannot_share_a_name(rclient: Client) -> None:
    response = post_new(rclient, arms=[ARMS[0], {**ARMS[1], "name": "No memory"}])
    assert response.status_code == 400
    assert "Please correct the duplicate data for name" in response.content.decode()


def test_deactivating_an_arm_is_refused_when_too_few_would_remain(rclient: Client, study: Study) -> None:
    _episode(study)
    response = rclient.post(reverse("studies:edit", args=[study.slug]), edit_data(study, {"active": False}))
    assert response.status_code == 400
    assert "2 episodes per worker need at least 2 active arms" in response.content.decode()


def test_a_longest_gap_shorter_than_the_shortest_is_refused(rclient: Client) -> None:
    response = post_new(rclient, study={"gap_days": 10, "gap_max_days": 5})
    assert response.status_code == 400
    assert "at least the shortest" in str(response.context["form"].errors["gap_max_days"])


def test_the_gap_range_and_the_bot_opener_are_part_of_the_frozen_design(rclient: Client, study: Study) -> None:
    _episode(study)
    data = edit_data(study, {})
    data["gap_max_days"] = 21
    data.pop("bot_opens_sessions", None)
    response = rclient.post(reverse("studies:edit", args=[study.slug]), data)
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"gap_max_days", "bot_opens_sessions"}


def test_the_turn_limit_cannot_be_below_the_minimum_of_user_turns(rclient: Client) -> None:
    response = post_new(rclient, study={"min_user_turns": 5, "max_turns_per_session": 3})
    assert response.status_code == 400
    assert "Must be at least the minimum of 5 user turns." in response.content.decode()
    assert post_new(rclient, study={"min_user_turns": 5, "max_turns_per_session": 5}).status_code == 302


def test_saving_an_open_study_as_rendered_ignores_the_blank_extra_arm_row(rclient: Client, study: Study) -> None:
    url = reverse("studies:edit", args=[study.slug])
    form = RenderedForm()
    form.feed(rclient.get(url).content.decode())
    assert form.data["arms-TOTAL_FORMS"] == "3" and form.data["arms-2-params"] == "{}"  # the blank extra row
    form.data["name"] = "Renamed"
    response = rclient.post(url, form.data)
    assert response.status_code == 302, response.content.decode()
    study.refresh_from_db()
    assert study.name == "Renamed" and study.status == Study.Status.OPEN and study.arms.count() == 2


def test_a_blank_arm_row_with_parameters_typed_in_is_still_checked(rclient: Client, study: Study) -> None:
    url = reverse("studies:edit", args=[study.slug])
    form = RenderedForm()
    form.feed(rclient.get(url).content.decode())
    form.data["arms-2-params"] = '{"k": 3'
    response = rclient.post(url, form.data)
    assert response.status_code == 400 and study.arms.count() == 2


def test_the_arm_form_says_which_backend_and_model_an_empty_field_means_on_this_site(
    rclient: Client, settings: Any
) -> None:
    settings.LLM_BACKEND, settings.LLM_MODEL = "local", ""
    body = rclient.get(reverse("studies:create")).content.decode()
    assert "Empty = the site&#x27;s LLM_BACKEND, now local." in body
    assert "Empty = the site&#x27;s LLM_MODEL, now SmolLM2-135M-Instruct on local." in body


@pytest.mark.parametrize(
    "status, pilot", [(Study.Status.OPEN, False), (Study.Status.OPEN, True), (Study.Status.CLOSED, False)]
)
def test_an_arm_without_episodes_is_deleted_only_when_the_study_is_not_open_for_real(
    rclient: Client, study: Study, status: str, pilot: bool
) -> None:
    Study.objects.filter(pk=study.pk).update(status=status, pilot=pilot)
    study.refresh_from_db()
    study.arms.create(name="Third", memory_system="none", llm_backend="scripted")
    response = rclient.post(reverse("studies:edit", args=[study.slug]), edit_data(study, {"DELETE": True}))
    refused = status == Study.Status.OPEN and not pilot
    assert response.status_code == (400 if refused else 302)
    assert study.arms.filter(memory_system="full_history").exists() == refused
    if refused:
        assert "cannot be deleted while the study is open" in response.content.decode()


def test_live_side_by_side_needs_two_arms_per_episode_no_qc_arm_and_is_frozen_once_workers_started(
    rclient: Client, study: Study
) -> None:
    response = post_new(rclient, study={"side_by_side": "on"})  # 2 episodes per worker, 2 arms
    assert response.status_code == 400
    assert "2 episode(s) per worker need 4 active arms" in response.content.decode()
    qc = {"name": "Summaries", "memory_system": "qc", "params": "{}", "active": True}
    response = post_new(rclient, study={"side_by_side": "on", "episodes_per_worker": 1}, arms=[*ARMS, qc])
    assert response.status_code == 400 and "draws no quality-control arm" in response.content.decode()
    assert post_new(rclient, study={"side_by_side": "on", "episodes_per_worker": 1}).status_code == 302
    assert Study.objects.get(name="Memory pilot").side_by_side
    _episode(study)
    data = edit_data(study, {})
    data["side_by_side"] = "on"
    response = rclient.post(reverse("studies:edit", args=[study.slug]), data)
    assert response.status_code == 400
    assert "Workers have already started episodes" in str(response.context["form"].errors["side_by_side"])
