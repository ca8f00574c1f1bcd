"""An episode with a finished first session: messages, ratings, a memory snapshot with a trace, LLM calls."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from chat.models import ArmJob, ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
from studies.models import Arm, Participant, Study


def passed_check(arm: Arm, *, ready: bool = True) -> ArmJob:
    """A finished readiness check of the arm as it is configured now (``ready`` or with one failed check)."""
    checks = [
        {"name": "reply_no_prompt_text", "score": 1.0, "threshold": 1.0, "passed": True, "why": "no prompt text"},
        {"name": "operation_accuracy", "score": 0.9 if ready else 0.2, "threshold": 0.7, "passed": ready, "why": "ops"},
    ]
    return ArmJob.objects.create(
        arm=arm,
        kind=ArmJob.Kind.READINESS,
        status=ArmJob.Status.DONE,
        config=arm.llm_config(),
        result={
            "arm": arm.memory_system,
            "backend": arm.resolved_backend,
            "model": arm.resolved_model,
            "ready": ready,
            "checks": checks,
        },
    )


def make_ready(study: Study) -> None:
    """Every arm of the study passed its readiness checks."""
    for arm in study.arms.all():
        passed_check(arm)


@pytest.fixture
def finished_episode(study: Study) -> Episode:
    return make_finished_episode(study)


def make_finished_episode(study: Study) -> Episode:
    participant = Participant.objects.create(
        study=study,
        external_id="PID-SECRET-123",
        source=Participant.Source.PROLIFIC,
        consented_at=dt.datetime.now(dt.UTC),
    )
    arm = study.arms.get(memory_system="full_history")
    episode = Episode.objects.create(participant=participant, arm=arm, index=1)
    s1 = ChatSession.objects.create(
        episode=episode, index=1, status=ChatSession.Status.DONE, simulated_start=study.session_start(1)
    )
    ChatSession.objects.create(
        episode=episode, index=2, status=ChatSession.Status.READY, simulated_start=study.session_start(2)
    )
    Message.objects.create(session=s1, seq=1, client_id="c1", speaker="user", text="I adopted a cat <b>Miso</b>.")
    bot = Message.objects.create(session=s1, seq=2, speaker="bot", text="How lovely! How old is Miso?")
    for i, metric in enumerate(study.metrics.all()):
        Rating.objects.create(session=s1, metric=metric, value=60 + i)
    trace: dict[str, Any] = {
        "summary": ["The user adopted a cat named Miso."],
        "memory_before": ["The user lives in Lyon."],
        "memory_after": ["The user lives in Lyon.", "The user adopted a cat named Miso."],
        "operations": [
            {
                "i": 0,
                "j": 0,
                "m": "The user lives in Lyon.",
                "s": "The user adopted a cat named Miso.",
                "op": "APPEND",
                "raw": "APPEND",
                "fallback": False,
            },
            {
                "i": 0,
                "j": 1,
                "m": "The user lives in Lyon.",
                "s": "The user likes tea.",
                "op": "PASS",
                "raw": "no idea",
                "fallback": True,
            },
        ],
        "fallbacks": [{"where": "memory_operation", "reason": "unparsable reply", "raw": "no idea"}],
        "llm_calls": [
            {
                "purpose": "summarize_session",
                "model": "scripted",
                "messages": [{"role": "user", "content": "Summarize"}],
                "reply": "The user adopted a cat named Miso.",
                "latency_ms": 3.0,
                "prompt_tokens": 9,
                "completion_tokens": 8,
                "error": None,
            }
        ],
    }
    MemorySnapshot.objects.create(
        session=s1,
        status=MemorySnapshot.Status.DONE,
        state={"history": [["user", "I adopted a cat"]]},
        trace=trace,
        attempts=1,
    )
    LLMCallRecord.objects.create(
        session=s1,
        message=bot,
        purpose="reply",
        model="scripted-model",
        messages=[
            {"role": "system", "content": "You are a friendly chatbot."},
            {"role": "user", "content": "I adopted a cat"},
        ],
        reply="How lovely! How old is Miso?",
        latency_ms=12.5,
        prompt_tokens=30,
        completion_tokens=9,
    )
    return episode
