"""The bounds of a power simulation's run (reports/planning.py's ``run_plan``, a job of the runtime's ``plan``
lane): its CPU budget and its Cancel, checked as the simulation goes (``analysis.planning.workers_needed``
calls :meth:`Budget.check` after every block of simulated studies).

The budget is the CPU time of the thread that runs the simulation (``time.thread_time``), not of its process:
the embedded default runs every plan, one after another, in one long-lived child process, and a test or an
inline run shares its process with everything else, so neither the process's CPU clock nor ``RLIMIT_CPU``
(which would end the whole process) measures one plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from memory.replyfirst import REPLY_GATE, yields_to_replies


class OverBudget(Exception):
    """The simulation used its CPU budget (``PLAN_CPU_SECONDS``); the message says what to change."""


class Budget:
    """``check()`` raises :class:`OverBudget` once the calling thread has used ``cpu_seconds`` of CPU since the
    budget was made, and first calls ``stop`` (the runtime attempt's ``check``: raises ``JobLost`` once the
    job was cancelled or taken back)."""

    def __init__(self, cpu_seconds: float, stop: Callable[[], None] = lambda: None) -> None:
        self.cpu_seconds = cpu_seconds
        self.stop = stop
        self.started = time.thread_time()

    def used(self) -> float:
        return time.thread_time() - self.started

    def check(self) -> None:
        if yields_to_replies():  # a background process: while a reply of the embedded model runs, wait
            REPLY_GATE.wait_clear()  # sleeping: no CPU of the budget is used
        self.stop()
        if self.used() >= self.cpu_seconds:
            raise OverBudget(
                f"the simulation ran over its CPU budget of {self.cpu_seconds:g} s (PLAN_CPU_SECONDS): choose fewer "
                "simulated studies or a smaller largest study"
            )
