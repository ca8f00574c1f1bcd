"""A study in three waves, end to end over HTTP: the worker stops at each wave's end with the completion code,
is not swept as abandoned while waiting, and goes on once the researcher has approved them and moved them into
the next wave's group (against the fake Prolific server)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from chat import assignment
from chat.models import ChatSession
from chat.tests.conftest import enter, rate_all, say
from chat.timing import sweep_abandoned
from prolific import services
from prolific.models import Submission, Wave
from prolific.tests.fake_prolific import FakeProlific
from studies.models import Participant, Study

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "tok-WAVES"


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"
    settings.CHAT_RETRY_DELAYS = [0, 0, 0]
    settings.CHAT_TOKEN_FLUSH_SECONDS = 0


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeProlific]:
    with FakeProlific(TOKEN) as server:
        settings.PROLIFIC_API_TOKEN = TOKEN
        settings.PROLIFIC_API_URL = server.url
        yield server


def do_session(client: Client, participant: Participant) -> ChatSession:
    client.get(f"/s/{participant.study.slug}/next/", follow=True)  # a new episode is drawn here
    session = assignment.current_session(participant)
    assert session is not None
    client.get(f"/chat/{session.pk}/")
    say(session, f"hello from session {session.index}")
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    assert rate_all(client, session).status_code == 302
    return session


def next_page(client: Client, study: Study) -> str:
    return client.get(f"/s/{study.slug}/next/", follow=True).content.decode()


def test_a_worker_stops_at_each_waves_end_and_goes_on_when_let_into_the_next(
    client: Client, study: Study, fake: FakeProlific, researcher: User
) -> None:
    study.wave_sessions = "1, 3"  # 2 episodes x 2 sessions: wave 1 = 1 session, wave 2 = 2 more, wave 3 = the last
    study.abandon_after_minutes = 5
    study.save()
    assert study.wave_ends() == [1, 3]
    waves = [
        Wave.objects.create(
            study=study, number=n, prolific_study_id=f"W{n}", next_group_id=f"G{n + 1}" if n < 3 else ""
        )
        for n in (1, 2, 3)
    ]
    fake.groups.update({"G2": [], "G3": []})
    fake.add_submission("W1", "sub1", "pidA")  # the link's submission, which the entry checks with Prolific
    client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "pidA", "STUDY_ID": "W1", "SESSION_ID": "sub1"})
    client.post(f"/s/{study.slug}/consent/", {"agree": "yes"})
    participant = Participant.objects.get(study=study, external_id="prolific:pidA")
    do_session(client, participant)

    page = next_page(client, study)
    assert "this part of the study is done" in page and study.completion_code in page
    participant.refresh_from_db()
    assert participant.paused_at is not None
    waiting = assignment.current_session(participant)
    assert waiting is not None and waiting.index == 2
    client.get(f"/chat/{waiting.pk}/")  # the session's own URL does not start it either
    waiting.refresh_from_db()
    assert waiting.status != ChatSession.Status.CHATTING
    # days later: still waiting, not abandoned
    assert sweep_abandoned(timezone.now() + dt.timedelta(days=3)).participants == 0

    for n, wave in enumerate(waves[:2], start=1):
        fake.add_submission(wave.prolific_study_id, f"sub{n}", "pidA")
        if n > 1:  # the worker opens the wave's own link (another STUDY_ID and SESSION_ID): the same participation
            client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "pidA", "STUDY_ID": f"W{n}", "SESSION_ID": f"sub{n}"})
            assert Participant.objects.filter(study=study).count() == 1
        services.sync_wave(wave)
        services.decide(Submission.objects.get(submission_id=f"sub{n}"), "approve", researcher)
        assert services.move_completers(wave) == (1, "")
        assert fake.groups[f"G{n + 1}"] == ["pidA"]
        participant.refresh_from_db()
        assert (participant.wave, participant.paused_at) == (n + 1, None)
        done = [do_session(client, participant) for _ in range(2 if n == 1 else 1)]
        assert all(s.status == ChatSession.Status.DONE for s in ChatSession.objects.filter(pk__in=[d.pk for d in done]))
        if n == 1:
            assert "this part of the study is done" in next_page(client, study)
    page = next_page(client, study)
    assert "You have finished all the conversations" in page
    participant.refresh_from_db()
    assert participant.completed_at is not None


def test_a_study_without_waves_never_stops_a_worker(client: Client, study: Study) -> None:
    participant = enter(client, study, "pidB")
    do_session(client, participant)
    assert "this part of the study is done" not in next_page(client, study)
    assert not assignment.at_wave_end(participant, assignment.current_session(participant))
