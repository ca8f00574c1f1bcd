"""Arm readiness: run an arm's own LLM tasks on labelled calibration data and say whether the model
behind it can do them, before a study opens.

``preflight(arm, llm, embedder=...)`` returns a :class:`Readiness` with two verdicts:

- the **memory mechanism**: the arm's own LLM tasks (each arm declares them in its module,
  ``BaseSystem.readiness_tasks``) and whether its memory puts a probe's labelled answer into the reply
  prompt (14 probing questions of the MemoryBank evaluation set, each asked after replaying the two
  days of dialogue that hold the answer through the arm);
- the **reply model**: whether the model that writes the bot's replies uses what the memory shows it,
  keeps the prompt to itself, ends its sentences within the token cap, answers in time and opens a
  session from the memory, at the temperature the study replies at.

``ready`` is true when both are. Each :class:`~memory.readiness.core.Check` has a score, a threshold,
``passed``, a one-sentence ``why`` and a few ``examples`` (the failures first).

The run stops as soon as the verdict is settled (``sequential=True``, the default): the mechanism's
items run first and, if it is settled not ready, the reply model is not asked; each check is settled
when no item left can change it or an exact binomial bound puts its pass rate on one side of the
threshold (:mod:`memory.readiness.sequential`). ``sequential=False`` runs every item (``--full``).
An arm without LLM tasks of its own has a mechanism that needs no model: it is checked in full at once.

``python -m memory preflight ARM`` is the command line; the platform runs the same function as a
background job (``progress(done, total, label)`` is called after every calibration item, the label
ending with an estimate of the time left).

No expected answer can be read off the prompt: the operation pairs are not in the operation prompt, a
summary must keep facts without copying the dialogue, a probe's answer word is not in its question,
and a reply that copies or recites its prompt counts as wrong. A model that echoes its prompt, or the
scripted backend, fails (``memory/tests/test_preflight.py``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memory.base import BaseSystem, MemorySystem, ensure_json
from memory.embed import Embedder
from memory.llm import LLM, REPLY_TEMPERATURE
from memory.readiness.core import MECHANISM, REPLY_MODEL, VERDICTS, Check, Task, calibration
from memory.readiness.replies import REPLY_CHECKS, Replies, planned_replies, probe_delivery_task, reply_task
from memory.readiness.sequential import ALPHA
from memory.registry import MEMORY_SYSTEMS, build_system

__all__ = ["Check", "Readiness", "Verdict", "calibration", "llm_free_verdicts", "preflight", "render_text"]

Progress = Callable[[int, int, str], None]

VERDICT_NAMES = {MECHANISM: "memory mechanism", REPLY_MODEL: "reply model"}


@dataclass
class Verdict:
    """One of an arm's two verdicts: ``ready`` None means not settled (or not checked in this run)."""

    ready: bool | None
    checks: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Readiness:
    """The result of :func:`preflight`; ``as_dict()`` is the JSON of ``python -m memory preflight``."""

    arm: str
    backend: str
    model: str
    ready: bool
    checks: list[Check]
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "backend": self.backend,
            "model": self.model,
            "ready": self.ready,
            "checks": [c.as_dict() for c in self.checks],
            "params": self.params,
            "seconds": round(self.seconds, 1),
            "verdicts": {k: v.as_dict() for k, v in self.verdicts.items()},
            "settings": self.settings,
            "coverage": self.coverage,
            "conditions": self.conditions,
        }

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    @property
    def partial(self) -> str:
        """Why this verdict rests on fewer items than the full check *by choice* (empty when it does not)."""
        return str(self.coverage.get("partial", ""))


def has_memory(system: MemorySystem) -> bool:
    return not getattr(system, "is_qc", False) and bool(ensure_json(system.initial_state()))


def llm_free_verdicts(arm: str, params: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The verdicts of ``arm`` that need no model call: both for the quality-control arm, the memory
    mechanism for an arm without LLM tasks of its own (rule-based memory), none otherwise."""
    system = build_system(arm, **(params or {}))
    assert isinstance(system, BaseSystem)
    if system.is_qc:
        return VERDICTS
    return (MECHANISM,) if not system.readiness_tasks() else ()


def verdict_of(checks: Sequence[Check]) -> bool | None:
    """Not ready as soon as one check failed; ready once every check passed; else open."""
    if any(c.passed is False for c in checks):
        return False
    return True if all(c.passed is True for c in checks) else None


def _duration(seconds: float) -> str:
    if seconds < 60:
        return "under a minute"
    return f"about {round(seconds / 60)} min"


class _Run:
    """Runs the stages' items in order, re-scores after each one, and reports progress with an
    estimate of the time left (the mean time of an item of the same task, else of any item so far)."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0
        self.started = time.perf_counter()
        self.times: dict[str, list[float]] = {}

    def eta(self, left: Sequence[tuple[str, int]]) -> float:
        spent = [t for ts in self.times.values() for t in ts]
        overall = sum(spent) / len(spent) if spent else 0.0
        seconds = 0.0
        for name, count in left:
            mine = self.times.get(name)
            seconds += count * (sum(mine) / len(mine) if mine else overall)
        return seconds

    def stage(self, tasks: list[Task], verdict: str, *, stop_early: bool, later: int = 0) -> list[Check]:
        """Run the tasks of one verdict. With ``stop_early`` the stage ends once that verdict is settled,
        and a task's items stop once each of its checks is. ``later`` is the number of items planned
        after this stage (for the estimate of time left)."""
        records: list[list[dict[str, Any]]] = [[] for _ in tasks]

        def score() -> list[list[Check]]:
            out = []
            for task, recs in zip(tasks, records, strict=True):
                checks = task.score(recs, task.items)
                for c in checks:
                    c.verdict = REPLY_MODEL if c.name in REPLY_CHECKS else MECHANISM
                out.append([c for c in checks if c.verdict == verdict])
            return out

        def mine(per_task: list[list[Check]]) -> list[Check]:
            return [c for checks in per_task for c in checks]

        per_task = score()
        for t, task in enumerate(tasks):
            for i, item in enumerate(task.items, 1):
                if stop_early and verdict_of(mine(per_task)) is not None:
                    return mine(per_task)
                if stop_early and per_task[t] and all(c.passed is not None for c in per_task[t]):
                    self.total -= len(task.items) - i + 1  # this task's checks are settled: its other items go
                    break
                began = time.perf_counter()
                records[t].append(task.run(item))
                self.times.setdefault(task.name, []).append(time.perf_counter() - began)
                self.done += 1
                per_task = score()
                if self.progress is not None:
                    left = [(task.name, len(task.items) - i)] + [(x.name, len(x.items)) for x in tasks[t + 1 :]]
                    eta = self.eta(left) + later * self.eta([("", 1)])
                    label = f"{task.name} {i}/{len(task.items)} · {_duration(eta)} left at most"
                    self.progress(self.done, max(self.total, self.done), label)
        return mine(per_task)


def preflight(
    arm: str,
    llm: LLM,
    *,
    embedder: Embedder | None,
    params: dict[str, Any] | None = None,
    backend: str = "",
    progress: Progress | None = None,
    reply_max_tokens: int = 120,
    max_probes: int | None = None,
    reply_temperature: float = REPLY_TEMPERATURE,
    sequential: bool = True,
    verdicts: Sequence[str] = VERDICTS,
) -> Readiness:
    """Run ``arm``'s readiness checks with ``llm``: its LLM tasks and the probes' delivery (the memory
    mechanism), then the replies (the reply model). ``progress(done, total, label)`` is called after
    every item.

    ``max_probes`` limits the probing questions (all 14 by default); fewer make a quicker, noisier
    check, recorded as partial. ``sequential`` stops as soon as the verdict is settled; ``verdicts``
    chooses what to check (the platform checks the memory mechanism of a rule-based arm at once, with
    no model). Raises ValueError for an unknown arm or parameter, or ``max_probes`` below 1."""
    if arm not in MEMORY_SYSTEMS:
        raise ValueError(f"unknown memory system {arm!r}; registered: {sorted(MEMORY_SYSTEMS)}")
    if max_probes is not None and max_probes < 1:
        raise ValueError(f"max_probes must be at least 1 (or None for all), not {max_probes}")
    unknown = set(verdicts) - set(VERDICTS)
    if unknown or not verdicts:
        raise ValueError(f"verdicts must be some of {VERDICTS}, not {list(verdicts)}")
    started = time.perf_counter()
    load_start = _load()
    system = build_system(arm, llm=llm, embedder=embedder, **(params or {}))
    assert isinstance(system, BaseSystem)
    probes_available = len(calibration()["probes"])
    settings = {
        "embedder": getattr(embedder, "name", None),
        "max_probes": max_probes,
        "reply_max_tokens": reply_max_tokens,
        "reply_temperature": reply_temperature,
        "stopping": "sequential" if sequential else "none (every item)",
        "alpha": ALPHA if sequential else None,
        "verdicts": list(verdicts),
    }

    def result(checks: list[Check], found: dict[str, Verdict], coverage: dict[str, Any]) -> Readiness:
        return Readiness(
            arm=arm,
            backend=backend,
            model=llm.model,
            ready=all(found[v].ready is True for v in VERDICTS),
            checks=checks,
            params=dict(system.p),
            seconds=time.perf_counter() - started,
            verdicts=found,
            settings=settings,
            coverage=coverage,
            conditions={**_conditions(load_start), **_basis(checks)},
        )

    if system.is_qc:
        # The quality-control arm draws degraded replies from a corpus without any LLM call: there is no
        # model to check, and its replies are bad on purpose.
        qc = Check("qc_needs_no_llm", 1.0, 1.0, True,
                   "the quality-control arm makes no LLM call (degraded replies drawn from the GVD set, on purpose)",
                   n=1, planned=1, settled="all items")  # fmt: skip
        found = {
            MECHANISM: Verdict(True, ["qc_needs_no_llm"]),
            REPLY_MODEL: Verdict(True, note="no reply model: the replies are drawn from the GVD set"),
        }
        return result([qc], found, {"items_run": 0, "items_planned": 0, "stopped_early": False, "partial": ""})

    ctx = Replies(system, llm, reply_max_tokens, reply_temperature)
    own = list(system.readiness_tasks())
    stage1 = own + ([probe_delivery_task(ctx, max_probes)] if has_memory(system) else [])
    planned_probes = len(stage1[-1].items) if has_memory(system) else 0
    stage2_planned = planned_replies(planned_probes)
    with_replies = REPLY_MODEL in verdicts
    planned = sum(len(t.items) for t in stage1) + (stage2_planned if with_replies else 0)
    run = _Run(progress, planned)
    # A mechanism without LLM tasks costs no model call: it is always checked on every item.
    mechanism = run.stage(
        stage1, MECHANISM, stop_early=sequential and bool(own), later=stage2_planned if with_replies else 0
    )
    found = {MECHANISM: _verdict(mechanism, "the arm keeps no memory: nothing to check" if not stage1 else "")}
    replies: list[Check] = []
    if not with_replies:
        found[REPLY_MODEL] = Verdict(None, note="not checked in this run")
    elif sequential and found[MECHANISM].ready is False:
        found[REPLY_MODEL] = Verdict(
            None, note="the run stopped once the memory mechanism was found not ready (--full runs it)"
        )
    else:
        stage2 = [reply_task(ctx)]
        run.total = run.done + len(stage2[0].items)
        replies = run.stage(stage2, REPLY_MODEL, stop_early=sequential)
        found[REPLY_MODEL] = _verdict(replies)
    if progress is not None and run.done < run.total:
        progress(run.done, run.done, f"verdict settled after {run.done} of {planned} items")
    partial = ""
    if max_probes is not None and max_probes < probes_available and has_memory(system):
        partial = (
            f"{min(max_probes, probes_available)} of {probes_available} probing questions (--max-probes {max_probes})"
        )
    coverage = {
        "items_run": run.done,
        "items_planned": planned,
        "stopped_early": run.done < planned,
        "probes": len(ctx.replayed),
        "probes_available": probes_available if has_memory(system) else 0,
        "partial": partial,
    }
    return result(mechanism + replies, found, coverage)


def _verdict(checks: list[Check], empty: str = "") -> Verdict:
    ready = verdict_of(checks)
    note = empty if not checks else ""
    return Verdict(ready, [c.name for c in checks], [c.name for c in checks if c.passed is False], note)


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return []


def _conditions(load_start: list[float]) -> dict[str, Any]:
    """The machine the check ran on: load average (1, 5, 15 min) at the start and the end, and CPUs."""
    return {"load_average_start": load_start, "load_average_end": _load(), "cpus": os.cpu_count()}


def _basis(checks: list[Check]) -> dict[str, Any]:
    for c in checks:
        if c.name == "reply_latency_p95_ms" and c.examples:
            return {"latency_basis": c.examples[0].get("basis", "")}
    return {}


def render_text(result: Readiness) -> str:
    """A human-readable report of a :class:`Readiness`."""
    head = "READY" if result.ready else "NOT READY"
    lines = [f"{result.arm} on {result.backend or '?'} / {result.model}: {head} ({result.seconds:.0f} s)"]
    if result.partial:
        lines.append(f"  PARTIAL CHECK: {result.partial}; the full check asks every probing question")
    for key, verdict in result.verdicts.items():
        state = {True: "ready", False: "NOT READY", None: "not settled"}[verdict.ready]
        detail = f" (failed {', '.join(verdict.failed)})" if verdict.failed else ""
        note = f": {verdict.note}" if verdict.note else ""
        lines.append(f"  {VERDICT_NAMES[key]}: {state}{detail}{note}")
    lines.append("  " + _how(result))
    for c in result.checks:
        if c.passed is None and c.n == 0:
            continue  # not reached: listed below
        mark = {True: "ok  ", False: "FAIL", None: "open"}[c.passed]
        lines.append(f"  {mark} {c.name}: {c.score:g} (needs {c.direction} {c.threshold:g}): {c.why}")
        if c.passed is False:
            for ex in c.examples[:2]:
                lines.append(f"         e.g. {json.dumps(ex, ensure_ascii=False)[:300]}")
    unreached = [c.name for c in result.checks if c.passed is None and c.n == 0]
    if unreached:
        lines.append(f"  not reached (the verdict was settled first): {', '.join(unreached)}")
    return "\n".join(lines) + "\n"


def _how(result: Readiness) -> str:
    s, cov, cond = result.settings, result.coverage, result.conditions
    if s.get("alpha") is not None:
        how = f"{cov.get('items_run', 0)} of {cov.get('items_planned', 0)} items (sequential stopping, alpha {s['alpha']})"
    else:
        how = f"{cov.get('items_run', 0)} of {cov.get('items_planned', 0)} items (every item)"
    how += f"; replies at temperature {s.get('reply_temperature')}, at most {s.get('reply_max_tokens')} tokens"
    if cond.get("latency_basis"):
        how += f", latency on {cond['latency_basis']} time"
    if cond.get("load_average_start"):
        how += (
            f"; load average {cond['load_average_start'][0]:g} at the start, "
            f"{(cond.get('load_average_end') or [0])[0]:g} at the end, on {cond.get('cpus')} CPUs"
        )
    return how
