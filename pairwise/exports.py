"""Every pairwise vote of a study as a table: the pair, the sides, the reason and the timing, ready for
``python -m analysis pairwise`` (``arm_a`` is the left side, ``winner`` a/b) and for the dashboard. ACUTE-Eval's
votes (``source`` ``acute``) and the live side-by-side votes (``source`` ``live``, chat/sidebyside.py: ``arm_a`` is
bot A, ``winner`` a, b, tie or both_bad) are rows of the same table."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from pairwise.models import Comparison, Judgement, Vote
from pairwise.questions import QUESTIONS
from pairwise.transcripts import bot_length, callbacks, sessions_of
from studies.models import Study

COLUMNS = [
    "source", "comparison", "judge", "judge_source", "pair", "position", "question", "question_text",
    "arm_a", "arm_b", "episode_a", "episode_b", "winner", "winner_arm", "reason", "shown_at", "submitted_at",
    "seconds", "check", "check_correct", "failed_checks", "card", "len_a", "len_b", "callbacks_a", "callbacks_b",
]  # fmt: skip


def acute_votes(study: Study, comparison: Comparison | None = None) -> list[dict[str, Any]]:
    """One row per answered question of the study's comparisons (or of one comparison), in the order answered."""
    votes = (
        Vote.objects.filter(judgement__judge__comparison__study=study)
        .select_related(
            "judgement__judge", "judgement__left_arm", "judgement__right_arm", "judgement__judge__comparison"
        )
        .order_by("judgement__judge__comparison_id", "judgement__judge_id", "judgement__position", "id")
    )
    if comparison is not None:
        votes = votes.filter(judgement__judge__comparison=comparison)
    votes_list = list(votes)
    judgements: dict[int, Judgement] = {v.judgement_id: v.judgement for v in votes_list}
    episode_ids = {e for j in judgements.values() for e in (j.left_id, j.right_id)}
    from chat.models import Episode

    texts = sessions_of(Episode.objects.filter(pk__in=episode_ids))
    style = {e: (bot_length(s), callbacks(s)) for e, s in texts.items()}
    rows = []
    for v in votes_list:
        j = v.judgement
        judge = j.judge
        check_correct: bool | str = ""
        if j.is_check:
            real = "right" if j.left_arm.is_qc else "left"
            check_correct = v.side == real
        len_a, cb_a = style.get(j.left_id, (0, 0))
        len_b, cb_b = style.get(j.right_id, (0, 0))
        rows.append(
            {
                "source": "acute",
                "comparison": judge.comparison.slug,
                "judge": judge.pseudonym,
                "judge_source": judge.source,
                "pair": j.pk,
                "position": j.position,
                "question": v.question,
                "question_text": QUESTIONS[v.question].text if v.question in QUESTIONS else "",
                "arm_a": j.left_arm.name,
                "arm_b": j.right_arm.name,
                "episode_a": j.left_id,
                "episode_b": j.right_id,
                "winner": "a" if v.side == Vote.Side.LEFT else "b",
                "winner_arm": (j.left_arm if v.side == Vote.Side.LEFT else j.right_arm).name,
                "reason": v.reason,
                "shown_at": j.shown_at.isoformat(),
                "submitted_at": j.submitted_at.isoformat() if j.submitted_at else "",
                "seconds": round(j.seconds, 1) if j.seconds is not None else "",
                "check": j.is_check,
                "check_correct": check_correct,
                "failed_checks": judge.failed_checks,
                "card": j.card,
                "len_a": len_a,
                "len_b": len_b,
                "callbacks_a": cb_a,
                "callbacks_b": cb_b,
            }  # fmt: skip
        )
    return rows


def live_votes(study: Study) -> list[dict[str, Any]]:
    """One row per live side-by-side vote of the study (one per session), in the order cast. The judge is the
    worker (their pseudonym), the pair the session; the style covariates are each side's episode so far."""
    from chat.models import Episode
    from chat.sidebyside import QUESTION, QUESTION_TEXT, votes_of
    from pairwise.services import episode_card

    votes = votes_of(study)
    ids = {e for v in votes for e in (v.session.episode_id, v.session.episode.twin.pk)}
    texts = sessions_of(Episode.objects.filter(pk__in=ids))
    style = {e: (bot_length(s), callbacks(s)) for e, s in texts.items()}
    rows = []
    for v in votes:
        session, a = v.session, v.session.episode
        b = a.twin
        started = session.started_at or session.ended_at
        len_a, cb_a = style.get(a.pk, (0, 0))
        len_b, cb_b = style.get(b.pk, (0, 0))
        rows.append(
            {
                "source": "live", "comparison": "", "judge": a.participant.pseudonym, "judge_source": "live",
                "pair": session.pk, "position": session.index, "question": QUESTION, "question_text": QUESTION_TEXT,
                "arm_a": a.arm.name, "arm_b": b.arm.name, "episode_a": a.pk, "episode_b": b.pk, "winner": v.winner,
                "winner_arm": {"a": a.arm.name, "b": b.arm.name}.get(v.winner, ""), "reason": v.reason,
                "shown_at": started.isoformat() if started else "", "submitted_at": v.created_at.isoformat(),
                "seconds": round((v.created_at - started).total_seconds(), 1) if started else "", "check": False,
                "check_correct": "", "failed_checks": False, "card": episode_card(a), "len_a": len_a, "len_b": len_b,
                "callbacks_a": cb_a, "callbacks_b": cb_b,
            }
        )  # fmt: skip
    return rows


def to_csv(rows: list[dict[str, Any]]) -> str:
    from analysis.writers import neutralise_cell

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: neutralise_cell(row.get(k, "")) for k in COLUMNS})
    return buf.getvalue()


def to_jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps({k: row.get(k, "") for k in COLUMNS}, ensure_ascii=False) + "\n" for row in rows)
