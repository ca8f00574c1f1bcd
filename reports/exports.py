"""A study's raw data for a paper's appendix: ratings, transcripts, memory snapshots, LLM calls and (studies
with persona cards) each episode's card and event script and every probe with its answer and scores,
and the answers to the study's questions before and after the sessions (with each try of the comprehension
check), as CSV or JSONL, each file starting with a README-style header.

``manage.py export_study SLUG --what ratings|transcripts|memory|llm-calls|personas|probes|answers --format csv|jsonl`` and
the downloads on the study page call :func:`export_lines`. The header names the study design, the arms
(memory system, backend, model, parameters, readiness), the pilot mark when the study is a pilot, the
export's time and what every column means.

- **CSV**: the header is a block of lines starting with ``#``; its first line says how many there are,
  so ``pandas.read_csv(path, skiprows=N)`` reads the table (``comment="#"`` would also cut any cell
  that contains a ``#``).
  Text cells that a spreadsheet would run as a formula (starting with ``= + - @``, a tab or a carriage return:
  a worker's message may) get a leading ``'`` (``analysis.writers.neutralise_cell``); numbers are untouched.
- **JSONL**: the first line is ``{"header": {...}}``; every further line is one record.

Workers appear by their study-specific pseudonym (``Participant.pseudonym``, ``W-…``), as on every page and in
every report: a Prolific ID is personal data and is never exported (docs/privacy.md).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from analysis.writers import neutralise_cell
from chat import armjobs
from chat.models import Episode, LLMCallRecord, MemorySnapshot, Message, ProbeResult, Rating
from memory import display, vectors
from reports import probejudging
from reports.reporting import PILOT_MARK
from studies import questions
from studies.models import Participant, Study
from studies.questions import Answer, ComprehensionAttempt, Question

WHAT = ("ratings", "transcripts", "memory", "llm-calls", "personas", "probes", "answers")
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}

_COMMON = {
    "worker": "the worker's study-specific pseudonym (W-…), as on every page and report; never a Prolific ID",
    "episode": "episode id: one worker x one arm over the study's sessions",
    "arm": "the arm's name (never shown to workers)",
    "memory_system": "the arm's memory system (python -m memory arms)",
    "session": "session index within the episode, 1-based",
}
COLUMNS: dict[str, dict[str, str]] = {
    "ratings": {
        **_COMMON,
        "metric": "the metric's key (its statement is in the header)",
        "value": "the rating, 0-100 as given (not reversed)",
        "reversed": "true when higher is worse for this metric (analysis uses 100 - value)",
        "rated_at": "when the rating was saved (UTC)",
        "silent_session": "true when the rated session ended with fewer answered turns than the minimum, replies "
        "having failed (the bot hardly spoke): every report leaves these ratings out by default",
        "non_blind": "true when a bot turn of the rated session named an arm, a vendor or memory tools (the "
        "blinding scan): every report leaves these ratings out by default (python -m analysis: --include-non-blind)",
    },
    "transcripts": {
        **_COMMON,
        "simulated_start": "the bot's clock at the start of the session",
        "seq": "message order within the session",
        "speaker": "user (the worker) or bot",
        "text": "the message as shown to the worker",
        "status": "complete, pending (reply not finished) or failed (reply not generated)",
        "created_at": "when the message was stored (UTC)",
        "first_token_ms": "a bot message: milliseconds from the worker's message (or Retry) to the model's first piece",
        "generated_ms": "a bot message: to the whole reply from the model (the true latency)",
        "shown_ms": "a bot message: to the reply shown whole (after the study's reply pacing)",
    },
    "memory": {
        **_COMMON,
        "status": "done, pending or failed: the end-of-session memory update",
        "memory": "the arm's memory after the session, as readable text",
        "state": "the arm's memory state after the session (JSON; embeddings replaced by a note)",
        "trace": "what the update did: summary, operations, fallbacks... (JSON; LLM calls are in the llm-calls export)",
        "error": "why the update failed, if it did",
        "finished_at": "when the update finished (UTC)",
    },
    "llm-calls": {
        **_COMMON,
        "message_seq": "the bot message the call produced (empty for memory updates)",
        "purpose": "what the call was for: reply, summarize_session, memory_operation...",
        "model": "the model that answered",
        "latency_ms": "wall time of the call in milliseconds",
        "prompt_tokens": "prompt size in tokens, when the backend reports it",
        "completion_tokens": "reply size in tokens, when the backend reports it",
        "error": "the LLM error, if the call failed",
        "messages": "the prompt: a JSON list of {role, content}",
        "reply": "the model's reply",
        "created_at": "when the call was recorded (UTC)",
    },
    "personas": {
        "worker": _COMMON["worker"],
        "episode": _COMMON["episode"],
        "arm": _COMMON["arm"],
        "memory_system": _COMMON["memory_system"],
        "card": "the persona card the worker played (JSON: id, facts with values, aliases and updates)",
        "events": "the study's event script as the episode ran it (JSON: session, op, slot)",
        "bank": "the card bank it was drawn from (name, version, provenance, licence, sha256)",
    },
    "probes": {
        **_COMMON,
        "mode": "snapshot (asked of the memory the session left, offline) or inline (asked by the worker in the chat)",
        "card": "the persona card's id",
        "slot": "the fact probed (the card's slot)",
        "kind": "current (never changed), updated (changed since told) or forgotten (the worker asked to forget it)",
        "question": "the probe question",
        "gold": "the current value and its aliases (JSON; empty for a forgotten fact)",
        "stale_values": "previous values that must not be given as current (JSON)",
        "deleted_values": "values of a forgotten fact that must be in neither the reply nor any store (JSON)",
        "dependent": "the fact depends on another that changed or was forgotten (the pet's name after the pet)",
        "answer": "the arm's answer (inline: the bot's reply in the chat)",
        "correct": "recalled and not stale, or the deletion honoured",
        "recalled": "the answer gives the current value",
        "stale": "the answer gives an old value and not the current one",
        "deletion_honoured": "a forgotten fact is absent from the answer and from every store of the arm",
        "deleted_in_stores": "the arm's stores that still hold a forgotten fact (JSON)",
        "scored_by": "match (normalised strings and the card's aliases); for a free-text fact, as the report scores "
        "it: judge (the verdict of the judge admitted on the study's probe answers) or not admitted (no such verdict: "
        "recalled, stale and correct empty, left out of every rate)",
        "match": "which form of the current value the answer mentions: exact (the value), alias (one of its aliases) "
        "or none",
        "free_text": "the fact is free text: the study's automatic judges score its answer (judge_verdicts)",
        "judge_verdicts": "the automatic judges' verdicts on this answer (JSON: judge, model, prompt, prompt_sha256, "
        "label: true CORRECT, false WRONG, null unreadable)",
        "stage": "where a failed probe failed: extraction, update, retrieval or generation",
        "stage_why": "the evidence for the stage",
        "answerable_without_memory": "the none arm or a closed-book prompt answered it: left out of the memory gain",
        "necessity": "the control's answers (JSON: none arm and closed-book answers and whether each recalled)",
        "told": "the worker did what the card asked (said the fact or its change, asked to forget; asked the probe)",
    },
    "answers": {
        "worker": _COMMON["worker"],
        "block": "pre (before the first session), check (the comprehension check on the instructions) or post (after "
        "the last session)",
        "question": "the question's place: its block and number in it (pre-1, check-2, post-1…); the header lists them",
        "question_text": "the question as the worker read it",
        "kind": "choice (single choice), likert (labelled points) or text (free text)",
        "required": "true when the question had to be answered",
        "option": "the option chosen, numbered from 1 in the order shown (a Likert point: 1 = the first label); "
        "empty for free text and for an optional question left out",
        "answer": "the option's label, or the free text as written (empty: not answered)",
        "attempt": "check: the try (1, 2, …); each try of the comprehension check is a row per question",
        "correct": "check: whether this answer was the right option",
        "attempt_passed": "check: whether every answer of this try was right",
        "answered_at": "when the answer was saved (UTC)",
    },
}


class ExportError(ValueError):
    """A bad ``what`` or format (the message says which are known)."""


def header(study: Study, what: str, fmt: str) -> dict[str, Any]:
    """The README of an export: study design, arms, pilot mark, export time, column meanings."""
    readiness = {r.arm.pk: r for r in armjobs.readiness(study)}
    arms = []
    for arm in study.arms.order_by("id"):
        r = readiness.get(arm.pk)
        llm = not arm.is_qc  # the QC arm's replies are drawn from a dialogue set: it makes no LLM call
        arms.append(
            {
                "name": arm.name,
                "memory_system": arm.memory_system,
                "llm": llm,
                "backend": arm.resolved_backend if llm else "",
                "model": arm.resolved_model if llm else "",
                "params": arm.effective_params(),
                "quality_control": arm.is_qc,
                "active": arm.active,
                "readiness": r.label if r else "not checked",
            }
        )
    return {
        "export": what,
        "format": fmt,
        "study": study.name,
        "slug": study.slug,
        "pilot": study.pilot,
        "pilot_mark": PILOT_MARK if study.pilot else "",
        "exported_at": timezone.now().isoformat(timespec="seconds"),
        "design": {
            "status": study.status,
            "sessions_per_episode": study.sessions_per_episode,
            "gap_days": study.gap_days,
            "gap_max_days": study.gap_max_days if study.has_gap_range else None,
            "gap": gap_text(study),
            "min_user_turns": study.min_user_turns,
            "episodes_per_worker": study.episodes_per_worker,
            "reply_pacing": {
                "on": study.pace_replies,
                "min_seconds": study.pace_min_seconds,
                "chars_per_second": study.pace_chars_per_second,
            },
            "simulated_start": study.simulated_start.isoformat(),
            "quota": study.quota,
        },
        "metrics": [
            {"key": m.key, "statement": m.statement, "low": m.low_label, "high": m.high_label, "reversed": m.reversed}
            for m in study.metrics.order_by("order", "id")
        ],
        "arms": arms,
        "columns": COLUMNS[what],
        "source": "memeval (python manage.py export_study)",
        **({"questions": question_list(study)} if what == "answers" else {}),
    }


def question_list(study: Study) -> dict[str, Any]:
    """The answers export's README: every question with its options, and the comprehension check's settings."""
    out = []
    for block in (Question.Block.PRE, Question.Block.CHECK, Question.Block.POST):
        for n, q in enumerate(questions.block_questions(study, block), start=1):
            out.append({"question": f"{block}-{n}", "text": q.text, "kind": q.kind, "required": q.required,
                        "options": q.labels, "right_option": None if q.correct is None else q.correct + 1,
                        "max_chars": q.max_chars if q.kind == Question.Kind.TEXT else None})  # fmt: skip
    return {"items": out, "comprehension_attempts": study.comprehension_attempts,
            "after_last_failed_attempt": study.comprehension_fail_action}  # fmt: skip


def gap_text(study: Study) -> str:
    """The simulated time between sessions as the design has it: a fixed gap, or the range each gap is drawn from."""
    if study.has_gap_range:
        return f"{study.gap_days:g} to {study.gap_max_days:g} days between sessions, drawn per gap"
    if not study.gap_days:
        return "all sessions on the same day (for the chatbot)"
    return f"{study.gap_days:g} day{'' if study.gap_days == 1 else 's'} between sessions"


def _readme_lines(h: dict[str, Any]) -> list[str]:
    d = h["design"]
    lines = [
        f"memeval export: {h['export']} of the study “{h['study']}” ({h['slug']}), exported {h['exported_at']}",
    ]
    if h["pilot"]:
        lines.append(f"{PILOT_MARK.upper()}: opened with arms that had not passed their readiness checks")
    lines += [
        f"design: {d['sessions_per_episode']} sessions per episode, {d['gap']}, "
        f"at least {d['min_user_turns']} answered user turns per session, {d['episodes_per_worker']} episodes per worker "
        f"(each with a different arm, drawn at random), bot's clock from {d['simulated_start']}, status {d['status']}",
        (
            f"reply pacing: every arm's reply shown no sooner than {d['reply_pacing']['min_seconds']:g} s after the "
            f"worker's message, then at most {d['reply_pacing']['chars_per_second']:g} characters/s"
            if d["reply_pacing"]["on"]
            else "reply pacing: off (each reply shown as fast as its arm wrote it)"
        ),
        "metrics (0-100 sliders): "
        + "; ".join(f"{m['key']}{' (reversed)' if m['reversed'] else ''}: {m['statement']}" for m in h["metrics"]),
        "arms:",
    ]
    for a in h["arms"]:
        flags = ", ".join(x for x in ("QC" if a["quality_control"] else "", "" if a["active"] else "inactive") if x)
        runs_on = f"on {a['backend']} / {a['model'] or '(no model)'}" if a["llm"] else "(no LLM call)"
        lines.append(
            f"  {a['name']}: {a['memory_system']} {runs_on}"
            f"{' [' + flags + ']' if flags else ''}; readiness: {a['readiness']}; "
            f"params {json.dumps(a['params'], sort_keys=True)}"
        )
    if "questions" in h:
        qs = h["questions"]
        lines.append(
            f"questions (comprehension check: {qs['comprehension_attempts']} tries, then "
            f"{'stop' if qs['after_last_failed_attempt'] == 'stop' else 'continue, marked'}):"
        )
        for q in qs["items"]:
            options = " | ".join(
                f"{i}. {o}{' (right)' if q['right_option'] == i else ''}" for i, o in enumerate(q["options"], start=1)
            )
            lines.append(f"  {q['question']} [{q['kind']}{'' if q['required'] else ', optional'}]: {q['text']}"
                         + (f" — {options}" if options else f" — at most {q['max_chars']} characters"))  # fmt: skip
    lines.append("columns:")
    lines += [f"  {name}: {meaning}" for name, meaning in h["columns"].items()]
    return lines


def _records(study: Study, what: str) -> Iterator[dict[str, Any]]:
    if what == "ratings":
        ratings: QuerySet[Rating] = (
            Rating.objects.filter(session__episode__participant__study=study)
            .exclude(session__episode__participant__source=Participant.Source.PREVIEW)
            .select_related("session__episode__arm", "session__episode__participant", "metric")
            .order_by(
                "session__episode__participant_id", "session__episode_id", "session__index", "metric__order", "id"
            )
        )
        for r in ratings.iterator(chunk_size=2000):
            ep = r.session.episode
            yield {
                **_who(ep.participant.pseudonym, ep.pk, ep.arm.name, ep.arm.memory_system, r.session.index),
                "metric": r.metric.key,
                "value": r.value,
                "reversed": r.metric.reversed,
                "rated_at": r.created_at.isoformat(),
                "silent_session": r.session.silent,
                "non_blind": r.session.non_blind,
            }
    elif what == "transcripts":
        messages: QuerySet[Message] = (
            Message.objects.filter(session__episode__participant__study=study)
            .exclude(session__episode__participant__source=Participant.Source.PREVIEW)
            .select_related("session__episode__arm", "session__episode__participant")
            .order_by("session__episode__participant_id", "session__episode_id", "session__index", "seq")
        )
        for m in messages.iterator(chunk_size=2000):
            ep = m.session.episode
            yield {
                **_who(ep.participant.pseudonym, ep.pk, ep.arm.name, ep.arm.memory_system, m.session.index),
                "simulated_start": m.session.simulated_start.isoformat(),
                "seq": m.seq,
                "speaker": m.speaker,
                "text": m.text,
                "status": m.status,
                "created_at": m.created_at.isoformat(),
                "first_token_ms": m.first_token_ms,
                "generated_ms": m.generated_ms,
                "shown_ms": m.shown_ms,
            }
    elif what == "memory":
        snapshots: QuerySet[MemorySnapshot] = (
            MemorySnapshot.objects.filter(session__episode__participant__study=study)
            .exclude(session__episode__participant__source=Participant.Source.PREVIEW)
            .select_related("session__episode__arm", "session__episode__participant")
            .order_by("session__episode__participant_id", "session__episode_id", "session__index")
        )
        for s in snapshots.iterator(chunk_size=50):
            ep = s.session.episode
            state = vectors.redacted(s.state)
            yield {
                **_who(ep.participant.pseudonym, ep.pk, ep.arm.name, ep.arm.memory_system, s.session.index),
                "status": s.status,
                "memory": display.as_text(display.readable(state)),
                "state": state,
                "trace": {k: v for k, v in (s.trace or {}).items() if k != "llm_calls"},
                "error": s.error,
                "finished_at": s.finished_at.isoformat() if s.finished_at else "",
            }
    elif what == "personas":
        episodes: QuerySet[Episode] = (
            Episode.objects.filter(participant__study=study).exclude(persona={}).select_related("arm", "participant")
            .order_by("participant_id", "id")
        )  # fmt: skip
        for ep in episodes.iterator(chunk_size=500):
            p = ep.persona
            yield {"worker": ep.participant.pseudonym, "episode": ep.pk, "arm": ep.arm.name,
                   "memory_system": ep.arm.memory_system, "card": p.get("card"),
                   "events": (p.get("script") or {}).get("events", []), "bank": p.get("bank")}  # fmt: skip
    elif what == "probes":
        probes: QuerySet[ProbeResult] = (
            ProbeResult.objects.filter(session__episode__participant__study=study)
            .select_related("session__episode__arm", "session__episode__participant")
            .order_by("session__episode__participant_id", "session__episode_id", "session__index", "mode", "id")
        )
        judging = probejudging.judging(study)  # free-text facts: scored as the report scores them
        admitted = judging["verdicts"] if judging and judging["admitted"] else {}
        verdicts: dict[int, list[dict[str, Any]]] = {}
        # the judges app's ProbeJudgement, read through its relation's name (reports sits below judges)
        for probe_id, *verdict in ProbeResult.objects.filter(
            session__episode__participant__study=study, judgements__isnull=False
        ).values_list("pk", "judgements__judge__name", "judgements__model", "judgements__prompt",
                      "judgements__prompt_sha256", "judgements__label"):  # fmt: skip
            verdicts.setdefault(probe_id, []).append(
                dict(zip(("judge", "model", "prompt", "prompt_sha256", "label"), verdict, strict=True))
            )
        for pr in probes.iterator(chunk_size=1000):
            ep = pr.session.episode
            item = pr.item or {}
            row = {
                **_who(ep.participant.pseudonym, ep.pk, ep.arm.name, ep.arm.memory_system, pr.session.index),
                **{k: item.get(k) for k in COLUMNS["probes"] if k not in _COMMON},
                "mode": pr.mode, "slot": pr.slot, "kind": pr.kind, "question": pr.question, "answer": pr.answer,
                "correct": pr.correct, "recalled": pr.recalled, "stale": pr.stale,
                "deletion_honoured": pr.deletion_honoured, "stage": pr.stage,
                "answerable_without_memory": pr.answerable_without_memory, "told": pr.told,
                "judge_verdicts": verdicts.get(pr.pk, []),
            }  # fmt: skip
            if item.get("free_text") and pr.kind in ("current", "updated"):
                probejudging.judged_scores(row, admitted.get(pr.pk), bool(item.get("stale_mentioned")))
            yield row
    elif what == "answers":
        yield from _answer_records(study)
    else:
        calls: QuerySet[LLMCallRecord] = (
            LLMCallRecord.objects.filter(session__episode__participant__study=study)
            .exclude(session__episode__participant__source=Participant.Source.PREVIEW)
            .select_related("session__episode__arm", "session__episode__participant", "message")
            .order_by("session__episode__participant_id", "session__episode_id", "session__index", "id")
        )
        for c in calls.iterator(chunk_size=100):
            ep = c.session.episode
            yield {
                **_who(ep.participant.pseudonym, ep.pk, ep.arm.name, ep.arm.memory_system, c.session.index),
                "message_seq": c.message.seq if c.message else None,
                "purpose": c.purpose,
                "model": c.model,
                "latency_ms": c.latency_ms,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "error": c.error,
                "messages": c.messages,
                "reply": c.reply,
                "created_at": c.created_at.isoformat(),
            }


def _answer_records(study: Study) -> Iterator[dict[str, Any]]:
    """Every submitted answer, then every try of the comprehension check (a row per question), by worker."""
    codes: dict[int, tuple[str, Question]] = {}
    for block in (Question.Block.PRE, Question.Block.CHECK, Question.Block.POST):
        for n, q in enumerate(questions.block_questions(study, block), start=1):
            codes[q.pk] = (f"{block}-{n}", q)
    workers = (
        Participant.objects.filter(study=study).exclude(source=Participant.Source.PREVIEW).order_by("created_at", "pk")
    )
    answers = Answer.objects.filter(participant__in=workers).select_related("participant")
    by_worker: dict[int, list[dict[str, Any]]] = {}
    for a in answers.iterator(chunk_size=2000):
        code, q = codes[a.question_id]
        by_worker.setdefault(a.participant_id, []).append({
            "worker": a.participant.pseudonym, "block": q.block, "question": code, "question_text": q.text,
            "kind": q.kind, "required": q.required, "option": None if a.choice is None else a.choice + 1,
            "answer": a.text, "attempt": None, "correct": None, "attempt_passed": None,
            "answered_at": a.answered_at.isoformat(),
        })  # fmt: skip
    attempts = ComprehensionAttempt.objects.filter(participant__in=workers).select_related("participant")
    for t in attempts.order_by("participant_id", "number").iterator(chunk_size=2000):
        for key, choice in (t.answers or {}).items():
            if int(key) not in codes:
                continue
            code, q = codes[int(key)]
            ok = isinstance(choice, int) and 0 <= choice < len(q.labels)
            by_worker.setdefault(t.participant_id, []).append({
                "worker": t.participant.pseudonym, "block": q.block, "question": code, "question_text": q.text,
                "kind": q.kind, "required": True, "option": choice + 1 if ok else None,
                "answer": q.labels[choice] if ok else "", "attempt": t.number, "correct": choice == q.correct,
                "attempt_passed": t.passed, "answered_at": t.answered_at.isoformat(),
            })  # fmt: skip
    rank = {"pre": 0, "check": 1, "post": 2}
    for pk in workers.values_list("pk", flat=True):
        rows = by_worker.get(pk, [])
        rows.sort(key=lambda r: (rank[r["block"]], r["attempt"] or 0, int(r["question"].split("-")[1])))
        yield from rows


def _who(worker: str, episode: int, arm: str, system: str, session: int) -> dict[str, Any]:
    return {"worker": worker, "episode": episode, "arm": arm, "memory_system": system, "session": session}


def _csv_line(values: list[Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue()


def _header_line(text: str) -> str:
    """One README line of a CSV export: one physical line (every kind of line break in researcher-typed text,
    ``\\r`` and Unicode's included, becomes a space, so ``skiprows=N`` counts right) and one quoted CSV cell
    starting with ``#``, so no part of a name a researcher typed (``=HYPERLINK(...)`` after a comma, a semicolon
    or a tab) becomes a cell of its own that a spreadsheet would run, whatever separator it assumes."""
    flat = " ".join(f"# {text}".replace("\t", " ").splitlines())
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL).writerow([flat])
    return buf.getvalue()


def _csv_value(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    if value is None:
        return ""
    return neutralise_cell(value)  # text a spreadsheet would run as a formula gets a leading ' (numbers untouched)


def check(what: str, fmt: str) -> None:
    if what not in WHAT:
        raise ExportError(f"unknown export {what!r}: choose one of {', '.join(WHAT)}")
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")


def export_lines(study: Study, what: str, fmt: str) -> Iterator[str]:
    """The export as lines of text (each ending in a newline), header first; streams the records."""
    check(what, fmt)
    h = header(study, what, fmt)
    columns = list(COLUMNS[what])
    if fmt == "jsonl":
        yield json.dumps({"header": h}, ensure_ascii=False) + "\n"
        for record in _records(study, what):
            yield json.dumps(record, ensure_ascii=False) + "\n"
        return
    readme = _readme_lines(h)
    n = len(readme) + 1
    yield _header_line(f"{n} header lines (this README); read the table with pandas.read_csv(path, skiprows={n})")
    for line in readme:
        yield _header_line(line)
    yield _csv_line(columns)
    for record in _records(study, what):
        yield _csv_line([_csv_value(record[c]) for c in columns])


def filename(study: Study, what: str, fmt: str) -> str:
    pilot = "-PILOT" if study.pilot else ""
    return f"{study.slug}{pilot}-{what}.{fmt}"
