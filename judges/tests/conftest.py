"""A study whose sessions have a known quality, annotated by simulated annotators, and fake
OpenAI-compatible judges (memory/tests/fake_openai.py): one that agrees with the annotators and one that
answers at random. The fakes read the session's quality from a marker in its transcript ("[quality 63]"):
a scripted stand-in for a capable model, not a model's judgement."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import Group, User

from annotation import services
from annotation.models import Queue
from chat.models import ChatSession, Episode, Message, Rating
from judges.sample import create_sample
from memory.tests.fake_openai import FaultyOpenAI
from studies.models import Arm, Participant, Study

ARM_QUALITY = {"No memory": 30.0, "Full history": 50.0, "Memory bank": 70.0}
_MARK = re.compile(r"\[quality (\d+(?:\.\d+)?)\]")


def quality_of(text: str) -> float:
    match = _MARK.search(text)
    assert match, "the fake judge was sent a session without its quality marker"
    return float(match.group(1))


@pytest.fixture
def judged_study(study: Study) -> Study:
    """60 finished sessions (20 workers x 3 arms, one session each), two statements, rated by the workers."""
    rng = np.random.default_rng(7)
    Arm.objects.create(study=study, name="Memory bank", memory_system="memorybank", llm_backend="scripted")
    study.metrics.exclude(key__in=["engagingness", "memorability"]).delete()
    assert study.metrics.count() == 2, list(study.metrics.values_list("key", flat=True))
    metrics = list(study.metrics.all())
    for w in range(20):
        p = Participant.objects.create(study=study, external_id=f"W{w:03d}", source=Participant.Source.INVITE)
        for i, arm in enumerate(study.arms.order_by("id"), start=1):
            quality = float(np.clip(ARM_QUALITY[arm.name] + rng.normal(0, 12), 0, 100))
            ep = Episode.objects.create(participant=p, arm=arm, index=i, status=Episode.Status.COMPLETED)
            cs = ChatSession.objects.create(
                episode=ep, index=1, status=ChatSession.Status.DONE, simulated_start=study.session_start(1)
            )
            Message.objects.create(
                session=cs, seq=1, client_id="c1", speaker="user", text=f"Hello [quality {quality:.1f}]"
            )
            Message.objects.create(session=cs, seq=2, speaker="bot", text="Nice to see you again! How was the trip?")
            Rating.objects.bulk_create(
                Rating(session=cs, metric=m, value=int(np.clip(round(quality + rng.normal(0, 10)), 0, 100)))
                for m in metrics
            )
    return study


@pytest.fixture
def annotated_sample(judged_study: Study, researcher: User) -> Queue:
    """The judge sample (all 60 sessions, stratified by arm), scored by 3 simulated annotators: quality + N(0, 10)."""
    queue = create_sample(judged_study, size=60, labels_per_item=3, created_by=researcher)
    rng = np.random.default_rng(11)
    group, _ = Group.objects.get_or_create(name="annotators")
    for k in range(3):
        user = User.objects.create_user(f"judge-annotator{k}", password="pw")
        user.groups.add(group)
        while (assignment := services.claim_next_item(queue, user)) is not None:
            quality = quality_of(" ".join(t["text"] for t in assignment.item.payload["transcript"]))
            scores = {s["key"]: float(np.clip(round(quality + rng.normal(0, 10)), 0, 100))
                      for s in assignment.item.payload["statements"]}  # fmt: skip
            services.submit_scores(assignment.pk, annotator=user, scores=scores)
    return queue


def _last_user(messages: list[dict[str, str]]) -> str:
    return next(m["content"] for m in reversed(messages) if m.get("role") == "user")


def agreeing_reply(seed: int = 3) -> Callable[[list[dict[str, str]]], str]:
    """A judge close to the annotators (quality + N(0, 1)) that labels answers against the gold answer
    (lenient rubric: anything on topic is CORRECT, as mem0's judge prompt asks), and a probe answer CORRECT
    when it holds the card's current fact word for word."""
    rng = np.random.default_rng(seed)

    def reply(messages: list[dict[str, str]]) -> str:
        prompt = _last_user(messages)
        if "<session>" in prompt:
            score = float(np.clip(quality_of(prompt) + rng.normal(0, 1), 0, 100))
            return f'The bot fits the statement this well. {{"score": {round(score)}}}'
        if "Current fact:" in prompt:  # a persona-card probe answer (probe-standard-v1.txt)
            fact = re.search(r"Current fact: (.*)", prompt).group(1).strip()  # type: ignore[union-attr]
            answer = re.search(r"Generated answer: (.*)", prompt).group(1).strip()  # type: ignore[union-attr]
            return f'{{"label": "{"CORRECT" if fact.lower() in answer.lower() else "WRONG"}"}}'
        gold = re.search(r"Gold answer: (.*)", prompt).group(1).strip()  # type: ignore[union-attr]
        answer = re.search(r"Generated answer: (.*)", prompt).group(1).strip()  # type: ignore[union-attr]
        label = "CORRECT" if answer == gold or "Be generous" in prompt else "WRONG"
        return f'Compared with the gold answer. {{"label": "{label}"}}'

    return reply


def random_reply(seed: int = 5) -> Callable[[list[dict[str, str]]], str]:
    rng = np.random.default_rng(seed)

    def reply(messages: list[dict[str, str]]) -> str:
        if "<session>" in _last_user(messages):
            return f'{{"score": {int(rng.integers(0, 101))}}}'
        return f'{{"label": "{"CORRECT" if rng.random() < 0.5 else "WRONG"}"}}'

    return reply


@pytest.fixture
def fake_judges() -> Iterator[dict[str, Any]]:
    with (
        FaultyOpenAI(agreeing_reply(), model="fake-agreeing") as good,
        FaultyOpenAI(random_reply(), model="fake-random") as bad,
    ):
        yield {"good": good, "bad": bad}
