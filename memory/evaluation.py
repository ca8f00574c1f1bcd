"""Automatic evaluation of an arm on a long-term memory QA set: GVD (ships in ``memory/data/gvd``) or LoCoMo.

:func:`evaluate` replays each dialogue's sessions through the arm the way the platform drives it
(compose → reply → after_turn per user message, end_session after each session), on the dataset's
own dates, so the gaps between sessions are the dataset's. Recorded bot turns are kept, as in the
LD-Agent, MemoryBank and LoCoMo evaluations. Then each question is put to the arm as a user message
in a new session (the day after the last one, or at the question's own date) and its reply is scored
(:mod:`memory.evalscore`, :mod:`memory.locomo`): set F1, LoCoMo's reference F1, and an LLM judge J.

Per category and overall, plus the reply prompt's size, every LLM call by purpose and phase (replies,
memory work after each turn and at each session's end, answers, the judge) and the latency of answers
and memory updates. The headline excludes LoCoMo's adversarial category 5 (as mem0's paper) and GVD's
unanswerable questions. The result is a JSON-serialisable dict (shape in docs/memory-systems.md).

Long runs: every finished session (with the arm's state after it) and every scored question can be
written to a journal file as it happens (:class:`Journal`); a run given the same journal resumes
where it stopped. A transient LLM error is retried with backoff (:class:`memory.llmwrap.RetryingLLM`);
one that outlasts the retries stops the run with :class:`EvaluationStopped`, which carries the journal.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory import locomo
from memory.base import MemorySystem, Turn, ensure_json
from memory.evaljournal import DatasetError, EvaluationStopped, Journal
from memory.evalreport import (
    GVD_GOLD_NOTE,
    percentile,
    render_markdown,
    stand_in_warning,
    summarize,
)
from memory.evalscore import (
    EXCLUDED_FROM_HEADLINE,
    JUDGE_PROMPT,
    judge_answer,
    judge_verdict,
    parse_label,
    token_f1,
    tokens,
)
from memory.llm import LLM, LLMError
from memory.llmwrap import RecordingLLM, RetryingLLM, RetryPolicy

__all__ = [
    "EXCLUDED_FROM_HEADLINE",
    "GVD_GOLD_NOTE",
    "JUDGE_PROMPT",
    "LOCOMO_CATEGORIES",
    "DatasetError",
    "EvalDialogue",
    "EvaluationStopped",
    "Journal",
    "Question",
    "evaluate",
    "judge_answer",
    "load_dataset",
    "load_gvd",
    "load_locomo",
    "parse_label",
    "percentile",
    "render_markdown",
    "replay_session",
    "run",
    "token_f1",
    "tokens",
]

GVD_DIR = Path(__file__).resolve().parent / "data" / "gvd"
LOCOMO_CATEGORIES: dict[int, str] = locomo.CATEGORY_MAPS["locomo"]["names"]
Progress = Callable[[int, int, str], None]

#: The GVD files the loader reads, by SHA-256 (memory/data/gvd/README.md).
GVD_RELEASES = {
    "memory_bank_en.json": {
        "27c302202f9675d87dcaa73e3a42dc0fca8999dcff3c6e7882a787c8a08d9bc7": (
            "MemoryBank-SiliconFriend @ cf61c41, eval_data/en/memory_bank_en.json (MIT)"
        )
    },
    "answers_en.jsonl": {
        "774adeb1900356b5d0c222fc5dcd2b812ff3d7fd75f329131dd5ddc51d57e496": (
            "memeval's gold answers as shipped in memory/data/gvd (100 questions)"
        )
    },
}


@dataclass
class Question:
    """One question. ``abstain``: the right answer is that the conversations do not say (LoCoMo's
    category 5, GVD's unanswerable); ``trap`` is then the wrong answer a confused memory would give.
    ``ask`` is the text put to the arm when it differs (LoCoMo's two-option form of category 5, whose
    ``options`` map a letter reply to its option). ``code`` is LoCoMo's category number."""

    question: str
    answer: str
    category: str
    date: datetime | None = None
    qid: str = ""
    code: int | None = None
    abstain: bool = False
    trap: str = ""
    ask: str = ""
    options: dict[str, str] | None = None


@dataclass
class EvalDialogue:
    name: str
    sessions: list[tuple[datetime, list[dict[str, str]]]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    speakers: tuple[str, str] | None = None  # LoCoMo: (speaker A = the user, speaker B = the bot)


# ------------------------------------------------------------------------------------------- loading


def _evening(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(hour=18, tzinfo=UTC)


def load_gvd(folder: Path | None = None) -> list[EvalDialogue]:
    """The English GVD set with memeval's gold answers (``answers_en.jsonl``), one dialogue per user.

    User keys are stripped (four carry surrounding spaces in the original file)."""
    folder = folder or GVD_DIR
    try:
        data = json.loads((folder / "memory_bank_en.json").read_text(encoding="utf-8"))
        answers = [
            json.loads(line)
            for line in (folder / "answers_en.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"cannot read the GVD set in {folder}: {exc}") from exc
    out: dict[str, EvalDialogue] = {}
    for key, record in data.items():
        d = out.setdefault(key.strip(), EvalDialogue(key.strip()))
        for day, pairs in sorted(record.get("history", {}).items()):
            turns: list[dict[str, str]] = []
            for pair in pairs:
                turns += [{"speaker": "user", "text": pair["query"]}, {"speaker": "bot", "text": pair["response"]}]
            d.sessions.append((_evening(day), turns))
    for row in answers:
        user = str(row["user"]).strip()
        if user not in out:
            raise DatasetError(f"{folder / 'answers_en.jsonl'}: unknown user {user!r}")
        d = out[user]
        category = str(row["category"])
        d.questions.append(
            Question(
                row["question"],
                row["answer"],
                category,
                qid=f"gvd_{user}_q{len(d.questions)}",
                abstain=category == "unanswerable",
            )
        )
    return list(out.values())


def _locomo_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load_locomo(path: Path, category_map: str = "locomo") -> list[EvalDialogue]:
    """LoCoMo (``locomo10.json``: a list of samples with ``conversation`` and ``qa``). Read from the
    user's path: its licence (CC BY-NC 4.0) keeps it out of the repository.

    Speaker A's turns are the user's messages, speaker B's the bot's; each keeps its speaker's name and
    shared images as LoCoMo's replay writes them (:func:`memory.locomo.turn_text`). Category 5
    (adversarial) has "Not mentioned in the conversation" as its answer and its
    ``adversarial_answer`` as the trap, and is asked in the reference's two-option form. Question ids
    are the public audit's (``locomo_<n>_qa<k>``)."""
    if category_map not in locomo.CATEGORY_MAPS:
        raise DatasetError(f"unknown category map {category_map!r} ({', '.join(locomo.CATEGORY_MAPS)})")
    names: dict[int, str] = locomo.CATEGORY_MAPS[category_map]["names"]
    try:
        samples = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"cannot read LoCoMo file {path}: {exc}") from exc
    if not isinstance(samples, list):
        raise DatasetError(f"{path}: expected a list of LoCoMo samples")
    out = []
    for n, sample in enumerate(samples):
        try:
            conv = sample["conversation"]
            a, b = str(conv["speaker_a"]), str(conv["speaker_b"])
            d = EvalDialogue(str(sample.get("sample_id", n)), speakers=(a, b))
            k = 1
            while f"session_{k}" in conv:
                turns = [
                    {"speaker": "user" if t["speaker"] == a else "bot", "text": locomo.turn_text(t)}
                    for t in conv[f"session_{k}"]
                ]
                d.sessions.append((_locomo_date(conv[f"session_{k}_date_time"]), turns))
                k += 1
            for i, qa in enumerate(sample.get("qa", [])):
                code = int(qa["category"])
                qid = locomo.audit_id(n, i)
                question = str(qa["question"])
                if code == 5:
                    trap = str(qa.get("adversarial_answer", qa.get("answer", "")))
                    ask, options = locomo.adversarial_question(question, trap, qid)
                    d.questions.append(
                        Question(question, locomo.ABSTAIN_OPTION, names.get(code, str(code)), qid=qid, code=code,
                                 abstain=True, trap=trap, ask=ask, options=options)
                    )  # fmt: skip
                else:
                    answer = str(qa["answer"])
                    d.questions.append(Question(question, answer, names.get(code, str(code)), qid=qid, code=code))
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"{path}: sample {n} is not in LoCoMo's format ({type(exc).__name__}: {exc})") from exc
        out.append(d)
    return out


def load_dataset(dataset: str, path: str | Path | None = None, *, category_map: str = "locomo") -> list[EvalDialogue]:
    """``gvd`` (the copy in memory/data/gvd, or a folder holding the same files) or ``locomo`` (a path)."""
    if dataset == "gvd":
        return load_gvd(Path(path) if path else None)
    if dataset == "locomo":
        if not path:
            raise DatasetError("LoCoMo is not shipped (CC BY-NC 4.0): give the path of your locomo10.json")
        return load_locomo(Path(path), category_map)
    raise DatasetError(f"unknown dataset {dataset!r} (gvd or locomo; cards runs through memory.cardeval)")


def dataset_check(dataset: str, path: str | Path | None = None) -> dict[str, Any]:
    """The SHA-256 of each file the loader reads and the known release it is, if any. An unknown file
    is a warning (the scores cannot be compared with published ones), not an error."""
    if dataset == "gvd":
        folder = Path(path) if path else GVD_DIR
        files = [(folder / name, GVD_RELEASES[name]) for name in GVD_RELEASES]
    else:
        files = [(Path(str(path)), locomo.KNOWN_RELEASES)]
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for file, known in files:
        try:
            digest = locomo.sha256_of(file)
        except OSError:
            digest = ""
        release = known.get(digest)
        rows.append({"file": file.name, "sha256": digest, "release": release})
        if release is None:
            problems.append(
                f"{file.name} (sha256 {digest[:12]}…) is not a known release (known: {'; '.join(known.values())})"
            )
    warning = None
    if problems:
        warning = "; ".join(problems) + ": its scores cannot be compared with scores on the release"
    return {"files": rows, "known": not problems, "warning": warning}


def read_exclusions(paths: Sequence[str | Path]) -> set[str]:
    """Question ids of known-wrong gold answers, from files of one of these forms: one id per line
    (``#`` starts a comment); a JSON list of ids; a JSON list of objects with ``question_id`` (the
    public LoCoMo audit's ``errors_conv_*.json``, whose ``WRONG_CITATION`` entries, right answers
    with a wrong evidence id, are not excluded)."""
    ids: set[str] = set()
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise DatasetError(f"cannot read the exclusion list {path}: {exc}") from exc
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            ids |= {line.split("#")[0].strip() for line in text.splitlines()} - {""}
            continue
        if not isinstance(value, list):
            raise DatasetError(f"{path}: expected a list of question ids or of objects with 'question_id'")
        for entry in value:
            if isinstance(entry, str):
                ids.add(entry.strip())
            elif isinstance(entry, dict) and "question_id" in entry:
                if str(entry.get("error_type", "")).upper() != "WRONG_CITATION":
                    ids.add(str(entry["question_id"]).strip())
            else:
                raise DatasetError(f"{path}: {entry!r} is neither a question id nor an object with 'question_id'")
    return ids


# ------------------------------------------------------------------------------------------- running


def approx_tokens(messages: Sequence[dict[str, str]]) -> int:
    # ~4 characters per token (as full_history's budget): comparable across arms, no tokenizer needed
    return sum(len(m["content"]) for m in messages) // 4 + 1


def _phase_of(step: str, purpose: str) -> str:
    if step == "replay":
        return "reply" if purpose == "reply" else "memory_turn"
    if step == "question":
        return "answer" if purpose == "answer" else "other"
    return step


def _calls(llm: RecordingLLM, step: str) -> list[dict[str, Any]]:
    """The calls recorded since the last drain, in the compact form the journal keeps."""
    return [
        {
            "purpose": c["purpose"] or "-",
            "phase": _phase_of(step, c["purpose"]),
            "prompt_tokens": c["prompt_tokens"],
            "completion_tokens": c["completion_tokens"],
            "approx_prompt_tokens": approx_tokens(c["messages"]),
            "error": bool(c["error"]),
        }
        for c in llm.drain()
    ]


def replay_session(
    system: MemorySystem,
    llm: LLM,
    state: dict[str, Any],
    start: datetime,
    turns: Sequence[dict[str, Any]],
    *,
    max_tokens: int,
    on_prompt: Callable[[Any], None] | None = None,
) -> tuple[dict[str, Any], list[Turn], datetime]:
    """Replay one session's written turns through an arm, one minute apart from ``start``.

    A user turn not followed by a written bot turn gets the arm's own reply (its ``Prompt.reply`` if the
    arm answers without the model, else ``llm``); every turn goes through ``after_turn``. Returns the state,
    the session's turns and the time of the last turn, for the caller's ``end_session``. ``on_prompt`` sees
    every reply prompt (the evaluation counts its tokens)."""
    session: list[Turn] = []
    at = start
    for i, t in enumerate(turns):
        at = start + timedelta(minutes=i)
        if t["speaker"] == "user":
            session.append(Turn("user", t["text"], at))
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            if nxt is None or nxt["speaker"] != "bot":
                prompt = system.compose(state, list(session), at)
                if on_prompt is not None:
                    on_prompt(prompt)
                reply = (
                    prompt.reply
                    if prompt.reply is not None
                    else llm.complete(prompt.as_dicts(), max_tokens=max_tokens, purpose="reply").text
                )
                session.append(Turn("bot", reply, at))
                state = ensure_json(system.after_turn(state, list(session), at).state)
        else:
            session.append(Turn("bot", t["text"], at))
            state = ensure_json(system.after_turn(state, list(session), at).state)
    return state, session, at


@dataclass
class Scoring:
    """How answers are scored: ``primary`` F1 (``"locomo"`` or ``"set"``) for the stand-in judge and the
    headline, and the question ids whose gold answers are known to be wrong."""

    primary: str = "set"
    excluded: frozenset[str] = frozenset()


def score_answer(q: Question, answer: str, judge: LLM | None, scoring: Scoring) -> dict[str, Any]:
    """The scores of one answer: set F1, LoCoMo F1, the judge's verdict."""
    shown = locomo.option_answer(answer, q.options) if q.options else answer
    loc = locomo.score(q.code, shown, q.answer) if q.code is not None else locomo.f1_score(shown, q.answer)
    set_f1 = loc if q.code == 5 else token_f1(shown, q.answer)
    main = loc if scoring.primary == "locomo" else set_f1
    if q.abstain and q.code is None:  # GVD's unanswerable: the stand-in judge uses the abstention rule
        main = float(locomo.abstains(shown))
    verdict = judge_verdict(judge, q.question, q.answer, shown, abstain=q.abstain, trap=q.trap, stand_in_score=main)
    return {"f1": round(set_f1, 4), "locomo_f1": round(loc, 4), **verdict.as_item(), "scored_answer": shown}


def evaluate(
    system: MemorySystem,
    dialogues: Sequence[EvalDialogue],
    llm: RecordingLLM,
    *,
    judge: LLM | None,
    arm: str,
    dataset: str,
    max_tokens: int = 64,
    max_sessions: int | None = None,
    max_questions: int | None = None,
    progress: Progress | None = None,
    info: dict[str, Any] | None = None,
    scoring: Scoring | None = None,
    journal: Journal | None = None,
) -> dict[str, Any]:
    """Replay every dialogue through ``system`` (whose LLM is ``llm``), ask its questions, score them.

    ``progress(done, total, message)`` is called after each session and each question (``total`` =
    sessions + questions of the run), so a background job can show how far it is. ``journal`` keeps
    what is finished (and, if it has records, what to skip). Returns the result dict documented in
    docs/memory-systems.md ("Automatic evaluation"); raises :class:`EvaluationStopped` if an LLM error
    or an interrupt stops the run."""
    scoring = scoring or Scoring()
    journal = journal if journal is not None else Journal()
    judge_rec = RecordingLLM(judge) if judge is not None else None
    plan = [(d, d.sessions[:max_sessions], d.questions[:max_questions]) for d in dialogues]
    total = sum(len(s) + len(q) for _, s, q in plan)
    done = 0
    try:
        for d, sessions, questions in plan:
            done = _run_dialogue(
                system, d, sessions, questions, llm, judge_rec, journal, scoring,
                max_tokens=max_tokens, progress=progress, done=done, total=total,
            )  # fmt: skip
    except (LLMError, KeyboardInterrupt) as exc:
        names = {d.name for d, _, _ in plan}
        done = sum(1 for r in journal.records if r.get("kind") in ("session", "question") and r["dialogue"] in names)
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        raise EvaluationStopped(f"stopped after {done} of {total} steps: {why}", journal=journal, done=done,
                                total=total) from exc  # fmt: skip
    return summarize(journal, plan, arm=arm, dataset=dataset, judge=judge, info=info or {}, scoring=scoring)


def _run_dialogue(
    system: MemorySystem,
    d: EvalDialogue,
    sessions: Sequence[tuple[datetime, list[dict[str, str]]]],
    questions: Sequence[Question],
    llm: RecordingLLM,
    judge: RecordingLLM | None,
    journal: Journal,
    scoring: Scoring,
    *,
    max_tokens: int,
    progress: Progress | None,
    done: int,
    total: int,
) -> int:
    answered = {r["qid"] for r in journal.of("question", d.name)}
    recorded = journal.of("session", d.name)
    if all(q.qid in answered for q in questions):
        if progress and (sessions or questions):
            progress(done + len(sessions) + len(questions), total, f"{d.name}: done in an earlier run")
        return done + len(sessions) + len(questions)
    state = ensure_json(system.initial_state())
    last: datetime | None = None
    first = 0
    if recorded:
        latest = max(recorded, key=lambda r: r["session"])
        state, first = latest["state"], latest["session"] + 1
        last = datetime.fromisoformat(latest["at"])
        done += first
    llm.drain()
    for k in range(first, len(sessions)):
        start, turns = sessions[k]
        prompts: list[Any] = []
        state, session, at = replay_session(
            system, llm, state, start, turns, max_tokens=max_tokens, on_prompt=prompts.append
        )  # fmt: skip
        turn_tokens = [approx_tokens(p.as_dicts()) for p in prompts]
        calls = _calls(llm, "replay")
        began = time.perf_counter()
        update = system.end_session(state, list(session), at + timedelta(minutes=1))
        state = ensure_json(update.state)
        update_ms = round((time.perf_counter() - began) * 1000, 1)
        calls += _calls(llm, "memory_session")
        last = at
        journal.add(
            {"kind": "session", "dialogue": d.name, "session": k, "at": at.isoformat(), "state": state,
             "update_ms": update_ms, "turn_tokens": turn_tokens, "calls": calls,
             "fallbacks": len(update.trace.get("fallbacks") or [])}
        )  # fmt: skip
        done += 1
        if progress:
            progress(done, total, f"{d.name}: session {start:%Y-%m-%d} replayed")
    ask_day = (last or datetime.now(UTC)) + timedelta(days=1)
    for q in questions:
        if q.qid in answered:
            done += 1
            continue
        when = q.date or ask_day
        began = time.perf_counter()
        prompt = system.compose(state, [Turn("user", q.ask or q.question, when)], when)
        answer = (
            prompt.reply
            if prompt.reply is not None
            else llm.complete(prompt.as_dicts(), max_tokens=max_tokens, purpose="answer").text
        )
        latency = (time.perf_counter() - began) * 1000
        calls = _calls(llm, "question")
        item = {
            "dialogue": d.name,
            "qid": q.qid,
            "question": q.question,
            **({"asked": q.ask} if q.ask else {}),
            "gold": q.answer,
            **({"trap": q.trap} if q.abstain and q.trap else {}),
            "answer": answer,
            "category": q.category,
            **({"locomo_category": q.code} if q.code is not None else {}),
            **score_answer(q, answer, judge, scoring),
            "excluded_gold": q.qid in scoring.excluded,
            "memory": prompt.memory,
            "latency_ms": round(latency, 1),
        }
        if judge is not None:
            calls += _calls(judge, "judge")
        journal.add(
            {"kind": "question", "dialogue": d.name, "qid": q.qid, "item": item,
             "turn_tokens": [approx_tokens(prompt.as_dicts())], "calls": calls}
        )  # fmt: skip
        done += 1
        if progress:
            progress(done, total, f"{d.name}: {len(journal.of('question', d.name))} questions answered")
    return done


def run(
    arm: str,
    dataset: str,
    path: str | Path | None = None,
    *,
    backend: str = "scripted",
    model: str = "",
    judge_model: str = "",
    base_url: str = "",
    api_key: str = "",
    embedder: str = "wordllama",
    params: dict[str, Any] | None = None,
    dialogues: Sequence[str] = (),
    max_sessions: int | None = None,
    max_questions: int | None = None,
    max_tokens: int = 64,
    progress: Progress | None = None,
    wrap_llm: Callable[[LLM], LLM] | None = None,
    f1: str = "",
    category_map: str = "locomo",
    exclude_gold: Sequence[str | Path] = (),
    journal: Journal | None = None,
    retry: RetryPolicy | None = None,
    on_retry: Callable[[int, float, Exception], None] | None = None,
    timeout: float | None = None,
    script: str | Path | None = None,
    max_cards: int | None = None,
    rejudge: Sequence[str] = (),
    second_judge_model: str = "",
) -> dict[str, Any]:
    """Evaluate the registered arm ``arm`` on ``dataset``: the entry point for a CLI or a background job.

    ``dataset="cards"`` runs scripted persona episodes instead (:func:`memory.cardeval.run`: ``path`` is a
    card bank, default the one that ships; ``script`` the event script; ``dialogues`` card ids;
    ``max_cards`` the first N cards); its result has per-probe ``items`` of another shape.

    The answer model and the arm's own calls use ``backend``/``model``; the judge uses the same
    backend with ``judge_model`` (default: ``model``); with ``backend="scripted"`` the judge is the
    F1 stand-in. ``wrap_llm``, if given, wraps the answer model and the judge before any call (a
    background job stops its calls there once it lost its lease). Every call is retried on transient
    errors (``retry``, default :class:`memory.llmwrap.RetryPolicy`). ``f1``: the headline F1, ``locomo``
    (default for LoCoMo) or ``set`` (default for GVD). ``exclude_gold``: files listing question ids
    whose gold answer is wrong (scores are reported with and without them). ``rejudge`` (rubric names of
    :data:`memory.rejudge.RUBRICS`) and ``second_judge_model`` re-judge the run's answers afterwards (no answer
    generated again) and add the ``sensitivity`` section (:func:`memory.rejudge.sensitivity`). Raises
    :class:`DatasetError` for a bad dataset, dialogue name, exclusion list or journal, ValueError for
    an unknown arm or parameter, :class:`EvaluationStopped` when the run stops early."""
    from memory.embed import make_embedder
    from memory.llm import make_llm
    from memory.registry import build_system

    rubrics = rejudge_rubrics(rejudge)
    if (rubrics or second_judge_model) and (dataset == "cards" or backend == "scripted"):
        raise DatasetError(
            "--rejudge and --second-judge-model re-judge the answers of gvd or locomo with a judge model; "
            + ("the persona cards' probes are matched or judged per fact" if dataset == "cards"
               else "the scripted backend has none (its judge is the F1 >= 0.5 stand-in)")
        )  # fmt: skip
    if dataset == "cards":  # scripted persona episodes and their probes (memory/cardeval.py)
        from memory import cardeval

        return cardeval.run(
            arm, path, script=script, backend=backend, model=model, judge_model=judge_model, base_url=base_url,
            api_key=api_key, embedder=embedder, params=params, cards=dialogues, max_cards=max_cards,
            max_sessions=max_sessions, max_tokens=max_tokens, progress=progress, wrap_llm=wrap_llm,
            journal=journal, retry=retry, on_retry=on_retry, timeout=timeout,
        )  # fmt: skip
    primary = f1 or ("locomo" if dataset == "locomo" else "set")
    if primary not in ("locomo", "set"):
        raise DatasetError(f"unknown F1 {primary!r} (locomo or set)")
    options: dict[str, Any] = {k: v for k, v in (("base_url", base_url), ("api_key", api_key)) if v}
    if timeout:
        options["timeout"] = timeout
    wrap = wrap_llm or (lambda x: x)
    policy = retry or RetryPolicy()

    def retrying(inner: LLM) -> RetryingLLM:
        return RetryingLLM(inner, policy=policy, on_retry=on_retry)

    base = retrying(wrap(make_llm(backend, model, **options)))
    llm = RecordingLLM(base)
    judge_base = None if backend == "scripted" else retrying(wrap(make_llm(backend, judge_model or model, **options)))
    emb = make_embedder(embedder)
    system = build_system(arm, llm=llm, embedder=emb, **(params or {}))
    data = load_dataset(dataset, path, category_map=category_map)
    if dialogues:
        wanted = {x.strip() for x in dialogues}
        unknown = wanted - {d.name for d in data}
        if unknown:
            raise DatasetError(f"no dialogue named {sorted(unknown)}; known: {[d.name for d in data]}")
        data = [d for d in data if d.name in wanted]
    excluded = read_exclusions(exclude_gold)
    check = dataset_check(dataset, path)
    settings = {
        "arm": arm, "dataset": dataset, "dataset_sha256": [f["sha256"] for f in check["files"]],
        "backend": backend, "model": llm.model, "judge_model": judge_model or model, "embedder": emb.name,
        "params": params or {}, "dialogues": sorted(d.name for d in data), "max_sessions": max_sessions,
        "max_questions": max_questions, "max_tokens": max_tokens, "category_map": category_map,
    }  # fmt: skip
    journal = journal if journal is not None else Journal()
    journal.start(settings)
    info = {
        "model": llm.model,
        "backend": backend,
        "embedder": emb.name,
        "params": params or {},
        "dataset_check": check,
        "category_map": category_map if dataset == "locomo" else "gvd",
        "gold_exclusions": {"files": [str(p) for p in exclude_gold], "ids": len(excluded)},
        "stand_in": stand_in_warning(backend, llm.model),
        "retries": [base.stats] + ([judge_base.stats] if judge_base is not None else []),
        "speakers": {d.name: list(d.speakers) for d in data if d.speakers},
    }
    result = evaluate(
        system,
        data,
        llm,
        judge=judge_base,
        arm=arm,
        dataset=dataset,
        max_tokens=max_tokens,
        max_sessions=max_sessions,
        max_questions=max_questions,
        progress=progress,
        info=info,
        scoring=Scoring(primary, frozenset(excluded)),
        journal=journal,
    )
    if judge_base is not None and (rubrics or second_judge_model):
        from memory.rejudge import sensitivity

        second = retrying(wrap(make_llm(backend, second_judge_model, **options))) if second_judge_model else None
        result["sensitivity"] = sensitivity(
            result, journal, judge=judge_base, judge_model=judge_base.model, rubrics=rubrics, second=second,
            second_model=second.model if second is not None else "", progress=progress,
        )  # fmt: skip
    return result


def rejudge_rubrics(names: Sequence[str] | str) -> list[str]:
    """The ``--rejudge`` rubrics, checked (:class:`DatasetError` for an unknown one)."""
    from memory.rejudge import parse_rubrics

    try:
        return parse_rubrics(names)
    except ValueError as exc:
        raise DatasetError(str(exc)) from exc
