"""A memory update whose retry time ran out waits for a person (issue 27, item 7): the worker's next session does
not start on a memory that lacks the session; the study page lists the update with "Retry now" and "Skip this
session's memory update" for the study's owner and editors (a viewer gets 403); the decision is recorded with who
and when, and the worker's waiting page says in plain words what is happening."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat import arms, memory_updates
from chat.models import ChatSession, Episode, MemorySnapshot
from chat.tests.conftest import ended, ratings
from runtime.models import Job
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """The arm's end-of-session update fails while ``broken["on"]`` (its retries included)."""
    switch = {"on": True}
    real_build = arms.build_arm

    def build(arm: Any, **kwargs: Any) -> Any:
        system, llm = real_build(arm, **kwargs)
        if switch["on"]:

            def fail(*args: Any) -> Any:
                raise ValueError("the model returned nonsense")

            system.end_session = fail  # type: ignore[method-assign]
        return system, llm

    monkeypatch.setattr(arms, "build_arm", build)
    return switch


@pytest.fixture
def failed(client: Client, study: Study, broken: dict[str, bool], script: Any) -> MemorySnapshot:
    """Session 1 of a worker on the full-history arm, ended and rated; its memory update failed for good."""
    script(["Nice."])
    study.arms.filter(memory_system="none").update(active=False)
    session = ended(client, study)
    assert client.post(f"/chat/{session.pk}/rate/", ratings(session)).status_code == 302
    snap = MemorySnapshot.objects.get(session=session)
    assert snap.status == MemorySnapshot.Status.FAILED and "nonsense" in snap.error
    return snap


def next_session(snap: MemorySnapshot) -> ChatSession:
    return ChatSession.objects.get(episode_id=snap.session.episode_id, index=snap.session.index + 1)


def decide(researcher: User, study: Study, snap: MemorySnapshot, action: str) -> Any:
    client = Client()
    client.force_login(researcher)
    return client.post(reverse("studies:memory_decision", args=[study.slug, snap.pk, action]))


def test_the_next_session_does_not_start_without_the_update_and_the_wait_page_says_why(
    client: Client, failed: MemorySnapshot
) -> None:
    nxt = next_session(failed)
    assert nxt.status == ChatSession.Status.PREPARING
    assert client.get(f"/chat/{nxt.pk}/").url == f"/chat/{nxt.pk}/wait/"  # the session page does not open it
    page = client.get(f"/chat/{nxt.pk}/wait/").content.decode()
    assert 'id="wait-reason"' in page and "the study team has been told" in page and 'id="start-session"' not in page
    poll = client.get(f"/chat/{nxt.pk}/wait/", headers={"HX-Request": "true"}).content.decode()
    assert "every 1s" in poll and "the study team has been told" in poll  # it keeps polling
    nxt.refresh_from_db()
    assert nxt.status == ChatSession.Status.PREPARING  # the waiting page's own recovery does not let it go either


def test_a_failing_attempt_tells_the_worker_it_takes_longer_than_usual(client: Client, failed: MemorySnapshot) -> None:
    MemorySnapshot.objects.filter(pk=failed.pk).update(status=MemorySnapshot.Status.PENDING)  # between attempts
    page = client.get(f"/chat/{next_session(failed).pk}/wait/").content.decode()
    assert "taking longer than usual" in page


def test_the_owner_sees_the_update_with_both_buttons(researcher: User, study: Study, failed: MemorySnapshot) -> None:
    client = Client()
    client.force_login(researcher)
    page = client.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert f'id="memory-decision-{failed.pk}"' in page and "nonsense" in page
    assert ">Retry now</button>" in page and "Skip this session's memory update</button>" in page
    assert Job.objects.of("chat.memory_update", failed.session_id).get().status == Job.Status.FAILED


def test_retry_now_runs_the_update_again_and_the_next_session_starts_on_it(
    owner: User, study: Study, failed: MemorySnapshot, broken: dict[str, bool]
) -> None:
    study.shared_with.add(owner)  # an editor
    broken["on"] = False  # the endpoint was fixed
    assert decide(owner, study, failed, "retry").status_code == 302
    failed.refresh_from_db()
    assert failed.status == MemorySnapshot.Status.DONE
    assert [(d["action"], d["by"], d["user_id"]) for d in failed.decisions] == [("retry", owner.username, owner.pk)]
    assert failed.decisions[0]["at"]
    assert next_session(failed).status == ChatSession.Status.READY
    state = Episode.objects.get(pk=failed.session.episode_id).memory_state
    assert state == failed.state and state  # the memory after session 1, with it


def test_a_retry_that_fails_again_waits_again(researcher: User, study: Study, failed: MemorySnapshot) -> None:
    assert decide(researcher, study, failed, "retry").status_code == 302
    failed.refresh_from_db()
    assert failed.status == MemorySnapshot.Status.FAILED and len(failed.decisions) == 1
    assert next_session(failed).status == ChatSession.Status.PREPARING
    assert Job.objects.of("chat.memory_update", failed.session_id).count() == 2  # a new job, the old one kept
    assert memory_updates.waiting_for_decision(study.pk) == [failed]


def test_skip_lets_the_next_session_start_on_the_memory_before_and_records_who_and_when(
    researcher: User, study: Study, failed: MemorySnapshot
) -> None:
    before = Episode.objects.get(pk=failed.session.episode_id).memory_state
    assert decide(researcher, study, failed, "skip").status_code == 302
    failed.refresh_from_db()
    assert failed.status == MemorySnapshot.Status.SKIPPED and failed.state == before
    assert [(d["action"], d["by"]) for d in failed.decisions] == [("skip", researcher.username)]
    assert next_session(failed).status == ChatSession.Status.READY
    assert memory_updates.waiting_for_decision(study.pk) == []
    client = Client()
    client.force_login(researcher)
    episode = client.get(reverse("studies:episode", args=[study.slug, failed.session.episode_id])).content.decode()
    assert f"skipped by {researcher.username}" in episode and "lacks this session" in episode


def test_a_viewer_gets_403_and_sees_no_button(other: User, study: Study, failed: MemorySnapshot) -> None:
    study.viewers.add(other)
    client = Client()
    client.force_login(other)
    page = client.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert (
        f'id="memory-decision-{failed.pk}"' in page
        and "</button>" not in page.split("memory-decisions")[1].split("</table>")[0]
    )
    assert "the owner or an editor decides" in page
    for action in ("retry", "skip"):
        assert decide(other, study, failed, action).status_code == 403
    failed.refresh_from_db()
    assert (failed.status, failed.decisions) == (MemorySnapshot.Status.FAILED, [])
    assert next_session(failed).status == ChatSession.Status.PREPARING


def test_a_decision_on_an_update_not_waiting_or_of_another_study_changes_nothing(
    researcher: User, other: User, study: Study, failed: MemorySnapshot
) -> None:
    assert decide(researcher, study, failed, "skip").status_code == 302
    client = Client()
    client.force_login(researcher)
    response = client.post(reverse("studies:memory_decision", args=[study.slug, failed.pk, "retry"]), follow=True)
    assert "not waiting for a decision" in response.content.decode()
    failed.refresh_from_db()
    assert failed.status == MemorySnapshot.Status.SKIPPED and len(failed.decisions) == 1
    elsewhere = Study.objects.create(name="Other", created_by=researcher)
    assert decide(researcher, elsewhere, failed, "skip").status_code == 404
    assert decide(researcher, study, failed, "forget").status_code == 404
