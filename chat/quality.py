"""Per-worker quality of a live study: attention checks, authenticity signals, timing (docs/worker-quality.md).

:func:`study_quality` reads everything in a handful of queries and returns one :class:`WorkerQuality` per
participant; :func:`signal_columns` turns that into the boolean columns the ratings frame carries (one per
signal), so the dashboard's exclusion filters and ``python -m analysis report --exclude`` see the same data.
The per-worker QC test is the analysis's (``analysis/qc.py``), joined in by the researcher's quality page.
Nothing here rejects anybody: these are the researcher's grounds for exclusion, shown with their reasons.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import Length

from chat.authenticity import AuthenticitySummary, Composition, Signals, summarize
from chat.models import AttentionResponse, ChatSession, Episode, Message
from studies.models import Participant, Study
from studies.questions import ComprehensionAttempt

# Prolific: a submission "exceptionally fast", more than 3 SD below the mean completion time, may be rejected.
TOO_FAST_SD = 3.0
# Each session is compared with the study's *other* sessions (leave-one-out): with the session itself in the
# mean and SD, one rushed session among n can be at most (n-1)/sqrt(n) SD below the mean, so it could never be
# flagged in a study of fewer than 11 sessions. Fewer than this many other sessions: no timing flag at all.
TOO_FAST_MIN_OTHERS = 5

# The boolean columns of the ratings frame and export, in order; "row" filters remove the flagged rows, the
# others remove the worker (docs/worker-quality.md has their definitions).
SIGNAL_COLUMNS: dict[str, str] = {
    "unfinished": "the rating's episode was not finished (row filter)",
    "attention_failed": "the worker failed at least one attention check",
    "flag_paste": "the worker's pasted share of text is at or above the threshold",
    "flag_switch_paste": "the worker pasted after leaving the tab while composing",
    "flag_typing_speed": "the worker's median typing speed is above the threshold",
    "flag_untyped": "the worker's text was largely neither typed nor pasted",
    "flag_unmeasured": "many of the worker's messages came without authenticity signals or with unreadable ones",
    "authenticity_flagged": "any of the five authenticity flags",
    "too_fast": "the rated session was more than 3 SD faster than the study's other sessions",
    "silent_session": "the rated session ended with fewer answered turns than the minimum, replies having failed "
    "(row filter, applied by default)",
    "non_blind": "a bot turn of the rated session named an arm, a vendor or memory tools, or leaked JSON or a "
    "prompt (the blinding scan; row filter, applied by default)",
}
ROW_FILTERS = ("unfinished", "silent_session", "non_blind")
# Applied by every report unless the researcher turns them off: a silent session's ratings judge a chatbot that
# hardly spoke (chat.sessions.is_silent), not its memory; a non-blind session's worker may have been told the arm.
DEFAULT_ROW_FILTERS = ("silent_session", "non_blind")


@dataclass
class SessionTiming:
    session_id: int
    episode_id: int
    episode_index: int
    index: int
    seconds: float | None
    ended_by: str
    too_fast: bool = False


@dataclass
class SilentSession:
    """A session that ended with fewer answered turns than the minimum while replies failed (``ChatSession.silent``):
    listed on the quality page; its ratings are excluded from every report by default."""

    worker: str
    participant_id: int
    episode_id: int
    episode_index: int
    arm: str
    index: int
    answered: int
    failed: int
    ended_by: str
    rated: bool


@dataclass
class AttentionAnswer:
    statement: str
    position: int
    target: int
    tolerance: int
    value: int
    passed: bool


@dataclass
class WorkerQuality:
    """One participant's quality record (the researcher's quality page, the ratings frame's columns)."""

    participant: Participant
    episodes: list[Episode] = field(default_factory=list)
    attention: list[AttentionAnswer] = field(default_factory=list)
    authenticity: AuthenticitySummary = field(default_factory=AuthenticitySummary)
    sessions: list[SessionTiming] = field(default_factory=list)
    qc: dict[str, Any] | None = None  # from the analysis: {"passed", "p", "reason"}, None without a QC test
    # Other participations of the same Prolific ID (another submission claimed it: studies/entry.py)
    same_pid: list[Participant] = field(default_factory=list)
    # The comprehension check (studies/questions.py): tries made, and whether one passed
    comprehension_tries: int = 0
    comprehension_passed: bool = False

    @property
    def worker(self) -> str:
        return self.participant.pseudonym

    @property
    def status(self) -> str:
        p = self.participant
        if p.declined_at:
            return "declined"
        if p.abandoned_at:
            return "abandoned"
        if p.completed_at:
            return "finished"
        return "in progress" if p.consented_at else "not consented"

    @property
    def comprehension_failed(self) -> bool:
        """Every try of the comprehension check used, none passed."""
        allowed = int(self.participant.study.comprehension_attempts)
        return not self.comprehension_passed and self.comprehension_tries >= allowed > 0

    @property
    def attention_failed(self) -> int:
        return sum(1 for a in self.attention if not a.passed)

    @property
    def too_fast_sessions(self) -> int:
        return sum(1 for s in self.sessions if s.too_fast)

    @property
    def total_minutes(self) -> float | None:
        secs = [s.seconds for s in self.sessions if s.seconds is not None]
        return sum(secs) / 60 if secs else None

    def reasons(self) -> list[str]:
        """Why this worker might be excluded, in words (empty: nothing to report)."""
        out = []
        if self.qc is not None and not self.qc.get("passed"):
            out.append("QC test failed" + (f": {self.qc['reason']}" if self.qc.get("reason") else ""))
        if self.comprehension_failed:
            tries = self.comprehension_tries
            out.append(f"failed the comprehension check ({tries} of {tries} tr{'y' if tries == 1 else 'ies'})")
        if self.attention_failed:
            out.append(f"failed {self.attention_failed} of {len(self.attention)} attention check(s)")
        out += self.authenticity.flag_labels()
        if self.too_fast_sessions:
            out.append(f"{self.too_fast_sessions} session(s) too fast")
        if self.same_pid:
            others = ", ".join(f"{p.pseudonym} (submission {p.prolific_session_id or 'none'})" for p in self.same_pid)
            out.append(
                f"Prolific ID also used by {others}: check on Prolific which submission "
                f"({self.participant.prolific_session_id or 'none'} here) is this worker's"
            )
        return out

    def columns(self) -> dict[str, bool]:
        """The worker-level boolean columns of :data:`SIGNAL_COLUMNS` (unfinished and too_fast are per row)."""
        flags = set(self.authenticity.flags)
        return {
            "attention_failed": self.attention_failed > 0,
            "flag_paste": "paste" in flags,
            "flag_switch_paste": "switch_paste" in flags,
            "flag_typing_speed": "typing_speed" in flags,
            "flag_untyped": "untyped" in flags,
            "flag_unmeasured": "unmeasured" in flags,
            "authenticity_flagged": bool(flags),
        }


def too_fast(durations: dict[int, float]) -> set[int]:
    """The keys whose duration is more than :data:`TOO_FAST_SD` SD below the mean of the others."""
    out: set[int] = set()
    values = list(durations.values())
    n = len(values)
    if n - 1 < TOO_FAST_MIN_OTHERS:
        return out
    total, squares = sum(values), sum(v * v for v in values)
    for key, v in durations.items():
        m = (total - v) / (n - 1)
        var = max(0.0, (squares - v * v - (n - 1) * m * m) / (n - 2))
        if v < m - TOO_FAST_SD * var**0.5:
            out.add(key)
    return out


def study_quality(study: Study) -> list[WorkerQuality]:
    """Every participant of ``study`` with their quality record, in the order they joined."""
    records = {
        p.pk: WorkerQuality(p) for p in Participant.objects.real().filter(study=study).order_by("created_at", "pk")
    }
    by_pid: dict[str, list[Participant]] = defaultdict(list)
    for r in records.values():
        if r.participant.source == Participant.Source.PROLIFIC:
            by_pid[r.participant.prolific_pid].append(r.participant)
    for claims in by_pid.values():
        for p in claims if len(claims) > 1 else []:
            records[p.pk].same_pid = [q for q in claims if q.pk != p.pk]
    preview = {"participant__source": Participant.Source.PREVIEW}  # a researcher's preview is not a worker
    for ep in (
        Episode.objects.filter(participant__study=study).exclude(**preview).select_related("arm").order_by("index")
    ):
        records[ep.participant_id].episodes.append(ep)
    answers = (
        AttentionResponse.objects.filter(session__episode__participant__study=study)
        .exclude(session__episode__participant__source=Participant.Source.PREVIEW)
        .select_related("item", "session__episode")
    )
    for a in answers.order_by("session__episode__index", "session__index", "item__position"):
        records[a.session.episode.participant_id].attention.append(
            AttentionAnswer(a.item.statement, a.item.position, a.item.target, a.item.tolerance, a.value, a.passed)
        )
    compositions: dict[int, list[Composition]] = defaultdict(list)
    # lengths and signal fields only: a long study's message texts are never loaded
    msgs = (
        Message.objects.filter(session__episode__participant__study=study, speaker=Message.Speaker.USER)
        .exclude(session__episode__participant__source=Participant.Source.PREVIEW)
        .exclude(session__episode__side="b")  # side B's copies of a side-by-side message: measured once, on A
        .order_by("session_id", "seq")
        .values_list(
            "session__episode__participant_id",
            Length("text"),
            "signals__id",
            "signals__pasted",
            "signals__paste_chars",
            "signals__typed_chars",
            "signals__typing_ms",
            "signals__hidden_ms",
            "signals__paste_blocked",
            "signals__malformed",
        )
    )
    for pk, length, sig_id, pasted, paste_chars, typed, typing_ms, hidden_ms, blocked, malformed in msgs:
        sig = None
        if sig_id is not None:
            counts = (int(paste_chars), int(typed), int(typing_ms), int(hidden_ms), int(blocked))
            sig = Signals(bool(pasted), *counts, malformed=bool(malformed))
        compositions[pk].append(Composition(int(length), sig))
    for pk, comps in compositions.items():
        records[pk].authenticity = summarize(comps)
    sessions = (
        ChatSession.objects.filter(episode__participant__study=study, ended_at__isnull=False, started_at__isnull=False)
        .exclude(episode__participant__source=Participant.Source.PREVIEW)
        .select_related("episode")
        .order_by("episode__index", "index")
    )
    timings = []
    for s in sessions:
        assert s.ended_at is not None and s.started_at is not None
        t = SessionTiming(
            s.pk, s.episode_id, s.episode.index, s.index, (s.ended_at - s.started_at).total_seconds(), s.ended_by
        )
        records[s.episode.participant_id].sessions.append(t)
        timings.append(t)
    fast = too_fast({t.session_id: t.seconds for t in timings if t.seconds is not None})
    for t in timings:
        t.too_fast = t.session_id in fast
    tries = ComprehensionAttempt.objects.filter(participant__in=list(records)).values_list("participant_id", "passed")
    for pk, passed in tries:
        records[pk].comprehension_tries += 1
        records[pk].comprehension_passed |= passed
    return list(records.values())


def signal_columns(records: list[WorkerQuality]) -> tuple[dict[str, dict[str, bool]], set[int], set[int]]:
    """Worker-level columns by pseudonym (``Participant.pseudonym``), the ids of too-fast sessions and of unfinished
    episodes."""
    by_worker = {r.worker: r.columns() for r in records}
    fast = {s.session_id for r in records for s in r.sessions if s.too_fast}
    unfinished = {e.pk for r in records for e in r.episodes if e.status != Episode.Status.COMPLETED}
    return by_worker, fast, unfinished


def silent_sessions(study: Study) -> list[SilentSession]:
    """The study's silent sessions with their answered and failed counts, in the order workers joined."""
    bot = Q(messages__speaker=Message.Speaker.BOT)
    rows = (
        ChatSession.objects.filter(episode__participant__study=study, silent=True)
        .select_related("episode__participant", "episode__arm")
        .annotate(
            n_answered=Count(
                "messages", filter=bot & Q(messages__status=Message.Status.COMPLETE, messages__reply_to__isnull=False)
            ),
            n_failed=Count("messages", filter=bot & Q(messages__status=Message.Status.FAILED)),
        )
        .order_by("episode__participant__created_at", "episode__participant_id", "episode__index", "index")
    )
    return [
        SilentSession(
            s.episode.participant.pseudonym,
            s.episode.participant_id,
            s.episode_id,
            s.episode.index,
            s.episode.arm.name,
            s.index,
            s.__dict__["n_answered"],
            s.__dict__["n_failed"],
            s.get_ended_by_display(),
            s.status == ChatSession.Status.DONE,
        )  # fmt: skip
        for s in rows
    ]


def median_minutes(records: list[WorkerQuality]) -> float | None:
    """The median total chat time of finished workers (the study page's observed duration)."""
    totals = [r.total_minutes for r in records if r.participant.completed_at and r.total_minutes is not None]
    return statistics.median(totals) if totals else None
