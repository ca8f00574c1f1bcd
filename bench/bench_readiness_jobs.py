"""How soon the study page has each arm's readiness verdict on the embedded default (issue 22, item 3).

    .venv/bin/python bench/bench_readiness_jobs.py [--arms memory_update full_history qc] [--timeout 1800]

A fresh SQLite site with the embedded default's settings (``LLM_BACKEND=local``: SmolLM2-135M in
process, jobs in the web process's threads, ``CHAT_JOB_MODE=thread``) and one study whose arms are
``--arms``, all on the local model. It presses "Check every arm" (``chat.armjobs.start`` for each
active arm, in order) and then reads the jobs' rows every second, as the study page's poll does,
printing when each arm's memory-mechanism verdict, reply-model verdict and overall verdict first
appear, with the job's progress step and the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.live import prepare_site  # noqa: E402 (needs ROOT on the path)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", nargs="+", default=["memory_update", "full_history", "qc"])
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="memeval-bench-")
    env = os.environ.copy()
    env.update({"DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3", "LLM_BACKEND": "local", "LLM_MODEL": "",
                "CHAT_JOB_MODE": "thread", "LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "evalsite.settings"})  # fmt: skip
    os.environ.update(env)
    prepare_site(env)

    import django

    django.setup()
    from chat import armjobs
    from chat.models import ArmJob
    from studies.models import Arm, Study

    study = Study.objects.create(name="Readiness bench", slug=f"bench-{int(time.time())}")
    for name in args.arms:
        Arm.objects.create(study=study, name=name, memory_system=name, llm_backend="local")
    print(f"embedded default: local model in process, jobs in threads; arms {', '.join(args.arms)}; {load()}")
    print("| seconds | arm | what | job status | progress | load average |")
    print("|---|---|---|---|---|---|")
    started = time.perf_counter()
    for each in study.arms.order_by("id"):
        armjobs.start(each, ArmJob.Kind.READINESS)
    seen: set[tuple[str, str]] = set()
    names = {True: "ready", False: "not ready"}

    def report(arm: str, what: str, job: ArmJob) -> None:
        if (arm, what) in seen:
            return
        seen.add((arm, what))
        step = f"{job.done}/{job.total} {job.step}".strip()
        print(f"| {time.perf_counter() - started:.1f} | `{arm}` | {what} | {job.status} | {step} | {load()} |")
        sys.stdout.flush()

    while time.perf_counter() - started < args.timeout:
        jobs = ArmJob.objects.filter(arm__study=study).select_related("arm")
        for job in jobs:
            arm = job.arm.memory_system
            verdicts = (job.result or {}).get("verdicts") or {}
            for key, label in (("mechanism", "memory mechanism"), ("reply_model", "reply model")):
                ready = (verdicts.get(key) or {}).get("ready")
                if ready is not None:
                    report(arm, f"{label} {names[ready]}", job)
            if job.status == ArmJob.Status.RUNNING:
                report(arm, "started", job)
            if job.finished:
                outcome = "error: " + job.error[:80] if job.error else names[bool((job.result or {}).get("ready"))]
                report(arm, f"done: {outcome}", job)
        if all(j.finished for j in jobs):
            break
        time.sleep(1.0)
    print(f"\n{time.perf_counter() - started:.0f} s in all; {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
