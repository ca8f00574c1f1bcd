"""The ACUTE-Eval workflow: judges arrive, get pairs (balanced over pairs of arms, sides at random, the same
persona card where possible, check pairs at random positions), answer every question with a reason, and are
excluded when they fail the checks.

Pairs are drawn when a judge needs one, not from a file made beforehand: the study may still be running (episodes
finish while judges work), and balancing over the judgements actually made keeps the pairs of arms even when
judges drop out or fail their checks (their judgements stop counting, so their pairs go back to the pool).
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from chat.models import Episode
from pairwise.models import Comparison, Judge, Judgement, Vote
from pairwise.questions import QUESTIONS, REASON_MAX_CHARS, REASON_MIN_CHARS
from studies.models import Arm

PROLIFIC_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")  # as studies.entry accepts


class PairwiseError(Exception):
    """A request the workflow refuses, with the sentence to show."""


def episode_card(episode: Episode) -> str:
    """The id of the persona card an episode was played with, when the study uses persona cards; '' otherwise.
    Persona cards keep the whole card on the episode (``Episode.persona``: ``{"card": {"id": ...}, ...}``,
    chat/personas.py); where the field does not exist (a study or a version without cards) every episode has
    none and pairs are drawn without it."""
    persona = getattr(episode, "persona", None)
    if isinstance(persona, dict):
        card = persona.get("card")
        if isinstance(card, dict) and card.get("id") not in (None, ""):
            return str(card["id"])
    return ""


# ----------------------------------------------------------------------------------------------- judges


def _check_positions(comparison: Comparison, rng: random.Random) -> list[int]:
    slots = range(1, comparison.slots_per_judge + 1)
    return sorted(rng.sample(slots, int(comparison.checks_per_judge)))


def join_crowd(comparison: Comparison, prolific_id: str, study_id: str = "", session_id: str = "") -> Judge:
    """The judge with this Prolific ID (created the first time), or :class:`PairwiseError`."""
    if comparison.audience != Comparison.Audience.CROWD:
        raise PairwiseError("This comparison is for annotators: please log in and open it from the annotation page.")
    if not PROLIFIC_ID.match(prolific_id or ""):
        raise PairwiseError("Please open the study from the link on Prolific (it carries your Prolific ID).")
    # a pseudonymised judge is nobody's to continue (its ID was dropped: the same person coming back is a new judge)
    judge = Judge.objects.filter(comparison=comparison, external_id=prolific_id, pseudonymised_at__isnull=True).first()
    if judge is not None:
        return judge
    if not comparison.is_open:
        raise PairwiseError("This study is not taking participants at the moment.")
    with transaction.atomic():
        locked = Comparison.objects.select_for_update().get(pk=comparison.pk)
        if locked.quota is not None and locked.judges.count() >= locked.quota:
            raise PairwiseError("This study is full. Thank you for your interest.")
        try:
            with transaction.atomic():
                return Judge.objects.create(
                    comparison=comparison, source=Judge.Source.PROLIFIC, external_id=prolific_id,
                    prolific_study_id=study_id[:128], prolific_session_id=session_id[:128],
                    check_positions=_check_positions(comparison, random.Random()),
                )  # fmt: skip
        except IntegrityError:  # the same PID arriving twice at once
            return Judge.objects.get(comparison=comparison, external_id=prolific_id, pseudonymised_at__isnull=True)


def join_annotator(comparison: Comparison, user: User) -> Judge:
    if comparison.audience != Comparison.Audience.ANNOTATORS:
        raise PairwiseError("This comparison is judged by crowdworkers from its study link, not by annotators.")
    judge = Judge.objects.filter(comparison=comparison, user=user).first()
    if judge is not None:
        return judge
    if not comparison.is_open:
        raise PairwiseError("This comparison is not open.")
    try:
        with transaction.atomic():
            return Judge.objects.create(
                comparison=comparison, source=Judge.Source.ANNOTATOR, user=user, consented_at=timezone.now(),
                check_positions=_check_positions(comparison, random.Random()),
            )  # fmt: skip
    except IntegrityError:
        return Judge.objects.get(comparison=comparison, user=user)


# ---------------------------------------------------------------------------------------------- drawing


@dataclass
class _Pool:
    """The comparison's finished episodes by arm, how often each was shown, and the load of each pair of arms."""

    by_arm: dict[int, list[Episode]]
    qc_arms: set[int]
    used: Counter[int]
    load: Counter[tuple[int, int]]


def _pool(comparison: Comparison) -> _Pool:
    arms = list(Arm.objects.filter(study=comparison.study_id, active=True))
    episodes = Episode.objects.filter(
        participant__study=comparison.study_id, status=Episode.Status.COMPLETED, arm__in=arms
    ).order_by("id")
    by_arm: dict[int, list[Episode]] = defaultdict(list)
    for e in episodes:
        by_arm[e.arm_id].append(e)
    shown = Judgement.objects.filter(judge__comparison=comparison)
    used: Counter[int] = Counter()
    load: Counter[tuple[int, int]] = Counter()
    for left, right, la, ra, check, passed in shown.values_list(
        "left_id", "right_id", "left_arm_id", "right_arm_id", "is_check", "judge__passed_checks"
    ):
        used[left] += 1
        used[right] += 1
        if not check and passed is not False:
            load[(min(la, ra), max(la, ra))] += 1
    return _Pool(by_arm, {a.pk for a in arms if a.is_qc}, used, load)


def _pick(pool: _Pool, first: list[Episode], second: list[Episode], rng: random.Random) -> tuple[Episode, Episode, str]:
    """Two episodes, one from each list: the same persona card when both lists have one, else any; the least
    shown first, ties at random."""
    cards_first = {episode_card(e) for e in first} - {""}
    cards_second = {episode_card(e) for e in second} - {""}
    common = sorted(cards_first & cards_second)
    card = ""
    if common:
        card = rng.choice(common)
        first = [e for e in first if episode_card(e) == card]
        second = [e for e in second if episode_card(e) == card]

    def least(episodes: list[Episode]) -> Episode:
        low = min(pool.used[e.pk] for e in episodes)
        return rng.choice([e for e in episodes if pool.used[e.pk] == low])

    a = least(first)
    b = least([e for e in second if e.participant_id != a.participant_id] or second)
    return a, b, card


def _draw(judge: Judge, check: bool, rng: random.Random) -> tuple[Episode, Episode, str, bool] | None:
    """The next pair for ``judge`` (a check pair if ``check``): episodes it has not seen, from the least-judged
    pair of arms; None when there is none (an annotator also gets none once every pair of arms has its target)."""
    comparison = judge.comparison
    pool = _pool(comparison)
    seen: set[int] = set()
    for left, right in judge.judgements.values_list("left_id", "right_id"):
        seen.update((left, right))
    fresh = {arm: [e for e in eps if e.pk not in seen] for arm, eps in pool.by_arm.items()}
    real = sorted(a for a, eps in fresh.items() if eps and a not in pool.qc_arms)
    if check:
        qc = [a for a, eps in fresh.items() if eps and a in pool.qc_arms]
        if not qc or not real:
            return None
        arm = rng.choice(sorted(real, key=lambda a: (sum(pool.used[e.pk] for e in pool.by_arm[a]), rng.random()))[:1])
        a, b, card = _pick(pool, fresh[arm], fresh[qc[0]], rng)
        return a, b, card, True
    pairs = list(combinations(real, 2))
    rng.shuffle(pairs)
    pairs.sort(key=lambda p: pool.load[p])
    for x, y in pairs:
        if judge.source == Judge.Source.ANNOTATOR and pool.load[(x, y)] >= comparison.target_per_pair:
            return None  # the least-judged pair has its target: so has every other
        a, b, card = _pick(pool, fresh[x], fresh[y], rng)
        return a, b, card, False
    return None


def next_judgement(judge: Judge, rng: random.Random | None = None) -> Judgement | None:
    """The judge's open pair, or a new one; None when they are done (or nothing is left for them).

    A crowdworker gets ``pairs_per_judge + checks_per_judge`` pairs; an annotator goes on while pairs of arms
    are below the target. The comparison row is locked while drawing, so two judges drawing at once see each
    other's pairs (balance); the partial unique index keeps one open pair per judge."""
    rng = rng or random.Random()
    with transaction.atomic():
        comparison = Comparison.objects.select_for_update().get(pk=judge.comparison_id)
        judge.comparison = comparison
        current = judge.judgements.filter(status=Judgement.Status.OPEN).first()
        if current is not None:
            return current
        count = judge.judgements.count()
        if judge.source == Judge.Source.PROLIFIC and count >= comparison.slots_per_judge:
            return None
        if comparison.status == Comparison.Status.CLOSED or (
            comparison.status == Comparison.Status.DRAFT and judge.source == Judge.Source.ANNOTATOR
        ):
            return None
        position = count + 1
        wanted_check = position in (judge.check_positions or [])
        drawn = _draw(judge, check=wanted_check, rng=rng)
        if drawn is None and wanted_check:
            drawn = _draw(judge, check=False, rng=rng)  # no QC episode left to show: a real pair instead
        if drawn is None:
            return None
        first, second, card, is_check = drawn
        if rng.random() < 0.5:
            first, second = second, first
        return Judgement.objects.create(
            judge=judge, position=position, left=first, right=second, left_arm_id=first.arm_id,
            right_arm_id=second.arm_id, is_check=is_check, card=card,
        )  # fmt: skip


# --------------------------------------------------------------------------------------------- answers


def clean_answers(comparison: Comparison, data: Mapping[str, str]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """The answers of a submitted form (``side_<key>`` and ``reason_<key>`` per question) and the errors by
    question: every question needs a side and a one-line reason of 5-300 characters."""
    answers: dict[str, tuple[str, str]] = {}
    errors: dict[str, str] = {}
    for key in comparison.questions:
        if key not in QUESTIONS:
            continue
        side = str(data.get(f"side_{key}", "")).strip()
        reason = " ".join(str(data.get(f"reason_{key}", "")).split())
        if side not in (Vote.Side.LEFT, Vote.Side.RIGHT):
            errors[key] = "Please choose Speaker 1 or Speaker 2."
        elif len(reason) < REASON_MIN_CHARS:
            errors[key] = "Please give a short reason for your choice (a few words)."
        elif len(reason) > REASON_MAX_CHARS:
            errors[key] = f"Please keep the reason to one line (at most {REASON_MAX_CHARS} characters)."
        else:
            answers[key] = (side, reason)
    return answers, errors


def submit(judgement: Judgement, data: Mapping[str, str]) -> dict[str, str]:
    """Store the judge's answers to an open pair (all or nothing); the errors by question, empty when stored.
    A pair already answered is left as it was (a double click stores nothing twice)."""
    comparison = judgement.judge.comparison
    answers, errors = clean_answers(comparison, data)
    if errors:
        return errors
    with transaction.atomic():
        locked = Judgement.objects.select_for_update().select_related("judge").get(pk=judgement.pk)
        if locked.status == Judgement.Status.DONE:
            return {}
        now = timezone.now()
        Vote.objects.bulk_create(
            [
                Vote(judgement=locked, question=q, side=side, reason=reason, created_at=now)
                for q, (side, reason) in answers.items()
            ]
        )
        locked.status = Judgement.Status.DONE
        locked.submitted_at = now
        locked.save(update_fields=["status", "submitted_at"])
        judge = locked.judge
        if locked.is_check:
            decide_checks(judge)
        if judge.source == Judge.Source.PROLIFIC and judge.judgements.filter(status=Judgement.Status.DONE).count() >= (
            comparison.slots_per_judge
        ):
            judge.completed_at = judge.completed_at or now
            judge.save(update_fields=["completed_at"])
    judgement.status, judgement.submitted_at = locked.status, locked.submitted_at
    return {}


def check_answers(judge: Judge) -> tuple[int, int]:
    """(answers that preferred the real arm, all answers) over the judge's answered check pairs."""
    correct = total = 0
    for vote in Vote.objects.filter(judgement__judge=judge, judgement__is_check=True).select_related(
        "judgement__left_arm", "judgement__right_arm"
    ):
        j = vote.judgement
        real_side = Vote.Side.RIGHT if j.left_arm.is_qc else Vote.Side.LEFT
        total += 1
        correct += vote.side == real_side
    return correct, total


def decide_checks(judge: Judge) -> None:
    """Pass or fail the judge once every planned check pair is answered, or as soon as failing is certain."""
    comparison = judge.comparison
    correct, total = check_answers(judge)
    per_pair = max(1, len(comparison.question_list))
    planned = len(judge.check_positions or []) * per_pair
    threshold = float(comparison.check_threshold)
    if planned and correct + (planned - total) < threshold * planned:
        judge.passed_checks = False
    elif total >= planned and total:
        judge.passed_checks = correct >= threshold * total
    else:
        return
    judge.save(update_fields=["passed_checks"])


def finish(judge: Judge) -> None:
    """Record that a crowdworker is done (nothing more to judge): their checks are decided on what they answered."""
    if judge.completed_at is None:
        judge.completed_at = timezone.now()
        judge.save(update_fields=["completed_at"])
    if judge.passed_checks is None:
        correct, total = check_answers(judge)
        if total:
            judge.passed_checks = correct >= float(judge.comparison.check_threshold) * total
            judge.save(update_fields=["passed_checks"])


def progress(comparison: Comparison) -> dict[str, object]:
    """Judgements per pair of arms (counting toward the target), and the judges by check outcome."""
    pool = _pool(comparison)
    arms = {a.pk: a for a in Arm.objects.filter(study=comparison.study_id, active=True, is_qc=False)}
    rows = []
    for x, y in combinations(sorted(arms), 2):
        rows.append({"arms": (arms[x].name, arms[y].name), "judged": pool.load[(x, y)],
                     "target": comparison.target_per_pair,
                     "episodes": (len(pool.by_arm.get(x, [])), len(pool.by_arm.get(y, [])))})  # fmt: skip
    judges = comparison.judges.all()
    return {
        "pairs": rows,
        "judges": judges.count(),
        "passed": judges.filter(passed_checks=True).count(),
        "failed": judges.filter(passed_checks=False).count(),
        "completed": judges.filter(~Q(completed_at=None)).count(),
        "votes": Vote.objects.filter(judgement__judge__comparison=comparison).count(),
        "qc_episodes": sum(len(pool.by_arm.get(a, [])) for a in pool.qc_arms),
    }
