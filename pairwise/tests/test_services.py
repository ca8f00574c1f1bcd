"""The ACUTE-Eval workflow: drawing pairs (balance, sides, cards, checks, no episode twice), answers, checks."""

from __future__ import annotations

import random
from collections import Counter
from itertools import combinations
from typing import Any

import pytest

from pairwise import services
from pairwise.models import Comparison, Judge, Judgement, Vote
from pairwise.questions import QUESTIONS
from pairwise.transcripts import SessionText, callbacks

pytestmark = pytest.mark.django_db


def answer_all(
    judge: Judge, side: str | None = None, rng: random.Random | None = None, check_side: str | None = None
) -> int:
    """Answer every pair the judge gets; check pairs with ``check_side`` ('real' or 'qc') when given."""
    rng = rng or random.Random(0)
    n = 0
    while (j := services.next_judgement(judge, rng)) is not None:
        chosen = side or rng.choice(["left", "right"])
        if j.is_check and check_side:
            real = "right" if j.left_arm.is_qc else "left"
            chosen = real if check_side == "real" else ("left" if real == "right" else "right")
        data = {}
        for q in judge.comparison.questions:
            data[f"side_{q}"] = chosen
            data[f"reason_{q}"] = "because it remembered my dog"
        assert services.submit(j, data) == {}
        n += 1
    return n


def test_the_questions_are_acute_evals_verbatim_and_the_two_memory_questions():
    assert QUESTIONS["engaging"].text == "Who would you prefer to talk to for a long conversation?"
    assert QUESTIONS["interesting"].text == (
        "If you had to say one of these speakers is interesting and one is boring, who would you say is more interesting?"
    )
    assert QUESTIONS["human"].text == "Which speaker sounds more human?"
    assert QUESTIONS["knowledgeable"].text == (
        "If you had to say that one speaker is more knowledgeable and one is more ignorant, who is more knowledgeable?"
    )
    assert (
        QUESTIONS["remembers"].text
        == "Which speaker remembers what their partner told them in earlier sessions better?"
    )
    assert QUESTIONS["fewer_errors"].text == "Which speaker gets facts about their partner wrong less often?"
    assert QUESTIONS["engaging"].choice("left") == "I would prefer to talk to Speaker 1"


def test_a_crowd_judge_gets_their_pairs_and_one_check_then_nothing(comparison: Comparison):
    judge = services.join_crowd(comparison, "PID1")
    assert services.join_crowd(comparison, "PID1") == judge  # the same PID is the same judge
    assert answer_all(judge, rng=random.Random(3)) == 4
    shown = list(judge.judgements.order_by("position"))
    assert [j.position for j in shown] == [1, 2, 3, 4]
    assert [j.is_check for j in shown] == [p in judge.check_positions for p in range(1, 5)]
    check = next(j for j in shown if j.is_check)
    assert check.left_arm.is_qc != check.right_arm.is_qc
    for j in shown:
        assert j.left_arm_id != j.right_arm_id and j.left.arm_id == j.left_arm_id and j.right.arm_id == j.right_arm_id
    episodes = [e for j in shown for e in (j.left_id, j.right_id)]
    assert len(episodes) == len(set(episodes))  # ACUTE-Eval: a judge never sees a conversation twice
    judge.refresh_from_db()
    assert judge.completed_at is not None and services.next_judgement(judge) is None


@pytest.mark.parametrize("bad", ["", "a b", "x" * 200, "<script>"])
def test_a_link_without_a_valid_prolific_id_is_refused(comparison: Comparison, bad: str):
    with pytest.raises(services.PairwiseError, match="link on Prolific"):
        services.join_crowd(comparison, bad)
    assert not Judge.objects.exists()


def test_a_closed_or_full_comparison_takes_no_new_judges(comparison: Comparison):
    comparison.quota = 1
    comparison.save()
    services.join_crowd(comparison, "A1")
    with pytest.raises(services.PairwiseError, match="full"):
        services.join_crowd(comparison, "A2")
    comparison.status = Comparison.Status.CLOSED
    comparison.quota = None
    comparison.save()
    with pytest.raises(services.PairwiseError, match="not taking participants"):
        services.join_crowd(comparison, "A3")
    assert services.join_crowd(comparison, "A1")  # a judge already in comes back


def test_pairs_are_balanced_over_pairs_of_arms_and_sides_are_random(comparison: Comparison):
    comparison.checks_per_judge = 0
    comparison.save()
    rng = random.Random(1)
    for n in range(6):
        judge = services.join_crowd(comparison, f"P{n}")
        answer_all(judge, rng=rng)
        load = Counter(tuple(sorted((j.left_arm_id, j.right_arm_id))) for j in Judgement.objects.filter(is_check=False))
        real = [a.pk for a in comparison.study.arms.filter(is_qc=False)]
        counts = [load[p] for p in combinations(sorted(real), 2)]
        assert max(counts) - min(counts) <= 1, counts
    sides = Counter(j.left_arm_id < j.right_arm_id for j in Judgement.objects.all())
    assert sides[True] > 3 and sides[False] > 3


def test_pairs_share_a_persona_card_where_the_episodes_have_one(comparison: Comparison, monkeypatch: Any):
    cards = {}
    for e in comparison.study.participants.all():
        for ep in e.episodes.all():
            cards[ep.pk] = "card-a" if int(e.external_id[1:]) % 2 == 0 else "card-b"
    monkeypatch.setattr(services, "episode_card", lambda ep: cards.get(ep.pk, ""))
    judge = services.join_crowd(comparison, "CARD1")
    answer_all(judge)
    for j in judge.judgements.all():
        assert cards[j.left_id] == cards[j.right_id] == j.card


def test_the_card_of_an_episode_is_its_persona_cards_id():
    class Played:
        def __init__(self, persona: object) -> None:
            self.persona = persona

    assert services.episode_card(Played({"card": {"id": "c07", "name": "Maya"}, "script": []})) == "c07"
    assert services.episode_card(Played({"card": {"id": 3}})) == "3"
    for none in ({}, {"card": {}}, {"card": "c07"}, None, []):
        assert services.episode_card(Played(none)) == ""
    assert services.episode_card(object()) == ""  # an episode without persona cards


def test_answers_need_a_side_and_a_one_line_reason_and_are_stored_once(comparison: Comparison):
    judge = services.join_crowd(comparison, "R1")
    j = services.next_judgement(judge)
    assert j is not None
    errors = services.submit(j, {"side_engaging": "left", "reason_engaging": "ok", "side_remembers": "middle",
                                 "reason_remembers": "it remembered the dog"})  # fmt: skip
    assert set(errors) == {"engaging", "remembers"} and "short reason" in errors["engaging"]
    assert not Vote.objects.exists()
    long = {
        "side_engaging": "left",
        "reason_engaging": "x" * 301,
        "side_remembers": "right",
        "reason_remembers": "fine",
    }
    assert "one line" in services.submit(j, long)["engaging"]
    good = {"side_engaging": "left", "reason_engaging": "  warm and\nfriendly  ", "side_remembers": "right",
            "reason_remembers": "asked about Pepper"}  # fmt: skip
    assert services.submit(j, good) == {}
    assert services.submit(j, good) == {}  # a double click stores nothing twice
    assert Vote.objects.count() == 2
    assert Vote.objects.get(question="engaging").reason == "warm and friendly"
    j.refresh_from_db()
    assert j.status == Judgement.Status.DONE and j.seconds is not None and j.seconds >= 0


def test_a_judge_who_prefers_the_qc_arm_on_the_check_fails_and_their_pairs_go_back(comparison: Comparison):
    bad = services.join_crowd(comparison, "BAD")
    answer_all(bad, check_side="qc")
    bad.refresh_from_db()
    assert bad.passed_checks is False and bad.failed_checks
    good = services.join_crowd(comparison, "GOOD")
    answer_all(good, check_side="real")
    good.refresh_from_db()
    assert good.passed_checks is True
    progress = services.progress(comparison)
    assert progress["failed"] == 1 and progress["passed"] == 1
    # only the passing judge's real pairs count toward the targets
    assert sum(p["judged"] for p in progress["pairs"]) == comparison.pairs_per_judge


def test_failing_is_decided_as_soon_as_it_is_certain(comparison: Comparison):
    comparison.checks_per_judge = 2
    comparison.save()
    judge = services.join_crowd(comparison, "EARLY")
    rng = random.Random(5)
    while (j := services.next_judgement(judge, rng)) is not None and not j.is_check:
        services.submit(
            j, {f"{k}_{q}": v for q in comparison.questions for k, v in (("side", "left"), ("reason", "fine thanks"))}
        )
    assert j is not None and j.is_check
    qc_side = "left" if j.left_arm.is_qc else "right"
    services.submit(
        j, {f"{k}_{q}": v for q in comparison.questions for k, v in (("side", qc_side), ("reason", "it was nicer"))}
    )
    judge.refresh_from_db()
    assert judge.passed_checks is False  # 0 of 2 right, 2 left to answer: at most 2 of 4 < 0.75


def test_annotators_judge_until_every_pair_of_arms_has_its_target(comparison: Comparison, annotator: Any):
    comparison.audience = Comparison.Audience.ANNOTATORS
    comparison.target_per_pair = 2
    comparison.checks_per_judge = 0
    comparison.save()
    with pytest.raises(services.PairwiseError):
        services.join_crowd(comparison, "PID")
    judge = services.join_annotator(comparison, annotator)
    assert answer_all(judge) == 6  # 3 pairs of arms x 2
    assert services.next_judgement(judge) is None


def test_without_qc_episodes_a_check_slot_gets_a_real_pair(comparison: Comparison):
    from chat.models import Episode

    Episode.objects.filter(arm__is_qc=True).update(status=Episode.Status.ABANDONED)
    judge = services.join_crowd(comparison, "NOQC")
    assert answer_all(judge) == 4
    assert not judge.judgements.filter(is_check=True).exists()


def test_callbacks_count_bot_messages_that_bring_back_an_earlier_sessions_words():
    s1 = SessionText(1, "", [("user", "I adopted a beagle called Pepper"), ("bot", "Nice!")])
    s2 = SessionText(2, "9 days later", [("bot", "How is Pepper?"), ("user", "Pepper is fine"),
                                        ("bot", "Pepper sounds great"), ("bot", "What about work?")])  # fmt: skip
    assert callbacks([s1, s2]) == 1  # the second mention of Pepper in session 2 is no callback
    assert callbacks([s1]) == 0
