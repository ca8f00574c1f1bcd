"""Only arms that declare memory-operation pairs feed the pairs queue, from the key they declare."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from annotation.models import Queue
from annotation.sources import items_from_study
from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.registry import build_system
from memory.tests.fake_llm import fake_llm

pytestmark = pytest.mark.django_db

PAIRS = [{"i": 0, "j": 0, "m": "Has a cold", "s": "Cold is all better now", "op": "DELETE"}]


def snapshot(study: Any, memory_system: str, trace: dict[str, Any], pid: str) -> Any:
    from chat.models import ChatSession, Episode, MemorySnapshot, Message
    from studies.models import Arm, Participant

    arm = Arm.objects.create(study=study, name=f"arm {memory_system}", memory_system=memory_system)
    participant = Participant.objects.create(study=study, external_id=pid, source="invite")
    episode = Episode.objects.create(participant=participant, arm=arm, index=1)
    chat = ChatSession.objects.create(episode=episode, index=1, simulated_start=timezone.now())
    Message.objects.create(session=chat, seq=1, speaker="user", text="My cold is all better now.")
    return MemorySnapshot.objects.create(session=chat, status="done", state={}, trace=trace)


def test_a_trace_key_named_operations_feeds_nothing_unless_the_arm_declares_it(study: Any) -> None:
    trace = {"operations": PAIRS, "memory_before": ["Has a cold"], "summary": ["Cold is all better now"]}
    snapshot(study, "full_history", trace, "P1")  # an arm that makes no operation decisions
    assert items_from_study(study, kind=Queue.Kind.PAIRS) == []
    assert items_from_study(study, kind=Queue.Kind.SUMMARIES) == []
    snap = snapshot(study, "memory_update", trace, "P2")  # memory_update declares "operations"
    (item,) = items_from_study(study, kind=Queue.Kind.PAIRS)
    assert item["external_id"] == f"snapshot:{snap.pk}:0:0" and item["payload"]["operator_op"] == "DELETE"
    assert len(items_from_study(study, kind=Queue.Kind.SUMMARIES)) == 1


def test_mem0_operations_enter_the_queue_one_unit_per_exchange(study: Any) -> None:
    system = build_system("mem0", llm=fake_llm(), embedder=HashingEmbedder())
    now = dt.datetime(2026, 3, 2, 18, tzinfo=dt.UTC)
    first = system.end_session(
        system.initial_state(), [Turn("user", "I have a cold and take medicine."), Turn("bot", "Get well!")], now
    )
    second = system.end_session(
        first.state,
        [
            Turn("user", "My cold is all better now."),
            Turn("bot", "Great!"),
            Turn("user", "I have a cold again."),
            Turn("bot", "Oh no."),
        ],
        now + dt.timedelta(days=7),
    )
    snap = snapshot(study, "mem0", second.trace, "P3")
    specs = items_from_study(study, kind=Queue.Kind.PAIRS)
    units = second.trace["operation_units"]
    assert len(specs) == sum(len(u["pairs"]) for u in units) > 0
    assert {s["unit"] for s in specs} == {f"snapshot:{snap.pk}:u{n}" for n, u in enumerate(units) if u["pairs"]}
    assert "DELETE" in {s["payload"]["operator_op"] for s in specs}
    assert items_from_study(study, kind=Queue.Kind.SUMMARIES) == []  # mem0 declares no sentence summary
