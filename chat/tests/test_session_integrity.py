"""Session integrity (issue 8, item 4): no end while a reply is written, the rating gate between
sessions, replies that end at a sentence, and memory-state writes that lose no update whatever the
order in which the per-turn and end-of-session jobs finish."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest
from django.db.models import F
from django.test import Client

from chat import arms, errors, sessions, state, turns
from chat.forms import field_name
from chat.models import ChatSession, Episode, MemorySnapshot, Message
from chat.replytext import hit_token_cap
from chat.tests.conftest import start
from memory.base import ChatMessage, Prompt, Turn, Update
from memory.hygiene import end_at_sentence
from memory.llm import ScriptedLLM
from memory.llmwrap import RecordingLLM
from runtime import executor
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


def _start(client: Client, study: Study) -> ChatSession:
    """The first session of ``study``, made endable after one user turn."""
    study.min_user_turns = 1
    study.save()
    return start(client, study)


def _rate_all(client: Client, session: ChatSession) -> Any:
    data: dict[str, Any] = {}
    for m in session.episode.participant.study.metrics.all():
        data[field_name(session.pk, m)], data[f"touched_{field_name(session.pk, m)}"] = "60", "1"
    return client.post(f"/chat/{session.pk}/rate/", data)


# ------------------------------------------------------------------------- ending while replying


def test_the_server_refuses_to_end_a_session_while_the_reply_is_being_written(
    client: Client, study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _start(client, study)
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)  # still writing
    turns.post_user_message(session, "c1", "Hello there")
    with pytest.raises(sessions.ReplyPending, match="wait for the chatbot's reply"):
        sessions.end_session(session)
    response = client.post(f"/chat/{session.pk}/end/", follow=True)
    page = response.content.decode()
    assert "wait for the chatbot&#x27;s reply" in page
    session.refresh_from_db()
    assert session.status == ChatSession.Status.CHATTING
    assert not MemorySnapshot.objects.filter(session=session).exists()
    # the page renders "End session" disabled while the reply is pending
    assert re.search(r'id="end-session"[^>]*disabled', page)


def test_once_the_reply_is_written_the_session_ends_with_the_reply_in_it(
    client: Client, study: Study, script: Any
) -> None:
    script(["Nice to meet you."])
    session = _start(client, study)
    turns.post_user_message(session, "c1", "Hello there")
    sessions.end_session(session)
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING
    assert session.messages.get(seq=2).status == Message.Status.COMPLETE


# ---------------------------------------------------------------------------------- rating gate


def _ended_unrated(client: Client, study: Study) -> tuple[ChatSession, ChatSession]:
    first = _start(client, study)
    turns.post_user_message(first, "c1", "I have a dog")
    sessions.end_session(first)  # the memory update runs inline: session 2 is ready
    second = ChatSession.objects.get(episode=first.episode, index=2)
    assert second.status == ChatSession.Status.READY
    return first, second


def test_a_later_session_does_not_open_before_the_earlier_one_is_rated(client: Client, study: Study) -> None:
    first, second = _ended_unrated(client, study)
    response = client.get(f"/chat/{second.pk}/")
    assert response.status_code == 302 and response.url == f"/chat/{first.pk}/rate/"
    assert "Please rate session 1" in client.get(response.url).content.decode()
    second.refresh_from_db()
    assert second.status == ChatSession.Status.READY and second.started_at is None
    wait = client.get(f"/chat/{second.pk}/wait/")
    assert wait.status_code == 302 and wait.url == f"/chat/{first.pk}/rate/"
    assert client.get(f"/chat/{second.pk}/wait/", headers={"HX-Request": "true"})["HX-Redirect"] == wait.url


def test_a_later_session_answers_no_message_before_the_earlier_one_is_rated(client: Client, study: Study) -> None:
    study.bot_opens_sessions = False  # the worker writes first, so a message is what would start session 2
    first, second = _ended_unrated(client, study)
    with pytest.raises(errors.ChatError, match="Please rate session 1"):
        turns.post_user_message(second, "c2", "Hello again")
    assert not second.messages.exists()
    _rate_all(client, first)
    turns.post_user_message(second, "c2", "Hello again")
    assert second.messages.count() == 2


# ------------------------------------------------------------------------------ sentence ends


def test_a_reply_cut_at_the_token_cap_ends_at_its_last_complete_sentence(
    client: Client, study: Study, script: Any, settings: Any
) -> None:
    settings.LLM_MAX_TOKENS = 8
    script(["I like tea. It is warm and I'll tell you more."])  # cut at 8 words, finish reason "length"
    session = start(client, study)
    turns.post_user_message(session, "c1", "Tea or coffee?")
    assert session.messages.get(seq=2).text == "I like tea."


def test_a_reply_under_the_token_cap_is_left_as_the_model_wrote_it(
    client: Client, study: Study, script: Any, settings: Any
) -> None:
    settings.LLM_MAX_TOKENS = 50
    script(["I like tea. It is warm and"])
    session = start(client, study)
    turns.post_user_message(session, "c1", "Tea or coffee?")
    assert session.messages.get(seq=2).text == "I like tea. It is warm and"


def test_end_at_sentence_keeps_closing_quotes_and_trails_off_without_a_full_sentence() -> None:
    assert end_at_sentence('He said "hi!" and then we', "length") == 'He said "hi!"'
    assert end_at_sentence("Version 3.5 is out. And then", "length") == "Version 3.5 is out."
    assert end_at_sentence("and then we went to the,", "length") == "and then we went to the…"


def test_the_backends_finish_reason_decides_whether_a_stream_hit_the_cap() -> None:
    class Stream:
        finish_reason = "stop"

    assert not hit_token_cap(Stream(), pieces=500, max_tokens=10)
    Stream.finish_reason = "length"
    assert hit_token_cap(Stream(), pieces=3, max_tokens=10)
    assert hit_token_cap(object(), pieces=10, max_tokens=10) and not hit_token_cap(object(), 9, 10)


# ------------------------------------------------------------------ compare-and-set memory state


class ListMemory:
    """A memory that lists what updated it: the order of the jobs shows in the state."""

    name = "list-memory"

    def __init__(self) -> None:
        self.during_after_turn: Any = None
        self.during_end_session: Any = None

    def initial_state(self) -> dict[str, Any]:
        return {"items": []}

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        return Prompt(messages=[ChatMessage("system", "Be nice."), ChatMessage("user", session[-1].text)])

    def after_turn(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        hook, self.during_after_turn = self.during_after_turn, None
        if hook:
            hook()  # another job writes while this one is "calling its LLM"
        return Update({"items": [*state["items"], f"turn {len(session)}"]})

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        hook, self.during_end_session = self.during_end_session, None
        if hook:
            hook()
        return Update({"items": [*state["items"], "session end"]})


def _start_with_an_empty_list(client: Client, study: Study) -> ChatSession:
    session = _start(client, study)
    # a write of the state bumps its version (chat.state caches states by it)
    Episode.objects.filter(pk=session.episode_id).update(
        memory_state={"items": []}, state_version=F("state_version") + 1
    )
    return session


@pytest.fixture
def list_memory(monkeypatch: pytest.MonkeyPatch) -> ListMemory:
    system = ListMemory()
    monkeypatch.setattr(arms, "build_arm", lambda arm, **_: (system, RecordingLLM(ScriptedLLM(["Nice."]))))
    return system


def test_a_late_per_turn_update_does_not_overwrite_the_end_of_session_update(
    client: Client, study: Study, list_memory: ListMemory
) -> None:
    session = _start_with_an_empty_list(client, study)
    # The bad order: the reply is stored, the worker ends the session and its update is written,
    # and only then does the per-turn update (computed from the state before) finish.
    list_memory.during_after_turn = lambda: sessions.end_session(session)
    turns.post_user_message(session, "c1", "Hello")
    episode = Episode.objects.get(pk=session.episode_id)
    assert episode.memory_state["items"] == ["session end", "turn 2"]
    assert episode.state_version == 3  # the empty list, the end of session, the per-turn update recomputed
    assert MemorySnapshot.objects.get(session=session).state["items"] == ["session end"]


def test_a_per_turn_update_written_during_the_end_of_session_update_is_kept(
    client: Client, study: Study, list_memory: ListMemory
) -> None:
    session = _start_with_an_empty_list(client, study)
    list_memory.during_after_turn = lambda: None
    turns.post_user_message(session, "c1", "Hello")  # per-turn: ["turn 2"], version 2

    def late_turn() -> None:
        state.apply(session.episode_id, lambda s: Update({"items": [*s["items"], "late turn"]}))

    list_memory.during_end_session = late_turn
    sessions.end_session(session)
    episode = Episode.objects.get(pk=session.episode_id)
    assert episode.memory_state["items"] == ["turn 2", "late turn", "session end"]
    snapshot = MemorySnapshot.objects.get(session=session)
    assert snapshot.status == MemorySnapshot.Status.DONE and snapshot.state == episode.memory_state


def test_a_write_from_a_stale_version_is_refused(client: Client, study: Study) -> None:
    episode_id = start(client, study).episode_id
    _, version = state.read(episode_id)
    assert state.write(episode_id, {"a": 1}, expected_version=version)
    assert not state.write(episode_id, {"b": 2}, expected_version=version)
    assert state.read(episode_id) == ({"a": 1}, version + 1)
