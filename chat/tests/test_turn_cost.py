"""What one chat turn costs the database (issue 12, "Turn cost"): a fixed number of queries, the same at the
second turn of a session as at the two-hundredth (nothing reloads the transcript or counts it again).

A turn is everything the socket does for one message in the inline job mode: the worker's message stored
(with its authenticity signals) and acknowledged, the reply job claimed, composed by the arm, stored with its
LLM call record, and the arm's per-turn update. The queries are listed in docs/operations.md."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chat import assignment
from chat.consumers import ChatConsumer
from chat.models import ChatSession, LLMCallRecord, Message
from runtime import push
from studies.models import Arm, Participant, Study

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("each_database")]

# without authenticity signals (their row is one insert more); two of them are the reply's job: inserted with the
# message, marked done with the reply (runtime/jobs.py)
MAX_QUERIES_PER_TURN = 8
TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
SIGNALS = {"pasted": False, "paste_chars": 0, "typed_chars": 30, "typing_ms": 4000, "hidden_ms": 0}


def _session(memory_system: str) -> ChatSession:
    study = Study.objects.create(
        name="turn cost",
        status=Study.Status.OPEN,
        sessions_per_episode=1,
        episodes_per_worker=1,
        min_user_turns=1,
        max_turns_per_session=1000,
        max_messages_per_minute=600,
    )
    study.add_default_metrics()
    Arm.objects.create(study=study, name="arm", memory_system=memory_system, llm_backend="scripted")
    participant = Participant.objects.create(study=study, external_id="w", source="invite", consented_at=timezone.now())
    assignment.assign_episode(participant)
    session = assignment.current_session(participant)
    assert session is not None
    return session


def _socket(session: ChatSession) -> ChatConsumer:
    consumer = ChatConsumer()
    consumer.session_id = session.pk
    return consumer


@pytest.fixture
def pushed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The frames pushed to the session's sockets."""
    frames: list[str] = []
    monkeypatch.setattr(push, "broadcast", lambda session_id, html: frames.append(html))
    return frames


def _turn(consumer: ChatConsumer, k: int, signals: bool = True) -> str:
    frame: dict[str, Any] = {"type": "message", "client_id": f"c{k}", "text": f"turn {k}: I walked my dog by the river"}
    if signals:
        frame["signals"] = SIGNALS
    return consumer._handle("message", frame)


def _queries_of_turn(consumer: ChatConsumer, k: int, pushed: list[str], *, signals: bool) -> tuple[list[str], int]:
    """The data queries of turn ``k`` and its number of transaction-control statements."""
    # The worker's last-seen time is written at most every 30 s (Participant.touch): not in this turn.
    Participant.objects.update(last_seen_at=timezone.now())
    pushed.clear()
    with CaptureQueriesContext(connection) as ctx:
        assert _turn(consumer, k, signals) == ""  # acknowledged through the session's group
    ack, *_, final = pushed
    assert f'data-client-id="c{k}"' in ack and 'data-status="pending"' in ack
    assert f'id="msg-{2 * k}" data-seq="{2 * k}" data-status="complete"' in final
    statements = [q["sql"] for q in ctx.captured_queries]
    control = [q for q in statements if q.lstrip().upper().startswith(TRANSACTION_CONTROL)]
    return [q for q in statements if q not in control], len(control)


@pytest.mark.parametrize("memory_system", ["none", "full_history"])
def test_a_turn_makes_the_same_few_queries_at_turn_2_and_at_turn_200(memory_system: str, pushed: list[str]) -> None:
    session = _session(memory_system)
    consumer = _socket(session)
    _turn(consumer, 1)
    early = [_queries_of_turn(consumer, k, pushed, signals=k % 2 == 1) for k in (2, 3)]
    for k in range(4, 200):
        _turn(consumer, k)
    late = [_queries_of_turn(consumer, k, pushed, signals=k % 2 == 1) for k in (200, 201)]

    (plain, plain_tx), (signed, signed_tx) = early[0], early[1]
    for (queries, tx), (queries_late, tx_late) in zip(early, late, strict=True):
        assert len(queries) == len(queries_late), "\n".join(["early:", *queries, "late:", *queries_late])
        assert tx == tx_late
    assert len(plain) <= MAX_QUERIES_PER_TURN, "\n".join(plain)
    assert len(signed) == len(plain) + 1, "\n".join(signed)  # the signals row
    # two transactions, the message's and the reply's (on SQLite BEGIN and COMMIT are statements too)
    assert plain_tx <= 4 and signed_tx <= 4
    # and each turn did all it should: 402 messages, every reply complete with its LLM call record
    rows = list(Message.objects.filter(session=session).order_by("seq").values_list("seq", "speaker", "status"))
    assert len(rows) == 402 and rows[-1] == (402, "bot", "complete")
    assert all(status == "complete" for _, _, status in rows)
    assert LLMCallRecord.objects.filter(session=session, purpose="reply").count() == 201
    assert Message.objects.get(session=session, seq=401).signals.typed_chars == 30
    assert not hasattr(Message.objects.get(session=session, seq=399), "signals")


def test_a_resent_message_costs_no_write_and_is_acknowledged_again(pushed: list[str]) -> None:
    session = _session("none")
    consumer = _socket(session)
    _turn(consumer, 1)
    with CaptureQueriesContext(connection) as ctx:
        html = _turn(consumer, 1)
    assert 'data-client-id="c1"' in html
    assert not [q for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE"))]
    assert Message.objects.filter(session=session).count() == 2
