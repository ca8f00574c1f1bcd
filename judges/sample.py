"""The judge sample: finished sessions of a study drawn stratified by arm into an annotation queue of kind
``scores``, where annotators score them on the study's own slider statements (the admission test's humans),
and, in a study with persona cards, probe answers drawn the same way, which annotators label on one statement
(:data:`PROBE_STATEMENT`: does the answer give the fact as it stands now?): the admission test on probe answers.

Stratified: the sample is split as evenly as the arms allow (each arm gets ``size // arms`` sessions, the
remainder going to the arms with the most sessions left), drawn at random with a fixed seed, so the judge
is tested on every arm and not mostly on the arm that had the most workers. The QC arm is left out (it is
built to be bad; agreeing about it says little about the arms being compared). Probe answers: answered probes of
current and updated facts that the worker told, free-text facts first within each arm (the answers the judge
scores in the report), then the others (the same task on a fact with a fixed value).
"""

from __future__ import annotations

import random
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from annotation.models import Item, Queue
from annotation.sources import transcript_of
from chat.models import ChatSession, ProbeResult
from studies.models import Study

MIN_SAMPLE = 50
MIN_LABELS = 3
PROBE_METRIC = "probe_correct"
PROBE_STATEMENT = {
    "key": PROBE_METRIC,
    "statement": "The bot's answer gives the fact as it stands now (in any wording).",
    "low": "Wrong (another value, an outdated one, or no answer)",
    "high": "Correct",
}


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


def judged_probes(study: Study) -> QuerySet[ProbeResult]:
    """The study's probe answers a judge scores on its own: free-text facts (current or updated), told by the
    worker, answered, outside the QC arm."""
    return answered_probes(study).filter(item__free_text=True)


def answered_probes(study: Study) -> QuerySet[ProbeResult]:
    """Probes of current and updated facts the worker told, with an answer, outside the QC arm."""
    return (
        ProbeResult.objects.filter(session__episode__participant__study=study, session__episode__arm__is_qc=False,
                                   kind__in=["current", "updated"], told=True)
        .exclude(answer="")
        .select_related("session__episode__arm")
        .order_by("pk")
    )  # fmt: skip


def stratified(sessions: list[Any], size: int, seed: int, *, first: Any = None) -> list[Any]:
    """``size`` of ``sessions`` (or probes), as evenly over their arms as they allow, at random with ``seed``;
    within an arm the ones ``first`` says true of come first."""
    by_arm: dict[str, list[Any]] = {}
    for s in sessions:
        by_arm.setdefault(s.episode.arm.name if isinstance(s, ChatSession) else s.session.episode.arm.name, []).append(
            s
        )
    rng = random.Random(seed)
    for group in by_arm.values():
        rng.shuffle(group)
        if first is not None:
            group.sort(key=lambda s: not first(s))  # stable: the shuffled order within each kind
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
    study: Study,
    *,
    size: int = 60,
    labels_per_item: int = MIN_LABELS,
    seed: int = 0,
    created_by: Any = None,
    probe_size: int | None = None,
) -> Queue:
    """A new ``scores`` queue with ``size`` sessions of ``study``, stratified by arm, and ``probe_size`` probe
    answers (default: ``size``; all there are when fewer; 0: none), stratified by arm, free-text facts first."""
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
    pool = list(answered_probes(study))
    probes = stratified(pool, size if probe_size is None else probe_size, seed, first=lambda p: p.item.get("free_text"))
    order = list(range(len(chosen) + len(probes)))
    random.Random(seed + 1).shuffle(order)  # annotators do not meet the arms (or the probes) in blocks
    with transaction.atomic():
        queue = Queue.objects.create(
            name=f"{study.name}: judge sample",
            kind=Queue.Kind.SCORES,
            study=study,
            labels_per_item=labels_per_item,
            gold_min_votes=1,
            instructions="Score each session on the statements the study's workers answered"
            + ("; label each probe answer: does it give the fact as it stands now?" if probes else "."),
            created_by=created_by,
        )
        Item.objects.bulk_create(
            [
                Item(
                    queue=queue,
                    position=pos,
                    external_id=f"session-{s.pk}",
                    payload={"transcript": transcript_of(s), "statements": items},
                    meta={"session": s.pk, "arm": s.episode.arm.name, "episode": s.episode_id, "index": s.index},
                    required=labels_per_item,
                )
                for pos, s in zip(order, chosen, strict=False)
            ]
            + [
                Item(
                    queue=queue,
                    position=pos,
                    external_id=f"probe-{p.pk}",
                    payload={"transcript": [], "probe": probe_payload(p), "statements": [PROBE_STATEMENT]},
                    # "session": the worker's deletion deletes the item too (annotation/privacy.py)
                    meta={
                        "probe": p.pk,
                        "session": p.session_id,
                        "arm": p.session.episode.arm.name,
                        "free_text": bool(p.item.get("free_text")),
                    },  # fmt: skip
                    required=labels_per_item,
                )
                for pos, p in zip(order[len(chosen) :], probes, strict=True)
            ]
        )
    return queue


def probe_payload(probe: ProbeResult) -> dict[str, Any]:
    """What an annotator sees of a probe answer: the question, the fact as it stands now (and its other
    spellings), the outdated values, and the bot's answer."""
    item = probe.item or {}
    gold = item.get("gold") or {}
    return {
        "question": probe.question,
        "fact": gold.get("value", ""),
        "aliases": list(gold.get("aliases", [])),
        "outdated": [v.get("value", "") for v in item.get("stale_values", [])],
        "answer": probe.answer,
        "mode": probe.mode,
    }


def sample_queue(study: Study) -> Queue | None:
    """The study's newest judge sample."""
    return Queue.objects.filter(study=study, kind=Queue.Kind.SCORES).order_by("-created_at", "-id").first()
