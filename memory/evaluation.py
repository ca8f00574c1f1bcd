"""Automatic evaluation of an arm on a long-term memory QA set: GVD (ships in ``memory/data/gvd``) or LoCoMo.

:func:`evaluate` replays each dialogue's sessions through the arm the way the platform drives it
(compose → reply → after_turn per user message, end_session after each session), on the dataset's
own dates, so the gaps between sessions are the dataset's. Recorded bot turns are kept, as in the
LD-Agent, MemoryBank and LoCoMo evaluations. Then each question is put to the arm as a user message
in a new session (the day after the last one, or at the question's own date) and its reply is scored:

- **F1**: token F1 between the reply and the gold answer (the set-based F1 of mem0's and A-Mem's
  LoCoMo scripts, ``evaluation/metrics/utils.py``: lower case, ``.,!?`` removed, whitespace split);
- **J**: an LLM judge answering CORRECT or WRONG with the LoCoMo judge prompt of mem0's paper
  (``ACCURACY_PROMPT``, mem0ai/mem0 ``evaluation/metrics/llm_judge.py``, Apache-2.0), J = share CORRECT.
  With the ``scripted`` backend there is no model: the stand-in judge says CORRECT iff F1 ≥ 0.5, and
  the report says so (``judge.stand_in``).

Per category and overall, plus the reply prompt's size in tokens per turn and the latency of answers
and memory updates (p50/p95). The headline excludes LoCoMo's adversarial category 5 (as mem0's paper)
and GVD's unanswerable questions. The result is a JSON-serialisable dict (shape in docs/memory-systems.md).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory.base import MemorySystem, Turn, ensure_json
from memory.llm import LLM, LLMError, LLMTransientError, RecordingLLM

GVD_DIR = Path(__file__).resolve().parent / "data" / "gvd"

# mem0ai/mem0 evaluation/metrics/llm_judge.py ACCURACY_PROMPT, verbatim.
JUDGE_PROMPT = """
Your task is to label an answer to a question as ’CORRECT’ or ’WRONG’. You will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a ’gold’ (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
EXCLUDED_FROM_HEADLINE = {"adversarial", "unanswerable"}
Progress = Callable[[int, int, str], None]


@dataclass
class Question:
    question: str
    answer: str
    category: str
    date: datetime | None = None


@dataclass
class EvalDialogue:
    name: str
    sessions: list[tuple[datetime, list[dict[str, str]]]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


class DatasetError(ValueError):
    """A dataset file that cannot be read; the message names the file and the problem."""


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
        out[user].questions.append(Question(row["question"], row["answer"], row["category"]))
    return list(out.values())


def _locomo_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load_locomo(path: Path) -> list[EvalDialogue]:
    """LoCoMo (``locomo10.json``: a list of samples with ``conversation`` and ``qa``). Read from the
    user's path: its licence (CC BY-NC 4.0) forbids shipping it. Speaker A is the user, speaker B the
    bot. Categories 1-5 are multi-hop, temporal, open-domain, single-hop, adversarial."""
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
            a = conv["speaker_a"]
            d = EvalDialogue(str(sample.get("sample_id", n)))
            k = 1
            while f"session_{k}" in conv:
                turns = [
                    {"speaker": "user" if t["speaker"] == a else "bot", "text": t["text"]} for t in conv[f"session_{k}"]
                ]
                d.sessions.append((_locomo_date(conv[f"session_{k}_date_time"]), turns))
                k += 1
            for qa in sample.get("qa", []):
                category = LOCOMO_CATEGORIES.get(int(qa["category"]), str(qa["category"]))
                answer = qa.get("answer", qa.get("adversarial_answer", ""))
                d.questions.append(Question(str(qa["question"]), str(answer), category))
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"{path}: sample {n} is not in LoCoMo's format ({type(exc).__name__}: {exc})") from exc
        out.append(d)
    return out


# ------------------------------------------------------------------------------------------- scoring


def tokens(text: str) -> set[str]:
    """mem0's / A-Mem's ``simple_tokenize``, as a set."""
    return set(str(text).lower().replace(".", " ").replace(",", " ").replace("!", " ").replace("?", " ").split())


def token_f1(prediction: str, gold: str) -> float:
    """Set-based token F1 (mem0's and A-Mem's LoCoMo metric)."""
    p, g = tokens(prediction), tokens(gold)
    common = p & g
    if not p or not g or not common:
        return 0.0
    precision, recall = len(common) / len(p), len(common) / len(g)
    return 2 * precision * recall / (precision + recall)


def parse_label(reply: str) -> int | None:
    """1 for CORRECT, 0 for WRONG, None if the judge said neither (or both)."""
    upper = reply.upper()
    correct, wrong = "CORRECT" in upper, "WRONG" in upper
    if correct == wrong:
        return None
    return 1 if correct else 0


def judge_answer(judge: LLM | None, question: str, gold: str, answer: str) -> tuple[int | None, str]:
    """The judge's label (1/0/None) and its raw reply. ``judge=None``: the F1 ≥ 0.5 stand-in."""
    if judge is None:
        return int(token_f1(answer, gold) >= 0.5), "stand-in: F1 >= 0.5"
    prompt = JUDGE_PROMPT.format(question=question, gold_answer=gold, generated_answer=answer)
    try:
        reply = judge.complete([{"role": "user", "content": prompt}], max_tokens=120, purpose="judge").text
    except LLMTransientError:
        raise
    except LLMError as exc:
        return None, f"judge error: {exc}"
    return parse_label(reply), reply


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 1)


def approx_tokens(messages: Sequence[dict[str, str]]) -> int:
    # ~4 characters per token (as full_history's budget): comparable across arms, no tokenizer needed
    return sum(len(m["content"]) for m in messages) // 4 + 1


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


# ------------------------------------------------------------------------------------------- running


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
) -> dict[str, Any]:
    """Replay every dialogue through ``system`` (whose LLM is ``llm``), ask its questions, score them.

    ``progress(done, total, message)`` is called after each session and each question (``total`` =
    sessions + questions of the run), so a background job can show how far it is. Returns the result
    dict documented in docs/memory-systems.md ("Automatic evaluation")."""
    plan = [(d, d.sessions[:max_sessions], d.questions[:max_questions]) for d in dialogues]
    total = sum(len(s) + len(q) for _, s, q in plan)
    done = 0
    items: list[dict[str, Any]] = []
    update_ms: list[float] = []
    memory_calls: list[int] = []
    turn_tokens: list[int] = []
    fallbacks = 0
    for d, sessions, questions in plan:
        state = ensure_json(system.initial_state())
        last = None
        for start, turns in sessions:
            state, session, at = replay_session(
                system, llm, state, start, turns, max_tokens=max_tokens,
                on_prompt=lambda prompt: turn_tokens.append(approx_tokens(prompt.as_dicts())),
            )  # fmt: skip
            llm.drain()
            began = time.perf_counter()
            update = system.end_session(state, list(session), at + timedelta(minutes=1))
            state = ensure_json(update.state)
            fallbacks += len(update.trace.get("fallbacks") or [])
            update_ms.append((time.perf_counter() - began) * 1000)
            memory_calls.append(len(llm.drain()))
            last = at
            done += 1
            if progress:
                progress(done, total, f"{d.name}: session {start:%Y-%m-%d} replayed")
        ask_day = (last or datetime.now(UTC)) + timedelta(days=1)
        for q in questions:
            when = q.date or ask_day
            began = time.perf_counter()
            prompt = system.compose(state, [Turn("user", q.question, when)], when)
            turn_tokens.append(approx_tokens(prompt.as_dicts()))
            answer = (
                prompt.reply
                if prompt.reply is not None
                else llm.complete(prompt.as_dicts(), max_tokens=max_tokens, purpose="answer").text
            )
            latency = (time.perf_counter() - began) * 1000
            label, raw = judge_answer(judge, q.question, q.answer, answer)
            items.append(
                {
                    "dialogue": d.name,
                    "question": q.question,
                    "gold": q.answer,
                    "answer": answer,
                    "category": q.category,
                    "f1": round(token_f1(answer, q.answer), 4),
                    "judge": label,
                    "judge_raw": raw,
                    "memory": prompt.memory,
                    "latency_ms": round(latency, 1),
                }
            )
            llm.drain()
            done += 1
            if progress:
                progress(done, total, f"{d.name}: {len(items)} questions answered")
    info = {**(info or {}), "memory_update_fallbacks": fallbacks}
    return summarize(items, update_ms, memory_calls, turn_tokens, arm=arm, dataset=dataset, judge=judge, info=info)


def summarize(
    items: list[dict[str, Any]],
    update_ms: list[float],
    memory_calls: list[int],
    turn_tokens: list[int],
    *,
    arm: str,
    dataset: str,
    judge: LLM | None,
    info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_category[item["category"]].append(item)

    def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
        judged = [r["judge"] for r in rows if r["judge"] is not None]
        return {
            "n": len(rows),
            "f1": _mean([r["f1"] for r in rows]),
            "judge": _mean(judged),
            "judged": len(judged),
        }

    headline = [r for r in items if r["category"] not in EXCLUDED_FROM_HEADLINE]
    return {
        "arm": arm,
        "dataset": dataset,
        **(info or {}),
        "judge": {
            "model": getattr(judge, "model", None),
            "stand_in": judge is None,
            "prompt": "mem0 ACCURACY_PROMPT (evaluation/metrics/llm_judge.py)",
        },
        "dialogues": len({r["dialogue"] for r in items}),
        "questions": len(items),
        "overall": scores(headline),
        "all_questions": scores(items),
        "excluded_from_overall": sorted(EXCLUDED_FROM_HEADLINE & set(by_category)),
        "categories": {c: scores(rows) for c, rows in sorted(by_category.items())},
        "tokens_per_turn": {
            "mean": _mean(turn_tokens),
            "p95": percentile(turn_tokens, 0.95),
            "turns": len(turn_tokens),
        },
        "latency_ms": {
            "answer": {
                "p50": percentile([r["latency_ms"] for r in items], 0.5),
                "p95": percentile([r["latency_ms"] for r in items], 0.95),
            },
            "memory_update": {"p50": percentile(update_ms, 0.5), "p95": percentile(update_ms, 0.95)},
        },
        "memory_llm_calls_per_session": _mean(memory_calls),
        "items": items,
    }


def render_markdown(result: dict[str, Any]) -> str:
    """A short Markdown report of a result dict."""

    def fmt(x: Any) -> str:
        return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)

    judge = result["judge"]
    lines = [
        f"# {result['arm']} on {result['dataset']}",
        "",
        f"{result['dialogues']} dialogues, {result['questions']} questions. Answer model: "
        f"{result.get('model', '-')}; judge: {'stand-in (F1 >= 0.5, no model)' if judge['stand_in'] else judge['model']}"
        f"; embedder: {result.get('embedder', '-')}.",
        "",
        "| category | n | F1 | J |",
        "|---|---|---|---|",
    ]
    for name, s in result["categories"].items():
        lines.append(f"| {name} | {s['n']} | {fmt(s['f1'])} | {fmt(s['judge'])} |")
    o = result["overall"]
    excluded = ", ".join(result["excluded_from_overall"]) or "none"
    lines += [
        f"| **overall** (without {excluded}) | {o['n']} | {fmt(o['f1'])} | {fmt(o['judge'])} |",
        "",
        f"Reply prompt: {fmt(result['tokens_per_turn']['mean'])} tokens per turn (mean, ~4 characters per token; "
        f"p95 {fmt(result['tokens_per_turn']['p95'])}).",
        f"Latency: answer p50 {fmt(result['latency_ms']['answer']['p50'])} ms, p95 "
        f"{fmt(result['latency_ms']['answer']['p95'])} ms; memory update p50 "
        f"{fmt(result['latency_ms']['memory_update']['p50'])} ms, p95 {fmt(result['latency_ms']['memory_update']['p95'])} ms; "
        f"{fmt(result['memory_llm_calls_per_session'])} memory LLM calls per session.",
    ]
    return "\n".join(lines) + "\n"


def load_dataset(dataset: str, path: str | Path | None = None) -> list[EvalDialogue]:
    """``gvd`` (the copy in memory/data/gvd, or a folder holding the same files) or ``locomo`` (a path)."""
    if dataset == "gvd":
        return load_gvd(Path(path) if path else None)
    if dataset == "locomo":
        if not path:
            raise DatasetError("LoCoMo is not shipped (CC BY-NC 4.0): give the path of your locomo10.json")
        return load_locomo(Path(path))
    raise DatasetError(f"unknown dataset {dataset!r} (gvd or locomo)")


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
) -> dict[str, Any]:
    """Evaluate the registered arm ``arm`` on ``dataset``: the entry point for a CLI or a background job.

    The answer model and the arm's own calls use ``backend``/``model``; the judge uses the same
    backend with ``judge_model`` (default: ``model``); with ``backend="scripted"`` the judge is the
    F1 stand-in. ``wrap_llm``, if given, wraps the answer model and the judge before any call (a
    background job stops its calls there once it lost its lease). Raises :class:`DatasetError` for a bad
    dataset or dialogue name, ValueError for an unknown arm or parameter."""
    from memory.embed import make_embedder
    from memory.llm import make_llm
    from memory.registry import build_system

    options = {k: v for k, v in (("base_url", base_url), ("api_key", api_key)) if v}
    wrap = wrap_llm or (lambda x: x)
    llm = RecordingLLM(wrap(make_llm(backend, model, **options)))
    judge = None if backend == "scripted" else wrap(make_llm(backend, judge_model or model, **options))
    emb = make_embedder(embedder)
    system = build_system(arm, llm=llm, embedder=emb, **(params or {}))
    data = load_dataset(dataset, path)
    if dialogues:
        wanted = {x.strip() for x in dialogues}
        unknown = wanted - {d.name for d in data}
        if unknown:
            raise DatasetError(f"no dialogue named {sorted(unknown)}; known: {[d.name for d in data]}")
        data = [d for d in data if d.name in wanted]
    info = {"model": llm.model, "backend": backend, "embedder": emb.name, "params": params or {}}
    return evaluate(
        system,
        data,
        llm,
        judge=judge,
        arm=arm,
        dataset=dataset,
        max_tokens=max_tokens,
        max_sessions=max_sessions,
        max_questions=max_questions,
        progress=progress,
        info=info,
    )
