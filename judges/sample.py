"""The judge sample: finished sessions of a study drawn stratified by arm into an annotation queue of kind
``scores``, where annotators score them on the study's own slider statements (the admission test's humans).

Stratified: the sample is split as evenly as the arms allow (each arm gets ``size // arms`` sessions, the
remainder going to the arms with the most sessions left), drawn at random with a fixed seed, so the judge
is tested on every arm and not mostly on the arm that had the most workers. The QC arm is left out (it is
built to be bad; agreeing about it says little about the arms being compared).
"""

from __future__ import annotations

import random
from typing import Any

from django.db import transaction

from annotation.models import Item, Queue
from annotation.sources import transcript_of
from chat.models import ChatSession
from studies.models import Study

MIN_SAMPLE = 50
MIN_LABELS = 3


class SampleError(ValueError):
    pass


def statements(study: Study) -> list[dict[str, str]]:
    """The study's slider statements as the workers saw them."""
    return [
        {"key": m.key, "statement": m.statement, "low": m.low_label, "high": m.high_label}
        for m in study.metrics.order_by("order", "id")
    ]


def finished_sessions(study: Study) -> list[ChatSession]:
    """The study's rated sessions outside the QC arm, oldest first."""
    return list(
        ChatSession.objects.filter(
            episode__participant__study=study, status=ChatSession.Status.DONE, episode__arm__is_qc=False
        )
        .select_related("episode__arm")
        .order_by("episode_id", "index")
    )


def stratified(sessions: list[ChatSession], size: int, seed: int) -> list[ChatSession]:
    by_arm: dict[str, list[ChatSession]] = {}
    for s in sessions:
        by_arm.setdefault(s.episode.arm.name, []).append(s)
    rng = random.Random(seed)
    for group in by_arm.values():
        rng.shuffle(group)
    quota = dict.fromkeys(by_arm, 0)
    left = min(size, len(sessions))
    while left > 0:
        open_arms = [a for a in by_arm if quota[a] < len(by_arm[a])]
        # the next session goes to the arm with the fewest drawn so far (ties: the most left, then name)
        arm = min(open_arms, key=lambda a: (quota[a], -(len(by_arm[a]) - quota[a]), a))
        quota[arm] += 1
        left -= 1
    return [s for arm in sorted(by_arm) for s in by_arm[arm][: quota[arm]]]


def create_sample(
    study: Study, *, size: int = 60, labels_per_item: int = MIN_LABELS, seed: int = 0, created_by: Any = None
) -> Queue:
    """A new ``scores`` queue with ``size`` sessions of ``study``, stratified by arm."""
    if size < MIN_SAMPLE:
        raise SampleError(f"The admission test needs at least {MIN_SAMPLE} sessions in the sample, not {size}.")
    if labels_per_item < MIN_LABELS:
        raise SampleError(f"Each session needs at least {MIN_LABELS} annotators (the alt-test leaves one out).")
    items = statements(study)
    if not items:
        raise SampleError("The study has no slider statements to score.")
    sessions = finished_sessions(study)
    if len(sessions) < size:
        raise SampleError(
            f"The study has {len(sessions)} finished sessions outside the QC arm; the sample needs {size}."
        )
    chosen = stratified(sessions, size, seed)
    order = list(range(len(chosen)))
    random.Random(seed + 1).shuffle(order)  # annotators do not meet the arms in blocks
    with transaction.atomic():
        queue = Queue.objects.create(
            name=f"{study.name}: judge sample",
            kind=Queue.Kind.SCORES,
            study=study,
            labels_per_item=labels_per_item,
            gold_min_votes=1,
            instructions="Score each session on the statements the study's workers answered.",
            created_by=created_by,
        )
        Item.objects.bulk_create(
            Item(
                queue=queue,
                position=pos,
                external_id=f"session-{s.pk}",
                payload={"transcript": transcript_of(s), "statements": items},
                meta={"session": s.pk, "arm": s.episode.arm.name, "episode": s.episode_id, "index": s.index},
                required=labels_per_item,
            )
            for pos, s in zip(order, chosen, strict=True)
        )
    return queue


def sample_queue(study: Study) -> Queue | None:
    """The study's newest judge sample."""
    return Queue.objects.filter(study=study, kind=Queue.Kind.SCORES).order_by("-created_at", "-id").first()
