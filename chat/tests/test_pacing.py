"""Issue 20, item 3: blinding by timing. Every arm's reply is shown no sooner than one common schedule (a minimum
delay, then the text at a typing speed), so the QC arm (no LLM: it answers at once) and a fast LLM arm cannot be
told apart by when their text appears; the true latencies are stored with the reply.

The schedule runs on a fake clock (``chat.pacing.now``/``sleep``: real time plus what the job slept), so these
tests take no seconds of waiting; the LLM arm is a scripted fake (it answers at once, like a fast model)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.test import TestCase
from django.utils import timezone

from chat import pacing, replies, turns
from chat.models import ChatSession, Episode, Message
from memory.llm import ScriptedLLM
from runtime import push
from studies.models import Arm, Participant, Study

pytestmark = pytest.mark.django_db

MIN_SECONDS, CPS = 2.0, 40.0
TOKEN = re.compile(r'beforeend:#msg-(\d+)-text"><span>(.*?)</span>', re.S)


class FakeClock:
    """Real time plus whatever the job slept: sleeping costs the test nothing."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        self.offset += max(0.0, seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, settings: Any) -> FakeClock:
    settings.CHAT_REPLY_PACING = True
    fake = FakeClock()
    monkeypatch.setattr(pacing, "now", fake.now)
    monkeypatch.setattr(pacing, "sleep", fake.sleep)
    return fake


@pytest.fixture
def frames(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> list[tuple[float, str]]:
    """Every frame pushed to the sockets, with the (fake) time it was pushed."""
    out: list[tuple[float, str]] = []
    monkeypatch.setattr(push, "broadcast", lambda session_id, html: out.append((clock.now(), html)))
    return out


@pytest.fixture
def paced(study: Study) -> Study:
    study.pace_min_seconds, study.pace_chars_per_second = MIN_SECONDS, CPS
    study.episodes_per_worker = 2
    study.save()
    return study


def _session(study: Study, arm: Arm, worker: str) -> ChatSession:
    p = Participant.objects.create(study=study, external_id=worker, source="invite", consented_at=timezone.now())
    ep = Episode.objects.create(participant=p, arm=arm, index=1)
    return ChatSession.objects.create(episode=ep, index=1, status="ready", simulated_start=study.session_start(1))


def _reply(session: ChatSession, text: str = "I adore my cat Whiskers") -> Message:
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns.post_user_message(session, "c1", text)
    return Message.objects.get(session=session, speaker="bot")


def _timeline(frames: list[tuple[float, str]], reply: Message) -> list[tuple[float, int]]:
    """(time since the request, characters of the reply on the page) after each frame of the reply."""
    assert reply.requested_at is not None
    start, shown, out = reply.requested_at.timestamp(), 0, []
    for at, html in frames:
        for seq, piece in TOKEN.findall(html):
            if int(seq) == reply.seq:
                shown += len(piece)
                out.append((at - start, shown))
        if f'id="msg-{reply.seq}" data-seq="{reply.seq}" data-status="complete"' in html:
            out.append((at - start, len(reply.text)))
    return out


def _assert_on_schedule(timeline: list[tuple[float, int]], reply: Message) -> float:
    """Never more text than the schedule allows at any moment; the whole reply within a step of its due time.
    Returns when the whole reply was shown, after the request."""
    for at, chars in timeline:
        assert chars <= max(0, int((at - MIN_SECONDS) * CPS + 1e-6)), (at, chars)
    assert timeline and timeline[0][0] >= MIN_SECONDS
    finished = timeline[-1][0]
    due = MIN_SECONDS + len(reply.text) / CPS
    assert due <= finished <= due + 0.15, (finished, due)
    return finished


def test_the_qc_arm_and_a_fast_llm_arm_show_their_replies_on_the_same_schedule(
    paced: Study, frames: list[tuple[float, str]], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat import arms

    qc = Arm.objects.create(study=paced, name="QC", memory_system="qc")
    llm_arm = paced.arms.get(memory_system="none")
    fast = ScriptedLLM(["That is lovely! How old is Whiskers, and what does she like to do all day long?"])
    monkeypatch.setattr(arms, "build_llm", lambda arm: fast)

    qc_reply = _reply(_session(paced, qc, "w-qc"))
    qc_timeline = _timeline(frames, qc_reply)
    frames.clear()
    clock.offset = 0.0  # the second worker's clock: the first reply's waiting is not theirs
    llm_reply = _reply(_session(paced, llm_arm, "w-llm"))
    llm_timeline = _timeline(frames, llm_reply)

    for reply, timeline in ((qc_reply, qc_timeline), (llm_reply, llm_timeline)):
        assert reply.status == Message.Status.COMPLETE
        finished = _assert_on_schedule(timeline, reply)
        assert len(timeline) > 3  # the text arrives in steps at the typing speed, not in one piece at the end
        # the true latency is stored: the model (or the QC bot) was done long before the reply was shown
        assert reply.generated_ms is not None and reply.first_token_ms is not None and reply.shown_ms is not None
        assert reply.first_token_ms <= reply.generated_ms < 1000 * MIN_SECONDS <= reply.shown_ms
        assert abs(reply.shown_ms / 1000 - finished) < 0.1
    # the same length would take the same time: what is left to tell the arms apart is the text itself
    per_char = [(t[-1][0] - MIN_SECONDS) / len(r.text) for r, t in ((qc_reply, qc_timeline), (llm_reply, llm_timeline))]
    assert abs(per_char[0] - per_char[1]) < 0.15 / min(len(qc_reply.text), len(llm_reply.text)) + 1e-3


def test_a_model_slower_than_the_schedule_shows_its_text_as_it_comes(
    paced: Study, frames: list[tuple[float, str]], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat import arms

    class Slow(ScriptedLLM):
        def stream(self, messages: Any, **kw: Any) -> Any:
            for word in ["Sorry", "for", "the", "wait,", "I", "was", "thinking", "about", "it."]:
                clock.sleep(1.0)  # one second per word: far slower than 40 characters a second
                yield word + " "

    monkeypatch.setattr(arms, "build_llm", lambda arm: Slow())
    reply = _reply(_session(paced, paced.arms.get(memory_system="none"), "w-slow"))
    assert reply.status == Message.Status.COMPLETE and reply.text.startswith("Sorry for the wait")
    assert reply.generated_ms is not None and reply.shown_ms is not None and reply.first_token_ms is not None
    assert reply.generated_ms >= 9000 and reply.shown_ms - reply.generated_ms < 200  # no extra wait on top
    assert 1000 <= reply.first_token_ms < 1500


def test_a_study_that_does_not_pace_shows_the_reply_when_it_is_written(
    paced: Study, frames: list[tuple[float, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat import arms

    paced.pace_replies = False
    paced.save()
    monkeypatch.setattr(arms, "build_llm", lambda arm: ScriptedLLM(["Hello there, nice to meet you."]))
    reply = _reply(_session(paced, paced.arms.get(memory_system="none"), "w-unpaced"))
    assert reply.shown_ms is not None and reply.shown_ms < 1000  # no schedule: no wait
    assert reply.generated_ms is not None and reply.generated_ms <= reply.shown_ms


def test_a_retried_reply_is_paced_and_timed_from_the_retry(
    paced: Study, frames: list[tuple[float, str]], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat import arms
    from memory.llm import LLMError

    llm = ScriptedLLM([LLMError("down"), "Back again, sorry about that."])
    monkeypatch.setattr(arms, "build_llm", lambda arm: llm)
    session = _session(paced, paced.arms.get(memory_system="none"), "w-retry")
    failed = _reply(session)
    assert failed.status == Message.Status.FAILED and failed.shown_ms is None
    # the worker read the failure for a minute, then pressed Retry
    Message.objects.filter(pk=failed.pk).update(requested_at=failed.requested_at - timezone.timedelta(seconds=60))  # type: ignore[operator]
    session.refresh_from_db()
    with TestCase.captureOnCommitCallbacks(execute=True):
        replies.retry_reply(session, failed.seq)
    reply = Message.objects.get(pk=failed.pk)
    assert reply.status == Message.Status.COMPLETE and reply.requested_at is not None
    assert reply.requested_at > failed.requested_at  # type: ignore[operator]
    assert reply.shown_ms is not None and reply.shown_ms < 1000 * (MIN_SECONDS + len(reply.text) / CPS) + 200


def test_the_schedule_and_the_pacer() -> None:
    s = pacing.Schedule(start=100.0, min_seconds=2.0, chars_per_second=10.0)
    assert s.allowed(101.9) == 0 and s.allowed(102.0) == 0 and s.allowed(102.35) == 3 and s.due(30) == 105.0
    sent: list[str] = []
    pacer = pacing.Pacer(None, None)
    assert pacer.release(40) == 40  # no schedule: everything at once
    assert pacer.drain("abc", 1, sent.append, lost=lambda: False, step=0.05) and sent == []
    assert pacer.latencies() == {"first_token_ms": None, "generated_ms": None, "shown_ms": None}
