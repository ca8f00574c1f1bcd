"""The Django admin: every studies/chat model is registered, pages render, evidence is read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from chat.models import ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
from studies.models import Arm, Metric, Participant, Study
from studies.tests.conftest import RenderedForm

pytestmark = pytest.mark.django_db


def test_every_studies_and_chat_model_is_in_the_admin() -> None:
    for model in [Study, Arm, Participant, Episode, ChatSession, Message, Rating, MemorySnapshot, LLMCallRecord]:
        assert admin.site.is_registered(model), model
    assert Metric in [inline.model for inline in admin.site._registry[Study].inlines]


def test_admin_pages_render_for_a_researcher(
    client: Client, researcher: Any, study: Study, finished_episode: Episode
) -> None:
    client.force_login(researcher)
    session = finished_episode.sessions.get(index=1)
    urls = [
        reverse("admin:studies_study_change", args=[study.pk]),
        reverse("admin:chat_episode_change", args=[finished_episode.pk]),
        reverse("admin:chat_chatsession_change", args=[session.pk]),
    ]
    for model in [
        "studies_study",
        "studies_participant",
        "chat_episode",
        "chat_chatsession",
        "chat_message",
        "chat_rating",
        "chat_memorysnapshot",
        "chat_llmcallrecord",
    ]:
        urls.append(reverse(f"admin:{model}_changelist"))
    for url in urls:
        assert client.get(url).status_code == 200, url
    body = client.get(reverse("admin:chat_chatsession_change", args=[session.pk])).content.decode()
    assert "I adopted a cat &lt;b&gt;Miso&lt;/b&gt;." in body


def test_messages_ratings_and_snapshots_cannot_be_edited_in_the_admin(
    client: Client, researcher: Any, finished_episode: Episode
) -> None:
    client.force_login(researcher)
    message = Message.objects.filter(session__episode=finished_episode).first()
    assert message is not None
    response = client.post(reverse("admin:chat_message_change", args=[message.pk]), {"text": "rewritten"})
    assert response.status_code == 403
    message.refresh_from_db()
    assert message.text != "rewritten"
    assert client.get(reverse("admin:chat_rating_add")).status_code == 403
    snapshot = MemorySnapshot.objects.get(session__episode=finished_episode)
    assert (
        client.post(reverse("admin:chat_memorysnapshot_delete", args=[snapshot.pk]), {"post": "yes"}).status_code == 403
    )
    assert MemorySnapshot.objects.filter(pk=snapshot.pk).exists()


def test_the_admin_rejects_unknown_arm_parameters(client: Client, researcher: Any, study: Study) -> None:
    study.status = Study.Status.DRAFT  # an open study's arm configuration is read-only in the admin
    study.save()
    client.force_login(researcher)
    arm = study.arms.get(memory_system="full_history")
    data = {
        "study": study.pk,
        "name": arm.name,
        "memory_system": "full_history",
        "params": '{"bogus": 1}',
        "llm_backend": "scripted",
        "llm_model": "",
        "active": "on",
    }
    response = client.post(reverse("admin:studies_arm_change", args=[arm.pk]), data)
    assert response.status_code == 200
    assert "Unknown parameter(s) for full_history: bogus" in response.content.decode()


def test_annotators_cannot_open_the_admin(client: Client, annotator: Any) -> None:
    client.force_login(annotator)
    response = client.get(reverse("admin:chat_message_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_admin_also_freezes_the_design_once_workers_started(
    client: Client, researcher: Any, study: Study, finished_episode: Episode
) -> None:
    client.force_login(researcher)
    response = client.get(reverse("admin:studies_study_change", args=[study.pk]))
    form = response.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k not in {"simulated_start", "created_by"}}
    data.update(
        {
            "simulated_start_0": study.simulated_start.strftime("%Y-%m-%d"),
            "simulated_start_1": study.simulated_start.strftime("%H:%M:%S"),
            "sessions_per_episode": 4,
            "created_by": researcher.pk,
        }
    )
    for prefix in ("arms", "metrics"):
        data.update({f"{prefix}-TOTAL_FORMS": 0, f"{prefix}-INITIAL_FORMS": 0})
    response = client.post(reverse("admin:studies_study_change", args=[study.pk]), data)
    assert response.status_code == 200
    assert "Workers have already started episodes" in response.content.decode()
    study.refresh_from_db()
    assert study.sessions_per_episode == 2


def _admin_study_post(client: Client, study: Study, **changes: Any) -> Any:
    """Post the admin's change form of ``study`` as shown, with ``changes`` on top."""
    response = client.get(reverse("admin:studies_study_change", args=[study.pk]))
    form = response.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k not in {"simulated_start", "created_by"}}
    data.update(
        {
            "simulated_start_0": study.simulated_start.strftime("%Y-%m-%d"),
            "simulated_start_1": study.simulated_start.strftime("%H:%M:%S"),
            "created_by": study.created_by_id,
            **changes,
        }
    )
    for prefix in ("arms", "metrics", "attention_checks"):
        data.update({f"{prefix}-TOTAL_FORMS": 0, f"{prefix}-INITIAL_FORMS": 0})
    return client.post(reverse("admin:studies_study_change", args=[study.pk]), data)


def test_the_admin_cannot_open_a_study_whose_arms_are_not_ready(client: Client, researcher: Any, study: Study) -> None:
    # the study page refuses to open it (no arm passed its readiness checks) unless as a marked pilot
    study.status = Study.Status.DRAFT
    study.save()
    client.force_login(researcher)
    response = _admin_study_post(client, study, status=Study.Status.OPEN, name="Renamed")
    assert response.status_code == 302
    study.refresh_from_db()
    assert study.name == "Renamed"  # the rest of the form was saved
    assert study.status == Study.Status.DRAFT and not study.pilot


def test_the_admin_cannot_clear_a_pilots_mark(client: Client, researcher: Any, study: Study) -> None:
    study.pilot = True
    study.save()
    client.force_login(researcher)
    assert _admin_study_post(client, study, pilot="").status_code == 302
    study.refresh_from_db()
    assert study.pilot and study.status == Study.Status.OPEN


def test_the_arms_of_an_open_study_cannot_turn_unready_in_the_admin(
    client: Client, researcher: Any, study: Study
) -> None:
    client.force_login(researcher)
    arm = study.arms.get(memory_system="full_history")
    data = {
        "study": study.pk,
        "name": "Renamed arm",
        "memory_system": "rsum",
        "params": "{}",
        "llm_backend": "scripted",
        "llm_model": "other",
        "active": "",
    }
    assert client.post(reverse("admin:studies_arm_change", args=[arm.pk]), data).status_code == 302
    arm.refresh_from_db()
    assert arm.name == "Renamed arm"
    assert (arm.memory_system, arm.llm_model, arm.active) == ("full_history", "", True)
    # no new (unchecked) arm for it either
    inline = client.get(reverse("admin:studies_study_change", args=[study.pk])).context["inline_admin_formsets"][0]
    assert not inline.has_add_permission


def test_a_pilot_or_closed_studys_arms_stay_editable_in_the_admin(
    client: Client, researcher: Any, study: Study
) -> None:
    study.pilot = True
    study.save()
    client.force_login(researcher)
    arm = study.arms.get(memory_system="full_history")
    form = client.get(reverse("admin:studies_arm_change", args=[arm.pk])).context["adminform"].form
    assert {"memory_system", "params", "active"} <= set(form.fields)


def test_arms_are_added_only_on_their_studys_page_or_inline_not_on_a_studyless_admin_page(
    client: Client, researcher: Any, study: Study
) -> None:
    # the arm's own add page had no study field and answered 500 (NOT NULL study_id) on save
    client.force_login(researcher)
    post = {"name": "X", "memory_system": "rsum", "params": "{}", "llm_backend": "scripted", "active": "on"}
    assert client.post(reverse("admin:studies_arm_add"), {"study": study.pk, **post}).status_code == 403
    assert study.arms.count() == 2


def test_the_admins_study_and_arm_filters_name_only_those_the_researcher_may_see(client: Client, study: Study) -> None:
    from django.contrib.auth.models import Permission, User

    bob = User.objects.create_user("bob", password="pw", is_staff=True)
    bob.user_permissions.set(Permission.objects.filter(content_type__app_label="studies"))
    Study.objects.create(name="Bobs own study", created_by=bob).arms.create(name="B", memory_system="none")
    client.force_login(bob)
    body = client.get(reverse("admin:studies_arm_changelist")).content.decode()
    assert "Bobs own study" in body and study.name not in body
    bob.user_permissions.add(*Permission.objects.filter(content_type__app_label="chat"))
    for model in ("studies_participant", "chat_episode", "chat_chatsession", "chat_rating"):
        body = client.get(reverse(f"admin:{model}_changelist")).content.decode()
        assert study.name not in body and "No memory" not in body, model  # nor another study's arm names


def _delete_selected(client: Client, model: str, pks: list[int]) -> Any:
    return client.post(
        reverse(f"admin:studies_{model}_changelist"),
        {"action": "delete_selected", "_selected_action": [str(pk) for pk in pks], "post": "yes"},
        follow=True,
    )


def _shown_messages(response: Any) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def test_the_admins_delete_selected_refuses_to_delete_the_arms_of_an_open_study(
    client: Client, researcher: Any, study: Study
) -> None:
    # the study has no episodes yet, so nothing protects its arms but this guard
    client.force_login(researcher)
    pks = list(study.arms.values_list("pk", flat=True))
    response = _delete_selected(client, "arm", pks)
    assert response.status_code == 200
    assert "Not deleted: the study of “No memory (none)”, “Full history (full_history)” is open" in _shown_messages(
        response
    )
    assert study.arms.count() == 2


def test_the_admins_single_delete_refuses_an_arm_of_an_open_study_with_a_message(
    client: Client, researcher: Any, study: Study
) -> None:
    client.force_login(researcher)
    arm = study.arms.get(memory_system="none")
    change = client.get(reverse("admin:studies_arm_change", args=[arm.pk]))
    assert not change.context["has_delete_permission"]  # no Delete link to follow
    response = client.post(reverse("admin:studies_arm_delete", args=[arm.pk]), {"post": "yes"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:studies_arm_change", args=[arm.pk])
    assert "Close the study first" in _shown_messages(response)
    assert Arm.objects.filter(pk=arm.pk).exists()


def test_the_studys_inline_offers_no_delete_box_for_the_arms_of_an_open_study(
    client: Client, researcher: Any, study: Study
) -> None:
    client.force_login(researcher)
    inline = client.get(reverse("admin:studies_study_change", args=[study.pk])).context["inline_admin_formsets"][0]
    assert not inline.formset.can_delete


def test_the_admin_refuses_to_delete_an_open_study_and_with_it_its_arms(
    client: Client, researcher: Any, study: Study
) -> None:
    client.force_login(researcher)
    response = _delete_selected(client, "study", [study.pk])
    assert "Not deleted: “Test study” is open (not a pilot)" in _shown_messages(response)
    response = client.post(reverse("admin:studies_study_delete", args=[study.pk]), {"post": "yes"}, follow=True)
    assert "Close the study first" in _shown_messages(response)
    assert Study.objects.filter(pk=study.pk).exists() and study.arms.count() == 2


@pytest.mark.parametrize("change", [{"pilot": True}, {"status": Study.Status.CLOSED}])
def test_the_arms_of_a_pilot_or_closed_study_can_still_be_deleted_in_the_admin(
    client: Client, researcher: Any, study: Study, change: dict[str, Any]
) -> None:
    Study.objects.filter(pk=study.pk).update(**change)
    client.force_login(researcher)
    arm = study.arms.get(memory_system="none")
    response = _delete_selected(client, "arm", [arm.pk])
    assert "Successfully deleted 1 arm." in _shown_messages(response)
    response = client.post(
        reverse("admin:studies_arm_delete", args=[study.arms.get().pk]), {"post": "yes"}, follow=True
    )
    assert response.status_code == 200 and not study.arms.exists()


def test_saving_an_episode_in_the_admin_never_rewinds_its_memory_state_or_version(
    client: Client, researcher: Any, finished_episode: Episode
) -> None:
    # chat.state caches parsed states by (episode, state_version): a version written back by a form that
    # was opened before the last reply would name two contents, and a process would serve the stale one
    from chat import state

    client.force_login(researcher)
    url = reverse("admin:chat_episode_change", args=[finished_episode.pk])
    page = client.get(url).content.decode()
    assert 'name="state_version"' not in page  # shown, not editable
    start = Episode.objects.values_list("state_version", flat=True).get(pk=finished_episode.pk)
    assert state.write(finished_episode.pk, {"facts": ["after the form was opened"]}, start)  # a reply's update
    form = {
        "status": Episode.Status.ABANDONED,
        "state_version": str(start),  # what a form opened earlier (or a crafted post) would send
        "completed_at_0": "",
        "completed_at_1": "",
        "sessions-TOTAL_FORMS": "0",
        "sessions-INITIAL_FORMS": "0",
        "sessions-MIN_NUM_FORMS": "0",
        "sessions-MAX_NUM_FORMS": "1000",
    }
    inline = finished_episode.sessions.all()
    form.update({"sessions-TOTAL_FORMS": str(len(inline)), "sessions-INITIAL_FORMS": str(len(inline))})
    for k, s in enumerate(inline):
        form[f"sessions-{k}-id"] = str(s.pk)
        form[f"sessions-{k}-episode"] = str(finished_episode.pk)
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    finished_episode.refresh_from_db()
    assert finished_episode.status == Episode.Status.ABANDONED
    assert finished_episode.state_version == start + 1
    assert finished_episode.memory_state == {"facts": ["after the form was opened"]}


def test_a_reply_update_between_the_admins_read_and_its_save_is_kept(
    client: Client, researcher: Any, finished_episode: Episode, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat import state
    from chat.admin import EpisodeAdmin

    loaded = EpisodeAdmin.get_object

    def read_then_a_reply_writes(self: Any, request: Any, object_id: str, from_field: Any = None) -> Any:
        obj = loaded(self, request, object_id, from_field)
        if request.method == "POST":
            assert state.write(obj.pk, {"facts": ["meanwhile"]}, obj.state_version)
        return obj

    monkeypatch.setattr(EpisodeAdmin, "get_object", read_then_a_reply_writes)
    client.force_login(researcher)
    sessions = list(finished_episode.sessions.all())
    form = {"status": Episode.Status.ABANDONED, "completed_at_0": "", "completed_at_1": ""}
    form.update({"sessions-TOTAL_FORMS": str(len(sessions)), "sessions-INITIAL_FORMS": str(len(sessions))})
    form.update({"sessions-MIN_NUM_FORMS": "0", "sessions-MAX_NUM_FORMS": "1000"})
    for k, s in enumerate(sessions):
        form.update({f"sessions-{k}-id": str(s.pk), f"sessions-{k}-episode": str(finished_episode.pk)})
    start = finished_episode.state_version
    response = client.post(reverse("admin:chat_episode_change", args=[finished_episode.pk]), form)
    assert response.status_code == 302
    finished_episode.refresh_from_db()
    assert finished_episode.status == Episode.Status.ABANDONED
    assert (finished_episode.memory_state, finished_episode.state_version) == ({"facts": ["meanwhile"]}, start + 1)


def test_a_researcher_a_study_is_shared_with_cannot_make_themselves_its_creator_in_the_admin(
    client: Client, owner: Any, other: Any, study: Study
) -> None:
    """Issue 21: in the admin, a researcher a study was shared with could make themselves its creator and lock
    the owner out."""
    from django.contrib.auth.models import Permission

    study.created_by = owner
    study.save()
    study.shared_with.add(other)
    perms = Permission.objects.filter(codename__in=["change_study", "view_study"])
    for user in (owner, other):
        user.user_permissions.add(*perms)
    client.force_login(other)
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = client.get(url).content.decode()
    assert all(f'name="{f}"' not in page for f in ("created_by", "shared_with", "viewers"))
    form = RenderedForm()
    form.feed(page)
    saved = client.post(url, {**form.data, "created_by": str(other.pk), "shared_with": []})
    assert saved.status_code == 302, saved.context["adminform"].form.errors if saved.context else saved  # it saved
    study.refresh_from_db()
    assert study.created_by == owner and list(study.shared_with.all()) == [other]
    client.force_login(owner)
    assert 'name="created_by"' in client.get(url).content.decode()  # the creator still decides
