"""The worker's whole way through a study, over HTTP and the workflows (the socket has its own tests)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from chat import assignment
from chat.models import ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
from chat.tests.conftest import enter, rate_all, say, start
from studies.models import Arm, Participant, Study

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_goes_through_two_episodes_with_different_arms_and_gets_the_completion_code(
    client: Client, study: Study
) -> None:
    participant = enter(client, study, "w-full")
    arms_seen = []
    for _episode in range(2):
        for k in (1, 2):
            response = client.get(f"/s/{study.slug}/next/", follow=True)
            assert response.status_code == 200
            session = assignment.current_session(participant)
            assert session is not None and session.index == k
            if k == 2 or session.episode.index == 2:
                assert session.status == ChatSession.Status.READY
                page = client.get(f"/chat/{session.pk}/wait/").content.decode()
                # a new arm starts with "A new chatbot", a later session with its own gap, drawn from the range
                assert ("A new chatbot" if k == 1 else session.gap_label) in page
                if k == 2:
                    assert session.gap_days is not None and 7 <= session.gap_days <= 14
            client.get(f"/chat/{session.pk}/")
            session.refresh_from_db()
            # the bot opens session 2 (the echoing stand-in's opener recites its instruction: failed, unseen)
            assert session.messages.filter(speaker="bot").count() == (1 if k == 2 else 0)
            say(session, f"I went hiking in session {k}")
            assert session.messages.filter(speaker="bot").last().status == Message.Status.COMPLETE
            assert client.post(f"/chat/{session.pk}/end/").status_code == 302
            snapshot = MemorySnapshot.objects.get(session=session)
            assert snapshot.status == MemorySnapshot.Status.DONE
            assert "llm_calls" in snapshot.trace
            assert rate_all(client, session).status_code == 302
        arms_seen.append(session.episode.arm_id)
    assert len(set(arms_seen)) == 2
    page = client.get(f"/s/{study.slug}/next/", follow=True).content.decode()
    assert study.completion_code in page
    assert "https://app.prolific.com/submissions/complete?cc=" + study.completion_code in page
    participant.refresh_from_db()
    assert participant.completed_at is not None
    assert Rating.objects.filter(session__episode__participant=participant).count() == 4 * 5


def test_the_full_history_arm_remembers_session_one_in_session_two(client: Client, study: Study, script: Any) -> None:
    llm = script(["Nice!"])
    Arm.objects.filter(study=study, memory_system="none").update(active=False)
    study.gap_max_days = None  # a fixed week, so the clock below is known
    study.save()
    session = start(client, study)
    say(session, "My dog is called Biscuit")
    client.post(f"/chat/{session.pk}/end/")
    rate_all(client, session)
    second = assignment.current_session(session.episode.participant)
    assert second.index == 2 and second.simulated_start > session.simulated_start
    client.get(f"/chat/{second.pk}/")
    say(second, "Guess my dog's name")
    system_prompt = llm.calls[-1][0]["content"]
    assert "Biscuit" in system_prompt
    assert "Monday, January 12, 2026" in system_prompt  # the simulated clock: one week after Jan 5
    assert second.messages.filter(speaker="bot").last().memory_used


def test_assignment_balances_arms_over_active_and_completed_episodes(study: Study) -> None:
    Arm.objects.create(study=study, name="Third", memory_system="none", llm_backend="scripted")
    study.episodes_per_worker = 1
    study.save()
    counts: dict[int, int] = {}
    for i in range(9):
        p = Participant.objects.create(study=study, external_id=f"p{i}", source="prolific")
        ep = assignment.assign_episode(p)
        counts[ep.arm_id] = counts.get(ep.arm_id, 0) + 1
    assert sorted(counts.values()) == [3, 3, 3]


def test_a_workers_second_episode_never_reuses_an_arm_and_qc_arms_are_drawn_too(study: Study) -> None:
    Arm.objects.all().update(active=False)
    a = Arm.objects.create(study=study, name="QC", memory_system="qc", llm_backend="scripted")
    b = Arm.objects.create(study=study, name="B", memory_system="none", llm_backend="scripted")
    p = Participant.objects.create(study=study, external_id="p", source="prolific")
    first = assignment.assign_episode(p)
    Episode.objects.filter(pk=first.pk).update(status=Episode.Status.COMPLETED)
    second = assignment.assign_episode(p)
    assert {first.arm_id, second.arm_id} == {a.pk, b.pk}
    Episode.objects.filter(pk=second.pk).update(status=Episode.Status.COMPLETED)
    with pytest.raises(assignment.NoArmAvailable):
        assignment.assign_episode(p)


def test_end_session_unlocks_only_after_the_minimum_number_of_user_turns(client: Client, study: Study) -> None:
    study.min_user_turns = 2
    study.save()
    session = start(client, study)
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert re.search(r'id="end-session"[^>]*disabled', page)
    say(session, "one")
    response = client.post(f"/chat/{session.pk}/end/", follow=True)
    assert "at least 2 messages" in response.content.decode()
    session.refresh_from_db()
    assert session.status == ChatSession.Status.CHATTING
    say(session, "two")
    assert not re.search(r'id="end-session"[^>]*disabled', client.get(f"/chat/{session.pk}/").content.decode())
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING


def test_every_llm_call_is_recorded_with_prompt_reply_model_and_tokens(client: Client, study: Study) -> None:
    session = start(client, study)
    say(session, "hello there")
    record = LLMCallRecord.objects.get(session=session, purpose="reply")
    assert record.reply == "You said: hello there"
    assert record.model == "scripted"
    assert record.messages[-1] == {"role": "user", "content": "hello there"}
    assert record.completion_tokens and record.latency_ms >= 0
