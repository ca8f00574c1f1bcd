"""``python -m memory eval ARM --dataset cards``: scripted episodes on the persona cards, probed as a study is.

For each card of the bank, a **scripted user** plays the persona through the event script
(:func:`memory.cards.plan_episode`): in each session it greets the bot (which opens every later session
from its memory, as on the platform), says the sentence of each of the session's tasks (bring up a fact,
tell what changed, ask to forget, ask a probe question) and says goodbye; the arm replies to every message
through its own ``compose`` and the answer model, and updates its memory as the platform drives it
(``after_turn`` after each reply, ``end_session`` after each session). Then:

- **in-session probes** (the script's ``probe`` tasks): the bot's reply to the probe question is scored;
- **snapshot probes**: after every session, every fact told so far is asked of the memory the session left,
  in a new session the day the next one starts (``compose`` on the stored state, the answer model at
  temperature 0), as the platform probes each session's snapshot after the session;
- each failed probe gets its **stage** (:mod:`memory.stages`) and each probe of a current or updated fact
  the **necessity control**: the same question answered by the ``none`` arm and by a closed-book prompt
  (:data:`CLOSED_BOOK_PROMPT`) on the same model; a probe either answers correctly is flagged and kept out
  of the memory gain.

The result is a JSON-serialisable dict whose ``items`` are the per-probe results (shape in
docs/memory-systems.md, "Persona cards and probes"); with a results file every probe is written as it is
scored, and a run given the same file again skips the cards it finished.
"""

from __future__ import annotations

import csv
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory.base import MemorySystem, Stored, Turn, ensure_json
from memory.cards import Bank, EpisodePlan, Probe, Script, load_bank, load_script, plan_episode, probe_of, probes_after
from memory.evaljournal import EvaluationStopped, Journal
from memory.evalreport import stand_in_warning
from memory.llm import LLM, LLMError
from memory.llmwrap import RecordingLLM, RetryingLLM, RetryPolicy
from memory.probes import PROBE_PROMPT, Score, score_answer
from memory.stages import STAGE_NAMES, Evidence, attribute, counts, trace_texts

START = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
GAP_DAYS = 7
CLOSED_BOOK_PROMPT = "You are a helpful assistant. Answer the user's question in one short sentence."
NECESSITY_NOTE = (
    "Probes that the `none` arm or a closed-book prompt answer correctly on the same model are flagged "
    "(answerable without memory) and left out of the memory gain."
)
Progress = Callable[[int, int, str], None]


# ------------------------------------------------------------------------------------------- the episode


def user_turns(plan: EpisodePlan, k: int) -> list[tuple[str, str]]:
    """The scripted user's messages in session ``k``: (text, probe slot or "") in order."""
    first = "Hi there!" if k == 1 else "Hi! Good to talk to you again."
    out = [(first, "")]
    for task in plan.sessions[k - 1].tasks:
        out.append((task.say, task.slot if task.op == "probe" else ""))
    out.append(("That's all for today. Talk soon!", ""))
    return out


def reply(system: MemorySystem, llm: LLM, state: dict[str, Any], session: list[Turn], now: datetime, *,
          max_tokens: int, purpose: str, opening: bool = False) -> tuple[str, Any]:  # fmt: skip
    """The arm's reply (its own ``Prompt.reply`` or the model's, at temperature 0) and the prompt."""
    prompt = system.compose_opening(state, now) if opening else system.compose(state, list(session), now)
    text = prompt.reply if prompt.reply is not None else llm.complete(
        prompt.as_dicts(), max_tokens=max_tokens, temperature=0.0, purpose=purpose
    ).text  # fmt: skip
    return text, prompt


def prompt_texts(prompt: Any) -> list[str]:
    """Everything a reply prompt showed the model (its messages and the memory it lists)."""
    return [m.content for m in prompt.messages] + [str(x) for x in prompt.memory]


class Necessity:
    """The memory-necessity control: each probe question of a current or updated fact answered by the
    ``none`` arm and by a closed-book prompt on the answer model (cached per question and answer)."""

    def __init__(self, llm: LLM, *, max_tokens: int, judge: LLM | None) -> None:
        from memory.registry import build_system

        self.llm, self.max_tokens, self.judge = llm, max_tokens, judge
        self.none = build_system("none", llm=llm)
        self.cache: dict[tuple[Any, ...], dict[str, Any]] = {}

    def check(self, probe: Probe, when: datetime) -> dict[str, Any] | None:
        if probe.kind == "forgotten" or probe.gold is None:
            return None  # an answer without memory trivially "forgets": the control does not apply
        key = (probe.question, probe.gold.forms, tuple(v.forms for v in probe.stale), probe.free_text)
        if key not in self.cache:
            none_answer, _ = reply(self.none, self.llm, {}, [Turn("user", probe.question, when)], when,
                                   max_tokens=self.max_tokens, purpose="necessity_none")  # fmt: skip
            closed = self.llm.complete(
                [{"role": "system", "content": CLOSED_BOOK_PROMPT}, {"role": "user", "content": probe.question}],
                max_tokens=self.max_tokens, temperature=0.0, purpose="necessity_closed_book",
            ).text  # fmt: skip
            none_ok = score_answer(probe, none_answer, judge=self.judge).recalled
            closed_ok = score_answer(probe, closed, judge=self.judge).recalled
            self.cache[key] = {
                "none_answer": none_answer,
                "none_recalled": bool(none_ok),
                "closed_book_answer": closed,
                "closed_book_recalled": bool(closed_ok),
                "flagged": bool(none_ok or closed_ok),
            }
        return dict(self.cache[key])


def probe_item(
    probe: Probe,
    answer: str,
    prompt: Any,
    stored: Sequence[Stored],
    written: Sequence[str],
    *,
    session: int,
    mode: str,
    judge: LLM | None,
    necessity: dict[str, Any] | None,
) -> dict[str, Any]:
    """One per-probe result: the probe, the answer, its scores, the stage of a failure, the control."""
    score: Score = score_answer(probe, answer, stored, judge=judge)
    found = attribute(probe, score, Evidence(list(written), list(stored), prompt_texts(prompt)))
    return {
        "id": f"{probe.card}:{probe.slot}:s{session}:{mode}",
        "session": session,
        "mode": mode,
        **probe.as_dict(),
        "answer": answer,
        **score.as_dict(),
        "stage": found.stage,
        "stage_why": found.why,
        "memory": [str(x) for x in prompt.memory],
        "necessity": necessity,
        "answerable_without_memory": bool(necessity and necessity["flagged"]),
    }


def run_card(
    system: MemorySystem,
    llm: LLM,
    plan: EpisodePlan,
    *,
    judge: LLM | None,
    necessity: Necessity,
    max_tokens: int,
    max_sessions: int | None = None,
    on_item: Callable[[dict[str, Any]], None] | None = None,
    on_session: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Play one card's episode through the arm; returns its per-probe results (in-session and snapshot)."""
    items: list[dict[str, Any]] = []
    state = ensure_json(system.initial_state())
    written: dict[int, list[str]] = {}  # what the arm wrote by session: stored texts after it and its update trace
    sessions = plan.sessions[:max_sessions]
    for sp in sessions:
        k = sp.index
        start = START + timedelta(days=GAP_DAYS * (k - 1))
        session: list[Turn] = []
        at = start
        if k > 1:  # the bot opens later sessions from its memory
            text, _ = reply(system, llm, state, session, at, max_tokens=max_tokens, purpose="opener", opening=True)
            session.append(Turn("bot", text, at))
        for n, (message, probe_slot) in enumerate(user_turns(plan, k)):
            at = start + timedelta(minutes=2 * n + 1)
            session.append(Turn("user", message, at))
            answer, prompt = reply(system, llm, state, session, at, max_tokens=max_tokens, purpose="reply")
            if probe_slot:
                probe = probe_of(plan, k - 1, probe_slot) if k > 1 else None
                if probe is not None:
                    before = [t for j in range(probe.told, k) for t in written.get(j, [])]
                    stored = system.stored(state)
                    item = probe_item(probe, answer, prompt, stored, before + [s.text for s in stored],
                                      session=k, mode="inline", judge=judge,
                                      necessity=necessity.check(probe, at))  # fmt: skip
                    items.append(item)
                    if on_item:
                        on_item(item)
            session.append(Turn("bot", answer, at + timedelta(seconds=30)))
            state = ensure_json(system.after_turn(state, list(session), at + timedelta(seconds=30)).state)
        update = system.end_session(state, list(session), at + timedelta(minutes=1))
        state = ensure_json(update.state)
        stored = system.stored(state)
        written[k] = [s.text for s in stored] + trace_texts(update.trace)
        when = START + timedelta(days=GAP_DAYS * k)  # the day the next session starts
        for probe in probes_after(plan, k):
            answer, prompt = reply(system, llm, state, [Turn("user", probe.question, when)], when,
                                   max_tokens=max_tokens, purpose="probe")  # fmt: skip
            history = [t for j in range(probe.told, k + 1) for t in written.get(j, [])]
            item = probe_item(probe, answer, prompt, stored, history, session=k, mode="snapshot", judge=judge,
                              necessity=necessity.check(probe, when))  # fmt: skip
            items.append(item)
            if on_item:
                on_item(item)
        if on_session:
            on_session(k)
    return items


# ------------------------------------------------------------------------------------------- summaries


def _rate(values: Sequence[bool | None]) -> float | None:
    vs = [bool(v) for v in values if v is not None]
    return round(sum(vs) / len(vs), 4) if vs else None


def summarize_probes(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Recall of current facts (all, and only those that need memory: the memory gain), the stale-fact
    rate, deletion honoured (in the reply, in the stores, both), dependent facts consistent, stages."""
    facts = [r for r in items if r["kind"] in ("current", "updated")]
    needed = [r for r in facts if not r.get("answerable_without_memory")]
    updated = [r for r in items if r["kind"] == "updated"]
    forgotten = [r for r in items if r["kind"] == "forgotten"]
    dependent = [r for r in items if r.get("dependent")]
    return {
        "n": len(items),
        "recall": _rate([r["recalled"] for r in facts]),
        "n_facts": len(facts),
        "memory_gain": _rate([r["recalled"] for r in needed]),
        "n_needing_memory": len(needed),
        "answerable_without_memory": len(facts) - len(needed),
        "stale_rate": _rate([r["stale"] for r in updated]),
        "n_updated": len(updated),
        "deletion_honoured": _rate([r["deletion_honoured"] for r in forgotten]),
        "deleted_in_reply": _rate([r["deleted_in_reply"] for r in forgotten]),
        "deleted_in_stores": _rate([bool(r["deleted_in_stores"]) for r in forgotten]),
        "n_forgotten": len(forgotten),
        "dependent_consistent": _rate([r["correct"] for r in dependent]),
        "n_dependent": len(dependent),
        "correct": _rate([r["correct"] for r in items]),
        "stages": counts(r["stage"] for r in items),
        "judged": sum(1 for r in items if r.get("scored_by") == "judge"),
    }


def summarize(items: Sequence[dict[str, Any]], *, info: dict[str, Any]) -> dict[str, Any]:
    snapshot = [r for r in items if r["mode"] == "snapshot"]
    inline = [r for r in items if r["mode"] == "inline"]
    sessions = sorted({r["session"] for r in snapshot})
    flagged = sorted({f"{r['card']}:{r['slot']}" for r in items if r.get("answerable_without_memory")})
    return {
        **info,
        "cards": len({r["card"] for r in items}),
        "probes": len(items),
        "overall": summarize_probes(snapshot),
        "by_session": [
            {"session": k, **summarize_probes([r for r in snapshot if r["session"] == k])} for k in sessions
        ],
        "by_kind": {
            kind: summarize_probes([r for r in snapshot if r["kind"] == kind])
            for kind in ("current", "updated", "forgotten")
        },
        "inline": summarize_probes(inline),
        "stages": {
            "names": STAGE_NAMES,
            "snapshot": counts(r["stage"] for r in snapshot),
            "inline": counts(r["stage"] for r in inline),
        },  # fmt: skip
        "necessity": {
            "note": NECESSITY_NOTE,
            "closed_book_prompt": CLOSED_BOOK_PROMPT,
            "checked": sum(1 for r in items if r.get("necessity") is not None),
            "flagged": flagged,
        },
        "items": list(items),
    }


def render_markdown(result: dict[str, Any]) -> str:
    """The cards run as a short Markdown report (warnings first)."""

    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [f"**Warning: {w}**" for w in result.get("warnings", [])]
    if lines:
        lines.append("")
    bank = result["bank"]
    judge = result["judge"]
    lines += [
        f"# {result['arm']} on the persona cards",
        "",
        f"Bank: {bank['name']} (version {bank['version']}, {bank['cards']} cards, sha256 {bank['sha256'][:16]}…): "
        f"{bank['provenance']}",
        f"{result['cards']} cards, {result['script']['sessions']} sessions each, {result['probes']} probes. "
        f"Answer model: {result.get('model', '-')}; embedder: {result.get('embedder', '-')}; free-text facts: "
        + (
            "matched (no judge model)"
            if judge["stand_in"]
            else f"judged by {judge['model']} ({judge['prompt']}, sha256 {judge.get('prompt_sha256', '')[:12]})"
        )
        + f". Probe scores from the judge: {sum(1 for r in result.get('items', []) if r.get('scored_by') == 'judge')} "
        f"of {result['probes']} (the others: exact or alias match of the card's values).",
        NECESSITY_NOTE + f" Flagged: {', '.join(result['necessity']['flagged']) or 'none'}.",
        "",
        "Snapshot probes (every fact told so far, asked of the memory each session left):",
        "",
        "| after session | probes | recall | memory gain | stale | deletion honoured | dependent consistent |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in [*result["by_session"], {"session": "**all**", **result["overall"]}]:
        lines.append(
            f"| {row['session']} | {row['n']} | {pct(row['recall'])} | {pct(row['memory_gain'])} | "
            f"{pct(row['stale_rate'])} | {pct(row['deletion_honoured'])} | {pct(row['dependent_consistent'])} |"
        )
    inline = result["inline"]
    lines += [
        "",
        f"In-session probes: {inline['n']}, recall {pct(inline['recall'])}, deletion honoured "
        f"{pct(inline['deletion_honoured'])}.",
        "",
        "| failed at | snapshot | in-session |",
        "|---|---|---|",
    ]
    for stage, name in result["stages"]["names"].items():
        lines.append(f"| {name} | {result['stages']['snapshot'][stage]} | {result['stages']['inline'][stage]} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- the run


def run(
    arm: str,
    path: str | Path | Bank | None = None,
    *,
    script: str | Path | Script | None = None,
    backend: str = "scripted",
    model: str = "",
    judge_model: str = "",
    base_url: str = "",
    api_key: str = "",
    embedder: str = "wordllama",
    params: dict[str, Any] | None = None,
    cards: Sequence[str] = (),
    max_cards: int | None = None,
    max_sessions: int | None = None,
    max_tokens: int = 64,
    progress: Progress | None = None,
    wrap_llm: Callable[[LLM], LLM] | None = None,
    journal: Journal | None = None,
    retry: RetryPolicy | None = None,
    on_retry: Callable[[int, float, Exception], None] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run the registered arm ``arm`` over the card bank at ``path`` (default: the one that ships; or a
    :class:`~memory.cards.Bank` already loaded, e.g. a study's) with the event ``script`` (default:
    ``memory/data/cards/script.json``). Arguments as
    :func:`memory.evaluation.run`; ``cards`` picks cards by id, ``max_cards`` the first N. Raises
    :class:`memory.cards.CardError` (a :class:`ValueError`) for a bad bank or script or an unknown card,
    :class:`memory.evaluation.EvaluationStopped` when an LLM error stops the run."""
    from memory.embed import make_embedder
    from memory.llm import make_llm
    from memory.registry import build_system

    bank: Bank = path if isinstance(path, Bank) else load_bank(path)
    the_script = script if isinstance(script, Script) else load_script(script)
    chosen = [bank.card(c.strip()) for c in cards] if cards else list(bank.cards)
    chosen = chosen[:max_cards] if max_cards else chosen
    plans = [plan_episode(bank, card, the_script) for card in chosen]

    options: dict[str, Any] = {k: v for k, v in (("base_url", base_url), ("api_key", api_key)) if v}
    if timeout:
        options["timeout"] = timeout
    wrap = wrap_llm or (lambda x: x)
    policy = retry or RetryPolicy()
    base = RetryingLLM(wrap(make_llm(backend, model, **options)), policy=policy, on_retry=on_retry)
    llm = RecordingLLM(base)
    judge = (
        None
        if backend == "scripted"
        else RetryingLLM(wrap(make_llm(backend, judge_model or model, **options)), policy=policy, on_retry=on_retry)
    )
    emb = make_embedder(embedder)
    system = build_system(arm, llm=llm, embedder=emb, **(params or {}))
    necessity = Necessity(llm, max_tokens=max_tokens, judge=judge)

    settings = {
        "arm": arm, "dataset": "cards", "dataset_sha256": [bank.sha256], "script": the_script.as_dict(),
        "backend": backend, "model": llm.model, "judge_model": judge_model or model, "embedder": emb.name,
        "params": params or {}, "dialogues": [p.card.id for p in plans], "max_sessions": max_sessions,
        "max_tokens": max_tokens,
    }  # fmt: skip
    journal = journal if journal is not None else Journal()
    journal.start(settings)
    finished = {r["dialogue"] for r in journal.records if r.get("kind") == "card"}
    n_sessions = min(max_sessions or the_script.sessions, the_script.sessions)
    total = len(plans) * n_sessions
    done = 0
    began = time.perf_counter()
    try:
        for plan in plans:
            cid = plan.card.id
            if cid in finished:
                done += n_sessions
                if progress:
                    progress(done, total, f"card {cid}: done in an earlier run")
                continue

            def on_item(item: dict[str, Any], cid: str = cid) -> None:
                journal.add({"kind": "probe", "dialogue": cid, "item": item})

            def on_session(k: int, cid: str = cid) -> None:
                nonlocal done
                done += 1
                if progress:
                    progress(done, total, f"card {cid}: session {k} played and probed")

            run_card(system, llm, plan, judge=judge, necessity=necessity, max_tokens=max_tokens,
                     max_sessions=max_sessions, on_item=on_item, on_session=on_session)  # fmt: skip
            journal.add({"kind": "card", "dialogue": cid, "calls": _call_counts(llm.drain())})
    except (LLMError, KeyboardInterrupt) as exc:
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        raise EvaluationStopped(f"stopped after {done} of {total} sessions: {why}", journal=journal, done=done,
                                total=total) from exc  # fmt: skip
    wanted = {p.card.id for p in plans}
    latest: dict[str, dict[str, Any]] = {}  # a card restarted after a stop wrote some probes twice: the last wins
    for r in journal.records:
        if r.get("kind") == "probe" and r["dialogue"] in wanted:
            latest[r["item"]["id"]] = r["item"]
    items = list(latest.values())
    calls: dict[str, int] = defaultdict(int)
    for r in journal.records:
        if r.get("kind") == "card":
            for purpose, n in r.get("calls", {}).items():
                calls[purpose] += n
    stand_in = (
        "Stand-in model (scripted: it echoes the message it answers, and free-text facts are matched, not judged): "
        "these scores measure nothing about the arm."
        if backend == "scripted"
        else stand_in_warning(backend, llm.model)
    )
    info = {
        "arm": arm,
        "dataset": "cards",
        "warnings": [w for w in (stand_in,) if w],
        "stand_in_model": stand_in is not None,
        "model": llm.model,
        "backend": backend,
        "embedder": emb.name,
        "params": params or {},
        "bank": bank.describe(),
        "script": the_script.as_dict(),
        "judge": {
            "model": getattr(judge, "model", None),
            "stand_in": judge is None,
            "prompt": PROBE_PROMPT.name,
            "prompt_sha256": PROBE_PROMPT.sha256,
            "rubric": PROBE_PROMPT.text.strip(),
            "unparsed": sum(1 for r in items if r.get("judge_parsed") is False),
        },
        "llm_calls": dict(sorted(calls.items())),
        "seconds": round(time.perf_counter() - began, 1),
    }
    return summarize(items, info=info)


def _call_counts(calls: Sequence[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for c in calls:
        out[c.get("purpose") or "-"] += 1
    return dict(out)


#: The columns of a per-probe table (CSV): the probe, the answer and every score, flat.
PROBE_COLUMNS = [
    "id", "card", "session", "mode", "slot", "label", "question", "kind", "gold", "stale_values", "deleted_values",
    "told", "free_text", "dependent", "answer", "correct", "recalled", "stale", "stale_mentioned",
    "deleted_in_reply", "deleted_in_stores", "deletion_honoured", "scored_by", "match", "judge_parsed", "judge_model",
    "judge_prompt", "judge_prompt_sha256", "stage", "stage_why",
    "answerable_without_memory", "none_answer", "none_recalled", "closed_book_answer", "closed_book_recalled",
]  # fmt: skip


def flat_item(item: dict[str, Any]) -> dict[str, Any]:
    """One per-probe result as a flat row of :data:`PROBE_COLUMNS` (lists joined with " | ")."""
    nec = item.get("necessity") or {}

    def values(vs: Any) -> str:
        return " | ".join(v["value"] for v in vs or [])

    row = {k: item.get(k) for k in PROBE_COLUMNS}
    row.update(
        gold=(item.get("gold") or {}).get("value", ""),
        stale_values=values(item.get("stale_values")),
        deleted_values=values(item.get("deleted_values")),
        deleted_in_stores=" | ".join(item.get("deleted_in_stores") or []),
        none_answer=nec.get("none_answer"),
        none_recalled=nec.get("none_recalled"),
        closed_book_answer=nec.get("closed_book_answer"),
        closed_book_recalled=nec.get("closed_book_recalled"),
    )
    return row


def write_probes(result: dict[str, Any], path: Path) -> None:
    """The per-probe results of a run: JSON lines (``.jsonl``: every field) or CSV (:data:`PROBE_COLUMNS`)."""
    items = result.get("items", [])
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=PROBE_COLUMNS)
            writer.writeheader()
            for item in items:
                writer.writerow(flat_item(item))
        return
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
