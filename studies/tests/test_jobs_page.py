"""The study page's "Background jobs": every job of the study in one place, queued, running with its
progress, waiting to retry with the last attempt's error, failed with its reason."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from runtime import executor, leases, sweeper
from runtime.models import LOST_ERROR, Job
from studies.models import Study
from studies.tests.conftest import arm_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def rclient(client: Client, researcher: Any) -> Client:
    client.force_login(researcher)
    return client


def test_the_study_page_lists_every_job_of_the_study_with_its_state_progress_and_reason(
    rclient: Client, study: Study, settings: Any
) -> None:
    settings.CHAT_JOB_MODE = "inline"
    scope = f"study:{study.pk}"
    arm_job(study.arms.get(memory_system="none"), status="running", attempts=1, done=3, total=12,
            step="probes 3/6", lease_until=leases.later(60))  # fmt: skip
    Job.objects.create(kind="chat.reply", target="901", scope=scope, label="reply 4 in chat session 7",
                       lane="reply", status="failed", attempts=4, error="HTTP 503 from the endpoint")  # fmt: skip
    Job.objects.create(kind="chat.memory_update", target="7", scope=scope, label="memory update after session 1",
                       lane="memory", status="queued", attempts=2, due_at=leases.later(10),
                       error="LLMTransientError: timed out")  # fmt: skip
    Job.objects.create(kind="chat.reply", target="902", scope="study:999999", label="another study's reply",
                       lane="reply", status="failed", error="not ours")  # fmt: skip
    Job.objects.create(kind="chat.reply", target="903", scope=scope, label="reply 6 in chat session 7",
                       lane="reply", status="done", attempts=2)  # retried, then done  # fmt: skip
    page = rclient.get(reverse("studies:detail", args=[study.slug])).content.decode()
    section = page[page.index('id="jobs"') :]
    assert 'hx-trigger="every 2s"' in section[:300]  # live jobs: the section polls
    assert "3/12 probes 3/6" in section and "running" in section
    assert "waiting to retry" in section and "last attempt: LLMTransientError: timed out" in section
    assert "reply 4 in chat session 7" in section and "HTTP 503 from the endpoint" in section
    assert "another study" not in section and "not ours" not in section
    assert "bot reply" in section and "memory update" in section  # the counts per kind
    counts = section[section.index("jobs-counts") : section.index("</table>")]
    reply_row = counts[counts.index("bot reply") :].split("</tr>")[0]
    # queued, running, done, failed, retried: the failed reply took 4 attempts, the done one 2
    assert re.findall(r"<td[^>]*>(?:<span[^>]*>)?(\d+)", reply_row) == ["0", "0", "1", "1", "2"]


def test_the_jobs_section_stops_polling_once_nothing_is_live_and_a_lost_job_is_taken_back(
    rclient: Client, study: Study, settings: Any
) -> None:
    settings.CHAT_JOB_MODE = "inline"
    record = arm_job(study.arms.get(memory_system="none"), status="running", attempts=2,
                     lease_until=leases.later(-60))  # its worker died on its last attempt  # fmt: skip
    body = rclient.get(reverse("studies:jobs", args=[study.slug])).content.decode()
    record.refresh_from_db()
    assert record.status == "running" and 'id="jobs-take-back"' in body  # the poll only reads
    sweeper.sweep()  # the sweeper's round (Celery beat, or the web process's thread)
    body = rclient.get(reverse("studies:jobs", args=[study.slug])).content.decode()
    record.refresh_from_db()
    assert record.status == "failed" and record.error == LOST_ERROR
    assert body.lstrip().startswith('<section class="card" id="jobs"') and "every 2s" not in body
    assert "the worker running it was lost" in body and "jobs-take-back" not in body


def lost_reply_and_update(study: Study) -> list[Job]:
    """A reply queued (a grace ago) and a memory update running under a lapsed lease: both lost."""
    scope, overdue = f"study:{study.pk}", leases.later(-3600)
    return [
        Job.objects.create(kind="chat.reply", target="901", scope=scope, label="reply 4 in chat session 7",
                           lane="reply", status="queued", attempts=1, due_at=overdue),
        Job.objects.create(kind="chat.memory_update", target="7", scope=scope, label="memory update after session 1",
                           lane="memory", status="running", attempts=1, lease_until=leases.later(-60)),
    ]  # fmt: skip


def test_a_get_of_the_study_page_or_its_jobs_poll_leaves_lost_jobs_as_they_are(
    client: Client, study: Study, other: Any, settings: Any, monkeypatch: Any, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    lost_reply_and_update(study)
    before = list(Job.objects.order_by("pk").values())
    study.viewers.add(other)
    for user in (study.created_by, other):
        client.force_login(user)
        with django_capture_on_commit_callbacks(execute=True):
            for name in ("studies:detail", "studies:jobs", "studies:readiness"):
                assert client.get(reverse(name, args=[study.slug]), headers={"HX-Request": "true"}).status_code == 200
    assert list(Job.objects.order_by("pk").values()) == before and sent == []


def test_the_take_back_button_is_the_owners_and_editors_and_a_viewer_gets_403(
    client: Client, study: Study, owner: Any, other: Any, monkeypatch: Any, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    reply, update = lost_reply_and_update(study)
    study.viewers.add(other)
    study.shared_with.add(owner)  # an editor
    url = reverse("studies:jobs_sweep", args=[study.slug])
    client.force_login(other)
    assert 'id="jobs-take-back"' not in client.get(reverse("studies:jobs", args=[study.slug])).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(url).status_code == 403
        assert client.get(url).status_code == 405
    assert sent == [] and Job.objects.get(pk=update.pk).status == "running"
    client.force_login(owner)
    assert 'id="jobs-take-back"' in client.get(reverse("studies:jobs", args=[study.slug])).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, follow=True)
    assert "2 lost jobs taken back." in response.content.decode()
    assert sorted(sent) == sorted([reply.pk, update.pk])
    assert Job.objects.get(pk=update.pk).status == "queued" and Job.objects.get(pk=reply.pk).due_at > reply.due_at
