"""The judge's background job: score every finished session, then the study's persona-card probe answers that
need a judge (free-text facts, and the probe answers of the judge sample), then the leniency control set.

:func:`start` marks the judge queued and submits a job of the runtime (kind ``judges.run``, lane ``long``:
Celery's long queue in production, a thread of the long lane in the embedded default, so a worker's reply
never waits behind it; the study's jobs list shows it); :func:`run` claims the judge with a compare-and-set (a second delivery does nothing),
then scores what is not scored yet under the current prompt texts, so a job that stopped half-way resumes
where it was and a re-run after a prompt edit scores only under the new text.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction
from django.utils import timezone

from analysis.judging import false_acceptance
from annotation.models import Item
from annotation.sources import transcript_of
from chat.models import ProbeResult
from judges import control, prompts, sample, scoring
from judges.models import RUBRICS, Judge, JudgeScore, ProbeJudgement, api_key_from_env
from memory.llm import LLM, LLMTransientError, make_llm
from memory.probes import free_text_verdict
from runtime import jobs, kinds
from runtime.jobs import Attempt
from runtime.models import Job

log = logging.getLogger(__name__)
ATTEMPTS = 4
T = TypeVar("T")


def rubrics_of(judge: Judge) -> list[str]:
    """``standard`` first, then the sensitivity rubrics chosen for the judge."""
    return ["standard"] + [r for r in RUBRICS if r != "standard" and r in (judge.rubrics or [])]


def build_llm(judge: Judge) -> LLM:
    key = api_key_from_env(judge.api_key_env) or "not-needed"  # local servers take any key
    return make_llm("openai", judge.model, api_key=key, base_url=judge.base_url or None, timeout=120.0)


def start(judge: Judge) -> bool:
    """Queue the judge's job; False when it is already queued or running."""
    with transaction.atomic():
        moved = (
            Judge.objects.filter(pk=judge.pk)
            .exclude(status__in=[Judge.Status.QUEUED, Judge.Status.RUNNING])
            .update(status=Judge.Status.QUEUED, error="", progress={})
        )
        if moved:
            jobs.submit(JUDGE, judge.pk, scope=f"study:{judge.study_id}", label=f"automatic judge {judge.name}")
    return bool(moved)


def _retrying(call: Callable[[], T]) -> T:
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except LLMTransientError as exc:
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(min(30.0, exc.retry_after or 2.0**attempt))
    raise AssertionError("unreachable")


def run(judge_id: int, *, llm: LLM | None = None) -> None:
    """Score the judge's study (``llm``: a test's fake in place of the configured endpoint)."""
    if not Judge.objects.filter(pk=judge_id, status=Judge.Status.QUEUED).update(
        status=Judge.Status.RUNNING, started_at=timezone.now(), finished_at=None
    ):
        return
    judge = Judge.objects.select_related("study").get(pk=judge_id)
    try:
        model = llm or build_llm(judge)
        _score_sessions(judge, model)
        score_probes(judge, model)
        score_control_set(judge, model)
    except Exception as exc:  # the job's failure is the judge's status, shown on the page
        log.warning("judge %s failed", judge_id, exc_info=True)
        Judge.objects.filter(pk=judge_id).update(
            status=Judge.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000], finished_at=timezone.now()
        )
        return
    Judge.objects.filter(pk=judge_id).update(status=Judge.Status.DONE, finished_at=timezone.now())


def _score_sessions(judge: Judge, model: LLM) -> None:
    statements = sample.statements(judge.study)
    sessions = sample.finished_sessions(judge.study)
    rubric_prompts = [prompts.load("session", r) for r in rubrics_of(judge)]
    done_keys = set(JudgeScore.objects.filter(judge=judge).values_list("session_id", "metric", "prompt_sha256"))
    total = len(sessions) * len(statements) * len(rubric_prompts)
    done = errors = 0
    for session in sessions:
        turns = transcript_of(session)
        for prompt, rubric in zip(rubric_prompts, rubrics_of(judge), strict=True):
            for statement in statements:
                done += 1
                if (session.pk, statement["key"], prompt.sha256) in done_keys:
                    continue
                score, raw = _retrying(functools.partial(scoring.score_session, model, prompt, turns, statement))
                errors += score is None
                JudgeScore.objects.get_or_create(
                    judge=judge, session=session, metric=statement["key"], rubric=rubric, prompt_sha256=prompt.sha256,
                    defaults={"prompt": prompt.name, "model": judge.model, "score": score, "raw": raw[:4000]},
                )  # fmt: skip
        Judge.objects.filter(pk=judge.pk).update(progress={"done": done, "total": total, "errors": errors})


def probes_to_judge(judge: Judge) -> list[ProbeResult]:
    """The probe answers the judge scores: the study's free-text facts (their key phrases cannot score them) and
    the probe answers of its judge sample (the admission test on probe answers)."""
    queue = sample.sample_queue(judge.study)
    sampled = (
        {int(p) for p in Item.objects.filter(queue=queue, meta__has_key="probe").values_list("meta__probe", flat=True)}
        if queue is not None
        else set()
    )  # fmt: skip
    free = list(sample.judged_probes(judge.study))
    ids = {p.pk for p in free}
    return free + list(ProbeResult.objects.filter(pk__in=sampled - ids).order_by("pk"))


def score_probes(judge: Judge, model: LLM) -> None:
    """Each probe answer of :func:`probes_to_judge` not judged yet under the current probe prompt text, with the
    card's current fact and its outdated values (memory.probes.free_text_verdict)."""
    prompt = prompts.load("probe", "standard")
    done = set(
        ProbeJudgement.objects.filter(judge=judge, prompt_sha256=prompt.sha256).values_list("probe_id", flat=True)
    )
    todo = [p for p in probes_to_judge(judge) if p.pk not in done]
    progress = dict(Judge.objects.filter(pk=judge.pk).values_list("progress", flat=True).first() or {})
    errors = 0
    for n, probe in enumerate(todo, 1):
        item = probe.item or {}
        label, raw = _retrying(
            functools.partial(
                free_text_verdict, model, question=probe.question, gold=(item.get("gold") or {}).get("value", ""),
                stale=[v.get("value", "") for v in item.get("stale_values", [])], answer=probe.answer, prompt=prompt,
            )
        )  # fmt: skip
        errors += label is None
        ProbeJudgement.objects.get_or_create(
            judge=judge, probe=probe, prompt_sha256=prompt.sha256,
            defaults={"prompt": prompt.name, "model": judge.model, "label": None if label is None else bool(label),
                      "raw": raw[:4000]},
        )  # fmt: skip
        if n % 20 == 0 or n == len(todo):
            progress.update(probes_done=n, probes_total=len(todo), probe_errors=errors)
            Judge.objects.filter(pk=judge.pk).update(progress=progress)


def score_control_set(judge: Judge, model: LLM) -> None:
    """The leniency control set under each of the judge's rubrics (stored on the judge)."""
    cases = control.control_cases()
    leniency = {}
    for rubric in rubrics_of(judge):
        prompt = prompts.load("answer", rubric)
        wrong: list[int | None] = []
        gold: list[int | None] = []
        for case in cases:
            label, _raw = _retrying(
                functools.partial(scoring.label_answer, model, prompt, case.question, case.gold, case.answer)
            )
            (wrong if case.wrong else gold).append(label)
        far = false_acceptance(v if v is None else bool(v) for v in wrong)
        accepted_gold = false_acceptance(v if v is None else bool(v) for v in gold)
        leniency[rubric] = {
            "false_acceptance": far,
            "gold_acceptance": accepted_gold,
            "prompt": prompt.name,
            "prompt_sha256": prompt.sha256,
            "cases": len(wrong),
        }
    Judge.objects.filter(pk=judge.pk).update(leniency=leniency)


class JudgeFailed(Exception):
    """The judge's job failed; the message is the judge's error (the judges page shows it too)."""


def _run_job(job: Job, attempt: Attempt, handed: Any = None) -> None:
    """The runtime's entry. The judge's own status carries the outcome for the judges page; a failed judge
    also fails its job, so the study's jobs list says why."""
    run(int(job.target))
    judge = Judge.objects.filter(pk=int(job.target)).values("status", "error").first()
    if judge and judge["status"] == Judge.Status.FAILED:
        raise JudgeFailed(judge["error"])


JUDGE = kinds.declare("judges.run", lane="long", run=_run_job, label="automatic judge")
