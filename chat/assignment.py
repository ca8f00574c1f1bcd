"""Where a worker goes next: their current session, or a new episode with an arm drawn for them
(balanced over the study's arms, the quality-control arm placed once per worker; in a live side-by-side study a
pair of arms, balanced over pairs, sides at random: :func:`create_pair`), and when they are done.

A side-by-side episode is two episodes (chat/sidebyside.py): the worker's pages follow side A's; side B's
(``Episode.side = "b"``) is never the worker's "current" episode, and an arm on either side counts as met."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from itertools import combinations
from typing import TypeVar

from django.db import transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from chat import arms as arm_systems
from chat import personas
from chat.errors import ChatError
from chat.models import ChatSession, Episode
from chat.timing import sweep_abandoned
from infra import clock
from studies.models import Arm, Participant, Study

A = TypeVar("A", bound=Arm)
SIDE_B = Episode.Side.B


class NoArmAvailable(ChatError):
    pass


class StudyFull(ChatError):
    """Every place of the quota is taken: a new worker's first session cannot open."""


FULL_TEXT = "All places in this study have been taken. Thank you for your interest."


def _take_place(participant: Participant, study: Study) -> None:
    """Reserve a place for a worker whose first session is about to open (the study row is locked by the
    caller). Workers away longer than the study allows are marked first, so a place they held is free and
    they cannot come back over the quota. Raises :class:`StudyFull`."""
    if study.quota is not None:
        sweep_abandoned(study_id=study.pk)
        if study.is_full():
            raise StudyFull(FULL_TEXT)
    participant.started_at = clock.now()
    participant.save(update_fields=["started_at"])


def assign_episode(participant: Participant) -> Episode:
    """Start the participant's next episode with an arm drawn at random among the least-used arms.

    Balanced over active + completed episodes of the study; an arm the participant already had is
    never drawn again. The study row is locked while counting, so two workers starting at the same
    moment see each other's episodes (on PostgreSQL; SQLite serialises writers anyway).
    A worker's first episode reserves their place in the quota (:func:`_take_place`; ``studies.models``,
    ``ParticipantQuerySet.taking_a_place``). Raises :class:`NoArmAvailable` when the participant has used
    every active arm, :class:`StudyFull` when a first episode finds every place taken.
    """
    with transaction.atomic():
        study = Study.objects.select_for_update().get(pk=participant.study_id)
        current = participant.episodes.filter(status=Episode.Status.ACTIVE).exclude(side=SIDE_B).first()
        if current:
            return current
        used = set(participant.episodes.values_list("arm_id", flat=True))
        if not used and participant.started_at is None:  # the first episode: its first session takes a place
            _take_place(participant, study)
        if study.side_by_side:
            index = (participant.episodes.aggregate(m=Max("index"))["m"] or 0) + 1
            pair = create_pair(participant, study, index)
            if pair is None:
                raise NoArmAvailable("There is no further conversation for you in this study.")
            return pair
        arms = list(
            study.arms.filter(active=True)
            .exclude(pk__in=used)
            .annotate(
                n=Count(
                    "episodes",
                    filter=Q(episodes__status__in=[Episode.Status.ACTIVE, Episode.Status.COMPLETED]),
                )
            )
        )
        if participant.source == Participant.Source.PREVIEW:
            arms = sorted(arms, key=lambda a: a.pk)[:1]  # a preview meets every arm in turn (studies/preview.py)
        else:
            arms = _qc_draw(participant, study, arms)
        if not arms:
            raise NoArmAvailable("There is no further conversation for you in this study.")
        least = min(a.n for a in arms)
        arm = random.choice([a for a in arms if a.n == least])
        system, _ = arm_systems.build_arm(arm, study=study)
        index = (participant.episodes.aggregate(m=Max("index"))["m"] or 0) + 1
        episode = Episode.objects.create(
            participant=participant, arm=arm, index=index, memory_state=system.initial_state(),
            persona=personas.draw(study, participant, index),
        )  # fmt: skip
        ChatSession.objects.create(
            episode=episode, index=1, status=ChatSession.Status.READY, simulated_start=study.session_start(1)
        )
    return episode


def _qc_draw(participant: Participant, study: Study, arms: list[A]) -> list[A]:
    """The candidates once the quality-control arm is placed: every worker meets it in exactly one whole
    episode, at a uniformly random position among their episodes (docs/worker-quality.md, "QC arm").

    While the worker has not had it, it is drawn with probability 1 / (episodes still to do), and it is
    the only candidate for their last episode; otherwise it is never a candidate. A study with one
    episode per worker cannot run the QC test (studies.forms.qc_design_problem), so there the QC arm
    is never drawn."""
    qc = [a for a in arms if a.is_qc]
    if not qc:
        return arms
    others = [a for a in arms if not a.is_qc]
    remaining = int(study.episodes_per_worker) - participant.episodes.count()
    if study.episodes_per_worker < 2 or remaining < 1:
        return others
    if remaining == 1 or not others or random.random() < 1 / remaining:
        return qc[:1]
    return others


def episodes_left(participant: Participant) -> bool:
    """Whether the participant still has an episode to do (a further arm exists and the quota of
    episodes per worker is not reached)."""
    study = participant.study
    done = participant.episodes.exclude(side=SIDE_B).count()
    if done >= study.episodes_per_worker and participant.source != Participant.Source.PREVIEW:
        return False
    used = participant.episodes.values_list("arm_id", flat=True)
    if study.side_by_side:
        return pairs_left(study, set(used))
    return study.arms.filter(active=True).exclude(pk__in=used).exists()


def current_session(participant: Participant) -> ChatSession | None:
    """The first session of the participant's active episode that is not rated yet."""
    episode = participant.episodes.filter(status=Episode.Status.ACTIVE).exclude(side=SIDE_B).order_by("index").first()
    if episode is None:
        return None
    return episode.sessions.exclude(status=ChatSession.Status.DONE).order_by("index").first()


class StudyClosed(ChatError):
    pass


def next_session(participant: Participant) -> ChatSession | None:
    """Where the participant is: the current session, or the first of a new episode (a fresh arm)
    when the last one is over; ``None`` when nothing is left for them. Raises :class:`StudyClosed`
    when a new episode would be needed while the study is a draft again."""
    session = current_session(participant)
    if session is not None:
        return session
    if participant.completed_at or not episodes_left(participant):
        return None
    if participant.study.status == Study.Status.DRAFT and participant.source != Participant.Source.PREVIEW:
        raise StudyClosed("This study is not taking participants at the moment.")
    try:
        assign_episode(participant)
    except NoArmAvailable:
        return None
    return current_session(participant)


def at_wave_end(participant: Participant, session: ChatSession | None) -> bool:
    """Whether the participant has done every session of the wave they may do now (``Study.wave_sessions``,
    ``Participant.wave``) and ``session``, not begun, belongs to a later wave: they wait to be let in."""
    if session is None or session.status not in (ChatSession.Status.PREPARING, ChatSession.Status.READY):
        return False
    ends = participant.study.wave_ends()
    if participant.wave > len(ends):
        return False
    done = (
        ChatSession.objects.filter(episode__participant=participant, status=ChatSession.Status.DONE)
        .exclude(episode__side=SIDE_B)
        .count()
    )
    return done >= ends[participant.wave - 1]


def pause_at_wave_end(participant: Participant) -> None:
    """Record that the participant waits for the next wave (the abandonment sweep leaves them alone)."""
    if participant.paused_at is None:
        participant.paused_at = timezone.now()
        participant.save(update_fields=["paused_at"])


def finish_participant(participant: Participant) -> bool:
    """Record that the participant has finished the study (idempotent); ``False`` while they still
    have a session to do."""
    if participant.completed_at is not None:
        return True
    if current_session(participant) is not None or episodes_left(participant):
        return False
    participant.completed_at = timezone.now()
    participant.save(update_fields=["completed_at"])
    return True


# ------------------------------------------------------------------- live side by side: a pair of arms


def pair_load(study: Study) -> Counter[tuple[int, int]]:
    """Side-by-side episodes started or finished per pair of arms (smaller arm id first)."""
    rows = Episode.objects.filter(
        participant__study=study, side=Episode.Side.A, status__in=[Episode.Status.ACTIVE, Episode.Status.COMPLETED]
    ).values_list("arm_id", "twin__arm_id")
    return Counter((min(a, b), max(a, b)) for a, b in rows if b is not None)


def draw_pair(arms: list[Arm], load: Mapping[tuple[int, int], int], rng: random.Random) -> tuple[Arm, Arm] | None:
    """The arms of side A and side B: a pair among ``arms`` (non-QC arms the worker has not met) with the fewest
    episodes so far, ties at random, sides at random. None when fewer than two arms are left."""
    candidates = sorted((a for a in arms if not a.is_qc), key=lambda a: a.pk)
    pairs = list(combinations(candidates, 2))
    if not pairs:
        return None
    rng.shuffle(pairs)
    pairs.sort(key=lambda p: load.get((p[0].pk, p[1].pk), 0))  # stable: the shuffle breaks ties
    first, second = pairs[0]
    return (second, first) if rng.random() < 0.5 else (first, second)


def pairs_left(study: Study, used: set[int]) -> bool:
    """Whether two active non-QC arms the worker has not met are left."""
    return study.arms.filter(active=True, is_qc=False).exclude(pk__in=used).count() >= 2


def create_pair(participant: Participant, study: Study, index: int, rng: random.Random | None = None) -> Episode | None:
    """Side A's new episode (and side B's beside it, with their first sessions), the arms drawn by :func:`draw_pair`
    among the active arms the worker has not met; None when no pair is left. The caller holds the study's row
    lock (``chat.assignment.assign_episode``), so two workers drawing at once see each other's pairs."""
    used = set(participant.episodes.values_list("arm_id", flat=True))
    arms = list(study.arms.filter(active=True).exclude(pk__in=used))
    drawn = draw_pair(arms, pair_load(study), rng or random.Random())
    if drawn is None:
        return None
    persona = personas.draw(study, participant, index)  # both sides talk to the same persona card
    episodes: list[Episode] = []
    for side, arm in zip((Episode.Side.A, Episode.Side.B), drawn, strict=True):
        system, _ = arm_systems.build_arm(arm, study=study)
        episode = Episode.objects.create(
            participant=participant, arm=arm, index=index, memory_state=system.initial_state(), persona=persona,
            side=side, lead=episodes[0] if episodes else None,
        )  # fmt: skip
        ChatSession.objects.create(
            episode=episode, index=1, status=ChatSession.Status.READY, simulated_start=study.session_start(1)
        )
        episodes.append(episode)
    return episodes[0]
