"""Issue 24, item 4 without the researcher: every session's bot turns are scanned for blinding breaches once its
chat is over (the worker's end, the time limit, the abandonment sweep, a returned Prolific submission), as a job
of the runtime (``judges.blinding_scan``) that marks a leaky session non-blind; a clean session stays blind, and a
duplicate delivery or a second run changes nothing.

The jobs are held when sent (not run at the commit) and run here by id with ``runtime.jobs.run``, as a worker
process would."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from chat import sessions, timing
from chat.models import ChatSession, Episode, Message
from judges.blinding import SCAN, scan_session
from judges.models import BlindingBreach
from prolific import services as prolific_services
from runtime import executor, jobs
from runtime.models import Job
from studies.models import Arm, Participant, Study

LEAKY = "I'm built on GPT-4 by OpenAI, and as a full_history bot I keep everything."
CLEAN = "I remember you told me about your trip to Lisbon last week!"

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("each_database")]  # SQLite and PostgreSQL


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ids of the jobs sent to the runtime after a commit, held instead of run (the tests run them)."""
    held: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, *, countdown=0: held.append(job_id))
    return held


def chatting(study: Study, worker: str, bot_text: str, **participant: Any) -> ChatSession:
    """A worker's first session, chatting: one message of theirs and the bot's completed reply ``bot_text``."""
    fields = {"source": Participant.Source.INVITE, "consented_at": timezone.now(), **participant}
    p = Participant.objects.create(study=study, external_id=worker, **fields)
    ep = Episode.objects.create(participant=p, arm=Arm.objects.get(study=study, memory_system="full_history"), index=1)
    cs = ChatSession.objects.create(episode=ep, index=1, status=ChatSession.Status.CHATTING,
                                    simulated_start=study.session_start(1), started_at=timezone.now())  # fmt: skip
    user = Message.objects.create(session=cs, seq=1, client_id="c1", speaker="user", text="Hi, how are you?")
    Message.objects.create(session=cs, seq=2, speaker="bot", text=bot_text, reply_to=user,
                           status=Message.Status.COMPLETE)  # fmt: skip
    return cs


def scan_job(session: ChatSession) -> Job:
    found = list(Job.objects.of(SCAN.name, session.pk))
    assert len(found) == 1, f"session {session.pk}: {len(found)} blinding scans"
    return found[0]


def flags(*cs: ChatSession) -> list[bool]:
    return [ChatSession.objects.get(pk=s.pk).non_blind for s in cs]


def test_a_session_the_worker_ends_is_scanned_by_itself_and_a_duplicate_changes_nothing(
    study: Study, sent: list[int]
) -> None:
    leaky, clean = chatting(study, "W1", LEAKY), chatting(study, "W2", CLEAN)
    for cs in (leaky, clean):
        sessions.end_session(cs)
        sessions.end_session(cs)  # a second end (a double click) queues nothing more
    jl, jc = scan_job(leaky), scan_job(clean)
    assert (jl.lane, jc.lane) == ("long", "long")
    assert flags(leaky, clean) == [False, False]  # nothing before the job runs

    jobs.run(jl.pk)
    jobs.run(jc.pk)
    jl.refresh_from_db()
    jc.refresh_from_db()
    assert (jl.status, jc.status) == (Job.Status.DONE, Job.Status.DONE)
    assert jl.result == {"breaches": 3, "non_blind": True}  # gpt-4, openai, full_history
    assert jc.result == {"breaches": 0, "non_blind": False}
    assert flags(leaky, clean) == [True, False]
    stored = sorted(BlindingBreach.objects.values_list("session_id", "kind", "term"))
    assert stored == sorted([(leaky.pk, "vendor", "gpt-4"), (leaky.pk, "vendor", "openai"),
                             (leaky.pk, "arm", "full_history")])  # fmt: skip

    # a duplicate delivery of the done job does nothing; a second scan of the session stores nothing more
    jobs.run(jl.pk)
    jl.refresh_from_db()
    assert jl.attempts == 1 and jl.result == {"breaches": 3, "non_blind": True}
    assert scan_session(leaky.pk) == {"breaches": 0, "non_blind": True}
    assert scan_session(clean.pk) == {"breaches": 0, "non_blind": False}
    assert sorted(BlindingBreach.objects.values_list("session_id", "kind", "term")) == stored
    assert flags(leaky, clean) == [True, False]

    preview = chatting(study, "R1", LEAKY, source=Participant.Source.PREVIEW)
    sessions.end_session(preview)  # a researcher's preview is never data: not scanned
    assert not Job.objects.of(SCAN.name, preview.pk).exists()


def test_the_time_limit_the_sweep_and_a_returned_submission_queue_the_scan_too(study: Study, sent: list[int]) -> None:
    study.session_time_limit_minutes = 5
    study.abandon_after_minutes = 30
    study.save()
    timed = chatting(study, "W1", LEAKY)
    ChatSession.objects.filter(pk=timed.pk).update(started_at=timezone.now() - timedelta(minutes=6))
    timed.refresh_from_db()
    assert timing.end_if_time_up(timed)
    assert ChatSession.objects.get(pk=timed.pk).ended_by == ChatSession.EndedBy.TIME_LIMIT

    gone = chatting(study, "W2", LEAKY, last_seen_at=timezone.now() - timedelta(hours=2))
    clean_gone = chatting(study, "W3", CLEAN, last_seen_at=timezone.now() - timedelta(hours=2))
    assert timing.sweep_abandoned().episodes == 2
    assert ChatSession.objects.get(pk=gone.pk).status == ChatSession.Status.CHATTING  # left as it was

    returned = chatting(study, "W4", LEAKY)
    assert prolific_services.release(returned.episode.participant)

    for cs in (timed, gone, clean_gone, returned):
        jobs.run(scan_job(cs).pk)
    assert flags(timed, gone, clean_gone, returned) == [True, True, False, True]
    assert timing.sweep_abandoned().episodes == 0
    assert Job.objects.filter(kind=SCAN.name).count() == 4  # a sweep that finds nothing new queues nothing
