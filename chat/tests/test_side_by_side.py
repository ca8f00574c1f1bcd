"""Live side by side (chat/sidebyside.py): the pair of arms drawn per episode, both sides' memories kept apart, both
replies written at once, the session ended only when both sides answered, the vote and its refusals, the socket
(sides named by letter only). The votes on the pairwise leaderboard: reports/tests/test_live_votes.py.

The arms run on scripted LLMs (memory.llm.ScriptedLLM), one per arm, each signing its replies with a word of its own
(not its name: the socket's frames are checked for arm names): the words don't matter here, whose they are does."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from chat import arms, assignment, replies, sidebyside
from chat.forms import field_name
from chat.models import ChatSession, Episode, Message, Rating, SideBySideVote
from chat.tests.conftest import HOST, ORIGIN, SIGN, open_pair, play_session, refused, vote_data
from memory.llm import LLMError, ScriptedLLM
from runtime import executor
from studies.models import Arm, Participant, Study

pytestmark = pytest.mark.django_db(transaction=True)


# ---------------------------------------------------------------------------------------------- drawing


def test_pairs_are_drawn_balanced_over_pairs_of_arms_with_sides_at_random_and_never_the_qc_arm() -> None:
    arms_ = [Arm(pk=1, name="x"), Arm(pk=2, name="y"), Arm(pk=3, name="z"), Arm(pk=4, name="qc", is_qc=True)]
    rng = random.Random(3)
    load: Counter[tuple[int, int]] = Counter()
    orders: Counter[tuple[int, int]] = Counter()
    for _ in range(30):
        drawn = assignment.draw_pair(arms_, load, rng)
        assert drawn is not None
        a, b = drawn
        load[(min(a.pk, b.pk), max(a.pk, b.pk))] += 1
        orders[(a.pk, b.pk)] += 1
    assert load == {(1, 2): 10, (1, 3): 10, (2, 3): 10}  # every pair drawn once before any twice
    assert all(orders[(x, y)] and orders[(y, x)] for x, y in load)  # both sides for every pair
    assert assignment.draw_pair([arms_[0], arms_[3]], Counter(), rng) is None  # the QC arm is no partner


def test_a_worker_gets_one_episode_per_side_same_index_same_card_and_the_study_balances_the_pairs(
    pair_study: Study, signed: Any
) -> None:
    Arm.objects.create(study=pair_study, name="Gamma", memory_system="none", llm_backend="scripted")
    for i in range(6):
        session = open_pair(Client(), pair_study, f"w{i}")
        a = session.episode
        b = Episode.objects.get(lead=a)
        assert (a.side, b.side, a.index, b.index) == ("a", "b", 1, 1) and a.arm_id != b.arm_id
        assert a.persona == b.persona
        assert not assignment.episodes_left(a.participant)  # one side-by-side episode per worker here
    assert sorted(assignment.pair_load(pair_study).values()) == [2, 2, 2]


def test_side_b_has_no_pages_of_its_own(client: Client, pair_study: Study, signed: Any) -> None:
    session = open_pair(client, pair_study)
    b = sidebyside.twin_session(session)
    for view in ("", "rate/", "wait/"):
        response = client.get(f"/chat/{b.pk}/{view}")
        assert response.status_code == 302 and response["Location"].endswith(f"/chat/{session.pk}/{view}")


# ------------------------------------------------------------------------------ memory, replies, pages


def test_each_side_keeps_its_own_memory_and_never_sees_the_other_sides_replies(
    client: Client, pair_study: Study, signed: dict[str, ScriptedLLM]
) -> None:
    session = open_pair(client, pair_study)
    a_arm, b_arm = session.episode.arm.name, sidebyside.twin_session(session).episode.arm.name
    a_word, b_word = SIGN[a_arm], SIGN[b_arm]
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert "Chatbot A" in page and "Chatbot B" in page
    assert "Alpha" not in page and "Beta" not in page and "history" not in page  # no arm name in the page
    play_session(client, session, ["I have a dog called Rex."])
    second = assignment.current_session(session.episode.participant)
    assert second is not None and second.index == 2
    play_session(client, second, ["Rex learned to sit."], winner="tie")
    a = Episode.objects.get(pk=session.episode_id)
    b = Episode.objects.get(lead=a)
    assert a.status == b.status == Episode.Status.COMPLETED
    a_state, b_state = json.dumps(a.memory_state), json.dumps(b.memory_state)
    assert f"{a_word} here" in a_state and "Rex" in a_state and b_word not in a_state
    assert f"{b_word} here" in b_state and "Rex" in b_state and a_word not in b_state
    # and no prompt of either arm ever held the other's words (each saw its own replies of session 1)
    assert f"{a_word} here (1)" in json.dumps(signed[a_arm].calls) and b_word not in json.dumps(signed[a_arm].calls)
    assert f"{b_word} here (1)" in json.dumps(signed[b_arm].calls) and a_word not in json.dumps(signed[b_arm].calls)
    assert list(SideBySideVote.objects.order_by("id").values_list("winner", flat=True)) == ["a", "tie"]
    assert Rating.objects.count() == 0  # the study asks for votes only


@pytest.fixture
def fresh_pools(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Thread lanes built from this test's settings (the site's default reply threads), shut down after it."""
    monkeypatch.setattr(executor, "_pools", {})
    yield
    executor.shutdown()


def test_both_replies_are_written_at_once_a_slow_side_does_not_hold_up_the_other(
    client: Client, pair_study: Study, settings: Any, monkeypatch: pytest.MonkeyPatch, fresh_pools: None
) -> None:
    """Side A's LLM blocks until the test lets it go; side B's reply must complete meanwhile (with one reply
    thread it would wait behind A's and this test fails). The lane's threads are the site's default."""
    release = threading.Event()
    session = open_pair(client, pair_study)
    slow = session.episode.arm.name

    def answer(name: str) -> Any:
        def reply(messages: Any) -> str:
            if name == slow:
                assert release.wait(60), "side A was never released"
            return f"{name} answers."

        return reply

    monkeypatch.setattr(arms, "build_llm", lambda arm: ScriptedLLM(answer(arm.name)))
    client.get(f"/chat/{session.pk}/")
    settings.CHAT_JOB_MODE = "thread"
    b = sidebyside.twin_session(session)
    try:
        sidebyside.post_to_both(session.pk, "c-slow", "Hello both")
        b_reply = Message.objects.get(session=b, seq=2)
        for _ in range(600):  # until side B's reply is written (a bound for a loaded machine, not a timing)
            b_reply.refresh_from_db()
            if b_reply.status != Message.Status.PENDING:
                break
            time.sleep(0.1)
        a_reply = Message.objects.get(session=session, seq=2)
        assert b_reply.status == Message.Status.COMPLETE and a_reply.status == Message.Status.PENDING
    finally:
        release.set()
    for _ in range(600):
        a_reply.refresh_from_db()
        if a_reply.status != Message.Status.PENDING:
            break
        time.sleep(0.1)
    assert a_reply.status == Message.Status.COMPLETE and a_reply.text == f"{slow} answers."


def test_a_session_is_votable_only_when_both_sides_answered_and_a_failed_side_is_retried_alone(
    client: Client, pair_study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = open_pair(client, pair_study)
    failing = sidebyside.twin_session(session).episode.arm.name
    broken = {"on": True}

    def build(arm: Arm) -> ScriptedLLM:
        def reply(messages: Any) -> str:
            if arm.name == failing and broken["on"]:
                raise LLMError("the endpoint is down")
            return f"{arm.name} is fine."

        return ScriptedLLM(reply)

    monkeypatch.setattr(arms, "build_llm", build)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    b = sidebyside.twin_session(session)
    assert Message.objects.get(session=session, seq=2).status == Message.Status.COMPLETE
    assert Message.objects.get(session=b, seq=2).status == Message.Status.FAILED
    response = client.post(f"/chat/{session.pk}/end/", follow=True)
    assert "Chatbot B: Please send at least 1 message that the chatbot answers" in response.content.decode()
    session.refresh_from_db()
    b.refresh_from_db()
    assert session.status == b.status == ChatSession.Status.CHATTING  # neither side ended
    assert client.post(f"/chat/{session.pk}/rate/", vote_data()).status_code == 400  # not votable yet
    broken["on"] = False
    replies.retry_reply(b, 2)  # the Retry button under side B's reply
    assert Message.objects.get(session=b, seq=2).status == Message.Status.COMPLETE
    assert Message.objects.filter(session=session, speaker="bot").count() == 1  # side A untouched
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    assert client.post(f"/chat/{session.pk}/rate/", vote_data("b")).status_code == 302


def test_both_sides_share_one_clock_and_the_time_limit_ends_both(
    client: Client, pair_study: Study, signed: Any
) -> None:
    pair_study.session_time_limit_minutes = 5
    pair_study.min_user_turns = 3  # waived by the time limit
    pair_study.save()
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    session.refresh_from_db()
    b = sidebyside.twin_session(session)
    assert b.started_at == session.started_at  # one page, one start
    ChatSession.objects.filter(pk__in=[session.pk, b.pk]).update(started_at=session.started_at - timedelta(minutes=6))
    response = client.get(f"/chat/{session.pk}/")
    assert response.status_code == 302 and response["Location"].endswith(f"/chat/{session.pk}/rate/")
    statuses = ChatSession.objects.filter(pk__in=[session.pk, b.pk]).values_list("status", "ended_by")
    assert set(statuses) == {(ChatSession.Status.RATING, ChatSession.EndedBy.TIME_LIMIT)}
    assert client.post(f"/chat/{b.pk}/end/").status_code == 302  # side B's end: to side A's chat page, not a 405


def test_a_message_counts_once_toward_the_workers_limits(client: Client, pair_study: Study, signed: Any) -> None:
    pair_study.max_messages_per_minute = 2
    pair_study.save()
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "one")
    sidebyside.post_to_both(session.pk, "c2", "two")  # counted twice (A's and B's copy) this would be refused
    with pytest.raises(sidebyside.ChatError, match="very quickly"):
        sidebyside.post_to_both(session.pk, "c3", "three")
    assert (
        Message.objects.filter(session__episode__participant=session.episode.participant, speaker="user").count() == 4
    )


# ------------------------------------------------------------------------------------------------ votes


def test_a_vote_with_a_forged_side_or_no_reason_is_refused_with_a_clear_error_and_nothing_is_stored(
    client: Client, pair_study: Study, signed: Any
) -> None:
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    assert client.post(f"/chat/{session.pk}/rate/", vote_data()).status_code == 400  # not ended: no vote
    client.post(f"/chat/{session.pk}/end/")
    for data, error in (
        (vote_data("left"), "Please choose A, B, a tie or both bad."),
        (vote_data("Alpha history"), "Please choose A, B, a tie or both bad."),
        ({"reason": "no winner given"}, "Please choose A, B, a tie or both bad."),
        (vote_data("a", ""), "Please give a short reason for your choice"),
        (vote_data("a", "ok"), "Please give a short reason for your choice"),
        (vote_data("b", "x" * 301), "at most 300 characters"),
    ):
        response = client.post(f"/chat/{session.pk}/rate/", data)
        assert response.status_code == 400 and error in response.content.decode()
    assert not SideBySideVote.objects.exists()
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING
    assert client.post(f"/chat/{session.pk}/rate/", vote_data("both_bad")).status_code == 302
    assert SideBySideVote.objects.get().winner == "both_bad"


def test_voting_twice_stores_one_vote_and_the_workflow_says_so(client: Client, pair_study: Study, signed: Any) -> None:
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    client.post(f"/chat/{session.pk}/end/")
    assert client.post(f"/chat/{session.pk}/rate/", vote_data("a")).status_code == 302
    again = client.post(f"/chat/{session.pk}/rate/", vote_data("b"), follow=True)
    assert "Your vote on this session was already saved." in again.content.decode()
    session.refresh_from_db()
    with pytest.raises(sidebyside.VoteRefused, match="already voted"):
        sidebyside.submit_vote(session, session.episode.participant, vote_data("b"))
    assert list(SideBySideVote.objects.values_list("winner", flat=True)) == ["a"]


def test_a_vote_on_another_workers_session_is_refused(client: Client, pair_study: Study, signed: Any) -> None:
    session = open_pair(client, pair_study, "owner")
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    client.post(f"/chat/{session.pk}/end/")
    intruder = Client()
    other = open_pair(intruder, pair_study, "intruder")
    assert intruder.post(f"/chat/{session.pk}/rate/", vote_data()).status_code == 404
    with pytest.raises(sidebyside.VoteRefused, match="not your session"):
        sidebyside.submit_vote(session, other.episode.participant, vote_data())
    assert not SideBySideVote.objects.exists()


def test_the_study_can_ask_for_each_sides_sliders_with_the_vote(client: Client, pair_study: Study, signed: Any) -> None:
    pair_study.side_by_side_sliders = True
    pair_study.save()
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    client.post(f"/chat/{session.pk}/end/")
    b = sidebyside.twin_session(session)
    page = client.get(f"/chat/{session.pk}/rate/").content.decode()
    assert "Chatbot A" in page and "Chatbot B" in page and page.count('type="range"') == 10
    assert "Alpha" not in page and "Beta" not in page and "history" not in page  # the vote page names no arm
    assert client.post(f"/chat/{session.pk}/rate/", vote_data()).status_code == 400  # the sliders are required
    data = vote_data()
    for s, value in ((session, 80), (b, 30)):
        for m in pair_study.metrics.all():
            data[field_name(s.pk, m)] = str(value)
            data[f"touched_{field_name(s.pk, m)}"] = "1"
    assert client.post(f"/chat/{session.pk}/rate/", data).status_code == 302
    assert set(Rating.objects.filter(session=session).values_list("value", flat=True)) == {80}
    assert set(Rating.objects.filter(session=b).values_list("value", flat=True)) == {30}


# ---------------------------------------------------------------------------------------- the socket


async def _pair_socket(cookie: bytes, session_id: int) -> tuple[bool, int | None, list[dict[str, str]]]:
    from evalsite.asgi import application  # noqa: TID251  (the socket of the assembled site)

    comm = WebsocketCommunicator(application, f"/ws/pair/{session_id}/", headers=[HOST, ORIGIN, (b"cookie", cookie)])
    code = await refused(comm)
    if code is not None:  # what a refused socket is sent before the client saw the close is not taken
        await comm.send_to(text_data=json.dumps({"type": "message", "client_id": "sock-x", "text": "Not mine"}))
        answered = [] if await comm.receive_nothing(timeout=0.5) else [await comm.receive_output()]
        return False, code, answered
    await comm.send_to(text_data=json.dumps({"type": "message", "client_id": "sock-1", "text": "Hi both"}))
    out = [json.loads(await comm.receive_from(timeout=10))]
    while not await comm.receive_nothing(timeout=0.5):
        out.append(json.loads(await comm.receive_from()))
    await comm.send_to(text_data=json.dumps({"type": "retry", "side": "Alpha history", "seq": 2}))
    out.append(json.loads(await comm.receive_from(timeout=10)))
    await comm.disconnect()
    return True, None, out


def test_the_socket_sends_both_sides_by_letter_and_never_an_arm_name(pair_study: Study, signed: Any) -> None:
    client = Client()
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    ok, _, frames = async_to_sync(_pair_socket)(cookie, session.pk)
    assert ok
    sides = {f["side"] for f in frames}
    assert {"a", "b"} <= sides
    assert any("here (1)" in f["html"] and f["side"] == "a" for f in frames)
    assert any("here (1)" in f["html"] and f["side"] == "b" for f in frames)
    text = json.dumps(frames)
    assert "Alpha" not in text and "Beta" not in text and "history" not in text  # no arm name sent
    assert "The chat could not understand your browser" in frames[-1]["html"]  # a forged side is refused
    # side B's session is not a page of its own, and another worker's socket is refused
    b = sidebyside.twin_session(session)
    stored = Message.objects.count()
    assert async_to_sync(_pair_socket)(cookie, b.pk) == (False, 4403, [])
    other = Client()
    open_pair(other, pair_study, "someone-else")
    other_cookie = f"sessionid={other.cookies['sessionid'].value}".encode()
    assert async_to_sync(_pair_socket)(other_cookie, session.pk) == (False, 4403, [])
    assert Participant.objects.count() == 2 and Message.objects.count() == stored


async def _chat_socket_message(cookie: bytes, session_id: int) -> bool:
    """Whether the one-bot chat socket accepts ``session_id``'s page (and takes a message on it when it does)."""
    from evalsite.asgi import application  # noqa: TID251  (the socket of the assembled site)

    comm = WebsocketCommunicator(application, f"/ws/chat/{session_id}/", headers=[HOST, ORIGIN, (b"cookie", cookie)])
    if await refused(comm) is not None:
        return False
    await comm.send_to(text_data=json.dumps({"type": "message", "client_id": "one-side", "text": "Only you"}))
    await comm.receive_nothing(timeout=1)
    await comm.disconnect()
    return True


def test_the_one_bot_chat_socket_refuses_either_side_so_no_message_reaches_one_side_only(
    pair_study: Study, signed: Any
) -> None:
    """A worker who opens /ws/chat/ on side A's or side B's session by hand would send a message to one bot only:
    the two transcripts would no longer be the same conversation. Only the pair socket (/ws/pair/) is accepted."""
    client = Client()
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    b = sidebyside.twin_session(session)
    assert async_to_sync(_chat_socket_message)(cookie, session.pk) is False
    assert async_to_sync(_chat_socket_message)(cookie, b.pk) is False
    assert not Message.objects.filter(client_id="one-side").exists()


def test_a_reason_with_a_nul_character_or_html_is_stored_clean_and_shown_escaped(
    client: Client, pair_study: Study, signed: Any, each_database: str
) -> None:
    """PostgreSQL cannot store a NUL character in text (the vote was a 500 there; this test runs there too); no
    browser sends one, so it is dropped. HTML in a reason is text: the page shows it escaped when the vote is
    refused."""
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    client.post(f"/chat/{session.pk}/end/")
    refused = client.post(f"/chat/{session.pk}/rate/", vote_data("left", "<script>alert(1)</script>"))
    assert refused.status_code == 400
    assert "<script>alert(1)" not in refused.content.decode() and "&lt;script&gt;alert(1)" in refused.content.decode()
    assert (
        client.post(f"/chat/{session.pk}/rate/", vote_data("a", "It\x00 remembered <b>my</b> dog")).status_code == 302
    )
    assert SideBySideVote.objects.get().reason == "It remembered <b>my</b> dog"


def test_a_vote_while_side_b_has_not_ended_is_refused_not_a_server_error(
    client: Client, pair_study: Study, signed: Any
) -> None:
    """The sides end together (sidebyside.end_pair); were side B still chatting, the vote says so (not a 500)."""
    session = open_pair(client, pair_study)
    client.get(f"/chat/{session.pk}/")
    sidebyside.post_to_both(session.pk, "c1", "Hello")
    client.post(f"/chat/{session.pk}/end/")
    ChatSession.objects.filter(pk=sidebyside.twin_session(session).pk).update(status=ChatSession.Status.CHATTING)
    response = client.post(f"/chat/{session.pk}/rate/", vote_data("a"))
    assert response.status_code == 400 and "Chatbot B" in response.content.decode()
    assert not SideBySideVote.objects.exists()
