"""Command line: ``python -m memory arms``, ``python -m memory replay``, ``python -m memory preflight`` and
``python -m memory eval``.

``eval`` scores an arm on GVD or LoCoMo (see :mod:`memory.evaluation`).

``arms`` lists the registered arms with their parameters, defaults and sources.

``preflight ARM`` runs the arm's readiness checks (``memory.preflight``) with a backend and model and
prints them (``--format text``) or their JSON (``--format json``); it exits 0 when the arm is ready,
3 when it is not, 2 on bad input. It stops once the verdict is settled (``--full`` runs every item);
the JSON records every setting that changes what the verdict means (``settings``, ``coverage``).

``replay`` runs an arm over a multi-session dialogue file the way the platform would (compose → reply →
after_turn per user message, end_session after each session, simulated time from the file), then
asks the probing questions, and prints (or writes as JSONL) the memory after each session and the
replies to the probes. Two input formats:

- the MemoryBank evaluation set (``memory_bank_en.json``: ``{user: {history: {date: [{query, response}]}}}``),
  one session per date; its probing questions are read from ``probing_questions_en.jsonl`` next to it
  (or ``--probes``);
- JSONL, one object per line: a session ``{"dialogue": "d1", "date": "2026-03-01T18:00:00", "turns":
  [{"speaker": "user", "text": "..."}, {"speaker": "bot", "text": "..."}]}`` or a probe
  ``{"dialogue": "d1", "probe": "What is my dog's name?"}`` (optional "date").

Recorded bot turns are kept as they are (as in LD-Agent's and MemoryBank's evaluations); a user turn
with no bot turn after it gets a reply generated from the arm's prompt.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from memory.base import Turn, ensure_json
from memory.embed import make_embedder
from memory.evaluation import replay_session
from memory.llm import LLM, REPLY_TEMPERATURE, make_llm
from memory.llmwrap import RecordingLLM
from memory.registry import MEMORY_SYSTEMS, build_system


@dataclass
class Dialogue:
    name: str
    sessions: list[tuple[datetime, list[dict[str, str]]]] = field(default_factory=list)
    probes: list[tuple[datetime | None, str]] = field(default_factory=list)


def _when(text: str) -> datetime:
    dt = datetime.fromisoformat(text)
    if len(text) <= 10:  # a bare date: the session starts in the evening
        dt = dt.replace(hour=18)
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def load_memorybank(path: Path, probes: Path | None) -> list[Dialogue]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if probes is None:
        guess = path.with_name(path.name.replace("memory_bank_", "probing_questions_").replace(".json", ".jsonl"))
        probes = guess if guess.exists() else None
    questions: dict[str, list[str]] = {}
    if probes is not None:
        for line in probes.read_text(encoding="utf-8").splitlines():
            if line.strip():
                questions.update(json.loads(line))
    questions = {user.strip(): qs for user, qs in questions.items()}
    out = []
    for key, record in data.items():
        user = key.strip()  # four GVD user keys carry surrounding spaces (" Jason ", " Linda", ...)
        d = Dialogue(user)
        for day, pairs in sorted(record.get("history", {}).items()):
            turns: list[dict[str, str]] = []
            for pair in pairs:
                q, r = (pair["query"], pair["response"]) if isinstance(pair, dict) else pair
                turns += [{"speaker": "user", "text": q}, {"speaker": "bot", "text": r}]
            d.sessions.append((_when(day), turns))
        d.probes = [(None, q) for q in questions.get(user, [])]
        out.append(d)
    return out


def load_jsonl(path: Path) -> list[Dialogue]:
    dialogues: dict[str, Dialogue] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        d = dialogues.setdefault(str(obj.get("dialogue", "dialogue")), Dialogue(str(obj.get("dialogue", "dialogue"))))
        if "probe" in obj:
            d.probes.append((_when(obj["date"]) if obj.get("date") else None, str(obj["probe"])))
        elif "turns" in obj:
            turns = [
                {"speaker": "bot" if t["speaker"] in ("bot", "assistant", "system") else "user", "text": t["text"]}
                for t in obj["turns"]
            ]
            d.sessions.append((_when(obj["date"]), turns))
        else:
            raise ValueError(f"{path}:{n}: a line needs 'turns' (a session) or 'probe' (a question)")
    return list(dialogues.values())


def load(path: Path, probes: Path | None = None) -> list[Dialogue]:
    if path.suffix == ".jsonl":
        return load_jsonl(path)
    return load_memorybank(path, probes)


def replay_dialogue(
    d: Dialogue, system: Any, llm: LLM, *, max_tokens: int, max_sessions: int | None = None
) -> Iterator[dict[str, Any]]:
    """Yield one record per session (state and trace after it) and one per probe (reply, memory used)."""
    state = ensure_json(system.initial_state())
    last = None
    for k, (start, turns) in enumerate(d.sessions[:max_sessions], 1):
        state, session, at = replay_session(system, llm, state, start, turns, max_tokens=max_tokens)
        update = system.end_session(state, list(session), at + timedelta(minutes=1))
        state = ensure_json(update.state)
        last = at
        yield {"dialogue": d.name, "session": k, "date": start.isoformat(), "state": state, "trace": update.trace}
    probe_day = (last or datetime.now(UTC)) + timedelta(days=1)
    for date, question in d.probes:
        when = date or probe_day
        prompt = system.compose(state, [Turn("user", question, when)], when)
        reply = llm.complete(prompt.as_dicts(), max_tokens=max_tokens, temperature=0.0, purpose="probe").text
        yield {"dialogue": d.name, "probe": question, "date": when.isoformat(), "reply": reply, "memory": prompt.memory}


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cmd_arms(args: argparse.Namespace, out: TextIO) -> int:
    if args.json:
        json.dump(
            {
                k: {
                    "label": c.label,
                    "source": c.source,
                    "is_qc": c.is_qc,
                    "params": {n: p.as_dict() for n, p in c.params.items()},
                }
                for k, c in MEMORY_SYSTEMS.items()
            },
            out,
            indent=2,
        )
        out.write("\n")
        return 0
    for name, cls in MEMORY_SYSTEMS.items():
        out.write(f"{name}  ({cls.label}){'  [quality control]' if cls.is_qc else ''}\n    source: {cls.source}\n")
        for pname, p in cls.params.items():
            out.write(f"    {pname} = {p.default!r}: {p.help}" + (f" [{p.source}]" if p.source else "") + "\n")
        if not cls.params:
            out.write("    (no parameters)\n")
    return 0


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    params = {}
    for item in args.param or []:
        key, _, value = item.partition("=")
        params[key] = _value(value)
    llm = RecordingLLM(make_llm(args.backend, args.model or "", **_llm_options(args)))
    system = build_system(args.arm, llm=llm, embedder=make_embedder(args.embedder), **params)
    dialogues = load(Path(args.file), Path(args.probes) if args.probes else None)
    if args.dialogue:
        wanted = {x.strip() for x in args.dialogue}
        dialogues = [d for d in dialogues if d.name in wanted]
        if not dialogues:
            print(f"no dialogue named {args.dialogue}", file=sys.stderr)
            return 2
    sink = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115
    try:
        for d in dialogues:
            for record in replay_dialogue(d, system, llm, max_tokens=args.max_tokens, max_sessions=args.max_sessions):
                record["llm_calls"] = len(llm.drain())
                if sink:
                    sink.write(json.dumps(record, ensure_ascii=False) + "\n")
                elif "session" in record:
                    out.write(
                        f"=== {d.name} session {record['session']} ({record['date'][:10]}): memory after the session\n"
                    )
                    out.write(json.dumps(record["state"], ensure_ascii=False, indent=1)[: args.width] + "\n")
                    if record["trace"].get("fallbacks"):
                        out.write(f"    fallbacks: {len(record['trace']['fallbacks'])}\n")
                else:
                    out.write(
                        f"--- {d.name} probe: {record['probe']}\n    memory used: {record['memory']}\n    reply: {record['reply']}\n"
                    )
    finally:
        if sink:
            sink.close()
    if args.out:
        out.write(f"wrote {args.out}\n")
    return 0


def _llm_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL", "")
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY", "")
    if base_url:
        options["base_url"] = base_url
    if api_key:
        options["api_key"] = api_key
    if getattr(args, "timeout", None):
        options["timeout"] = args.timeout
    if getattr(args, "threads", None):
        options["n_threads"] = args.threads
    return options


def cmd_preflight(args: argparse.Namespace, out: TextIO) -> int:
    from memory.llm import LLMError
    from memory.preflight import preflight, render_text

    params = {}
    for item in args.param or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"--param needs KEY=VALUE, not {item!r}", file=sys.stderr)
            return 2
        params[key] = _value(value)
    try:
        llm = make_llm(args.backend, args.model or "", **_llm_options(args))
        embedder = make_embedder(args.embedder)
    except LLMError as exc:
        print(f"cannot build the LLM: {exc}", file=sys.stderr)
        return 2

    memory_log = logging.getLogger("memory")
    level = memory_log.level
    if not args.verbose:  # the arms log every fallback; the report already says what went wrong
        memory_log.setLevel(logging.ERROR)

    def progress(done: int, total: int, label: str) -> None:
        if args.progress:
            print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    try:
        result = preflight(
            args.arm,
            llm,
            embedder=embedder,
            params=params,
            backend=args.backend,
            progress=progress,
            reply_max_tokens=args.reply_max_tokens,
            max_probes=args.max_probes,
            reply_temperature=args.temperature,
            sequential=not args.full,
        )
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    finally:  # main() is also called in-process (tests): leave the logger as it was
        memory_log.setLevel(level)
    if args.format == "json":
        json.dump(result.as_dict(), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render_text(result))
    return 0 if result.ready else 3


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from memory.evaluation import DatasetError, EvaluationStopped, Journal, render_markdown, run
    from memory.llmwrap import RetryPolicy

    if args.dataset != "cards" and (args.script or args.max_cards or args.probes_out):
        print("error: --script, --max-cards and --probes-out are for --dataset cards", file=sys.stderr)
        return 2
    if args.resume and not args.results:
        print("error: --resume needs --results FILE (the file of the run to resume)", file=sys.stderr)
        return 2
    memory_log = logging.getLogger("memory")
    level = memory_log.level
    if not args.verbose:  # fallbacks are counted in the report; one log line each would drown it
        memory_log.setLevel(logging.ERROR)

    params = {}
    for item in args.param or []:
        key, _, value = item.partition("=")
        params[key] = _value(value)

    def progress(done: int, total: int, message: str) -> None:
        if not args.quiet:
            print(f"[{done}/{total}] {message}", file=sys.stderr)

    def on_retry(attempt: int, wait: float, error: Exception) -> None:
        print(f"LLM call failed ({error}); retry {attempt} in {wait:.1f} s", file=sys.stderr)

    journal = None
    try:
        if args.results:
            path = Path(args.results)
            if path.exists() and path.stat().st_size and not args.resume:
                print(
                    f"error: {path} exists: add --resume to continue that run, or choose another file", file=sys.stderr
                )
                return 2
            journal = Journal.load(path) if args.resume and path.exists() else Journal(path)
        result = run(
            args.arm,
            args.dataset,
            args.path or None,
            backend=args.backend,
            model=args.model,
            judge_model=args.judge_model,
            base_url=args.base_url or os.environ.get("OPENAI_BASE_URL", ""),
            api_key=args.api_key or os.environ.get("OPENAI_API_KEY", ""),
            embedder=args.embedder,
            params=params,
            dialogues=args.dialogue or (),
            max_sessions=args.max_sessions,
            max_questions=args.max_questions,
            max_tokens=args.max_tokens,
            progress=progress,
            f1=args.f1,
            category_map=args.category_map,
            exclude_gold=args.exclude_gold or (),
            journal=journal,
            retry=RetryPolicy(budget=args.retry_budget),
            on_retry=on_retry,
            timeout=args.timeout,
            script=args.script or None,
            max_cards=args.max_cards,
            rejudge=args.rejudge,
            second_judge_model=args.second_judge_model,
        )
    except EvaluationStopped as exc:
        kept = exc.journal.path
        if kept is None:  # no --results: keep the finished work next to where the report would go
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
            kept = (
                Path(args.out).with_name(f"{Path(args.out).name}.partial.jsonl")
                if args.out
                else Path(f"eval-{args.arm}-{args.dataset}-{stamp}.partial.jsonl")
            )
            exc.journal.save(kept)
        print(
            f"error: {exc}\nThe {exc.done} finished steps (of {exc.total}) are kept in {kept}; run the same command "
            f"with --results {kept} --resume to continue.",
            file=sys.stderr,
        )
        return 3
    except (DatasetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:  # main() is also called in-process (tests, notebooks): leave the logger as it was
        memory_log.setLevel(level)
    for warning in result.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    if args.dataset == "cards":
        from memory.cardeval import render_markdown as render_cards

        text = (
            json.dumps(result, ensure_ascii=False, indent=1) + "\n" if args.format == "json" else render_cards(result)
        )
    else:
        text = (
            json.dumps(result, ensure_ascii=False, indent=1) + "\n"
            if args.format == "json"
            else render_markdown(result)
        )
    if args.probes_out:
        from memory.cardeval import write_probes

        write_probes(result, Path(args.probes_out))
        print(f"wrote {len(result.get('items', []))} per-probe results to {args.probes_out}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        out.write(f"wrote {args.out}\n")
    else:
        out.write(text)
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="python -m memory", description="memeval's memory systems")
    sub = parser.add_subparsers(dest="command", required=True)
    arms = sub.add_parser("arms", help="list the registered arms with their parameters")
    arms.add_argument("--json", action="store_true")
    rp = sub.add_parser("replay", help="replay a multi-session dialogue file through an arm")
    rp.add_argument("file", help="memory_bank_*.json (MemoryBank evaluation set) or a .jsonl dialogue file")
    rp.add_argument("--arm", required=True, choices=sorted(MEMORY_SYSTEMS))
    rp.add_argument("--param", action="append", metavar="KEY=VALUE", help="arm parameter (JSON value), repeatable")
    rp.add_argument("--backend", default="local", choices=["local", "openai", "scripted"])
    rp.add_argument("--model", default="")
    rp.add_argument("--base-url", default="", help="OpenAI-compatible endpoint (default: OPENAI_BASE_URL)")
    rp.add_argument("--api-key", default="", help="API key (default: OPENAI_API_KEY from the environment)")
    rp.add_argument("--embedder", default="wordllama", choices=["wordllama", "hashing", "openai", "minilm"])
    rp.add_argument("--probes", default="", help="probing questions JSONL (default: next to a MemoryBank file)")
    rp.add_argument("--dialogue", action="append", help="only this dialogue / MemoryBank user (repeatable)")
    rp.add_argument("--max-sessions", type=int, default=None)
    rp.add_argument("--max-tokens", type=int, default=64, help="reply length in tokens")
    rp.add_argument("--out", default="", help="write JSONL records here instead of printing")
    rp.add_argument("--width", type=int, default=4000, help="characters of each printed state")
    pf = sub.add_parser("preflight", help="can this arm's model do the arm's LLM tasks? (exit 0 ready, 3 not)")
    pf.add_argument("arm", choices=sorted(MEMORY_SYSTEMS))
    pf.add_argument("--backend", default="local", choices=["local", "openai", "scripted"])
    pf.add_argument("--model", default="")
    pf.add_argument("--base-url", default="", help="OpenAI-compatible endpoint (default: OPENAI_BASE_URL)")
    pf.add_argument("--api-key", default="", help="API key (default: OPENAI_API_KEY from the environment)")
    pf.add_argument("--timeout", type=float, default=60.0, help="per-call timeout in seconds (openai backend)")
    pf.add_argument("--threads", type=int, default=2, help="CPU threads of the local model (1 on a busy machine)")
    pf.add_argument("--embedder", default="wordllama", choices=["wordllama", "hashing", "openai", "minilm"])
    pf.add_argument("--param", action="append", metavar="KEY=VALUE", help="arm parameter (JSON value), repeatable")
    pf.add_argument("--format", default="text", choices=["text", "json"])
    pf.add_argument("--reply-max-tokens", type=int, default=120, help="token cap of a bot reply (LLM_MAX_TOKENS)")
    pf.add_argument(
        "--max-probes", type=int, default=None, help="ask only the first N probing questions (a partial check)"
    )
    pf.add_argument(
        "--temperature", type=float, default=REPLY_TEMPERATURE, help="temperature of the replies (the study's)"
    )
    pf.add_argument("--full", action="store_true", help="run every item (no stopping once the verdict is settled)")
    pf.add_argument("--progress", action="store_true", help="print progress to stderr")
    pf.add_argument("--verbose", action="store_true", help="log every fallback of the arm to stderr")
    ev = sub.add_parser(
        "eval", help="score an arm on GVD or LoCoMo (token F1, LLM judge, tokens, latency), or on the persona cards"
    )
    ev.add_argument("arm", choices=sorted(MEMORY_SYSTEMS))
    ev.add_argument("--dataset", required=True, choices=["gvd", "locomo", "cards"])
    ev.add_argument(
        "path", nargs="?", default="", help="LoCoMo JSON file (required), a GVD folder or a card bank (optional)"
    )
    ev.add_argument("--script", default="", help="cards: the event script (default memory/data/cards/script.json)")
    ev.add_argument("--max-cards", type=int, default=None, help="cards: only the first N cards of the bank")
    ev.add_argument(
        "--probes-out", default="", metavar="FILE", help="cards: write the per-probe results (.jsonl or .csv)"
    )
    ev.add_argument("--backend", default="local", choices=["local", "openai", "scripted"])
    ev.add_argument("--model", default="")
    ev.add_argument("--judge-model", default="", help="judge model on the same backend (default: --model)")
    ev.add_argument(
        "--rejudge",
        default="",
        metavar="RUBRIC[,RUBRIC]",
        help="re-judge every answer under these rubrics too (standard, lenient, strict); the report shows the range "
        "per category and each judge's false-acceptance rate on the leniency control set (gvd, locomo)",
    )
    ev.add_argument(
        "--second-judge-model",
        default="",
        metavar="MODEL",
        help="re-judge every answer with this model too (same backend; the run's prompt and each --rejudge rubric)",
    )
    ev.add_argument("--base-url", default="", help="OpenAI-compatible endpoint (default: OPENAI_BASE_URL)")
    ev.add_argument("--api-key", default="", help="API key (default: OPENAI_API_KEY from the environment)")
    ev.add_argument("--embedder", default="wordllama", choices=["wordllama", "hashing", "openai", "minilm"])
    ev.add_argument("--param", action="append", metavar="KEY=VALUE", help="arm parameter (JSON value), repeatable")
    ev.add_argument("--dialogue", action="append", help="only this dialogue / GVD user / card id (repeatable)")
    ev.add_argument("--max-sessions", type=int, default=None)
    ev.add_argument("--max-questions", type=int, default=None, help="questions per dialogue")
    ev.add_argument("--max-tokens", type=int, default=64, help="answer length in tokens")
    ev.add_argument("--format", default="md", choices=["md", "json"])
    ev.add_argument("--out", default="", help="write the report here instead of printing it")
    ev.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ev.add_argument("--verbose", action="store_true", help="log every memory fallback on stderr")
    ev.add_argument(
        "--f1", default="", choices=["locomo", "set"], help="headline F1 (default: locomo for LoCoMo, set for GVD)"
    )
    ev.add_argument(
        "--category-map", default="locomo", choices=["locomo", "mem0"], help="LoCoMo category numbers to names"
    )
    ev.add_argument(
        "--exclude-gold", action="append", metavar="FILE", help="ids of known-wrong gold answers (repeatable)"
    )
    ev.add_argument("--results", default="", metavar="FILE", help="write every finished session and question here")
    ev.add_argument("--resume", action="store_true", help="continue the run kept in --results FILE")
    ev.add_argument("--timeout", type=float, default=60.0, help="per-call timeout in seconds (openai backend)")
    ev.add_argument("--retry-budget", type=float, default=600.0, help="seconds one LLM call may keep retrying")
    # The documented form `eval ARM --dataset locomo PATH` puts the path after an option; argparse leaves a
    # positional there unparsed, so the eval command takes one leftover non-option argument as its path.
    args, extra = parser.parse_known_args(argv)
    if args.command == "eval" and len(extra) == 1 and not extra[0].startswith("-") and not args.path:
        args.path = extra[0]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "arms":
        return cmd_arms(args, out)
    if args.command == "preflight":
        return cmd_preflight(args, out)
    if args.command == "eval":
        return cmd_eval(args, out)
    return cmd_replay(args, out)


if __name__ == "__main__":
    raise SystemExit(main())
