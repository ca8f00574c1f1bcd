"""The power simulation's own process (reports/planning.py starts it): no Django here, only the analysis library.

It runs in a child process so that the web process can stop it (a researcher's Cancel, or the web process
shutting down) and so that the operating system bounds it: ``RLIMIT_CPU`` ends it at its CPU budget (SIGXCPU,
then SIGKILL five seconds later), however large the simulation the form allowed. The answer goes back over a
pipe as plain data.
"""

from __future__ import annotations

import os
import resource
import signal
import traceback
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Any


def run(conn: Connection, job: dict[str, Any], cpu_seconds: int) -> None:
    """Estimate the components from a pilot (if any) and search the workers needed; send the result."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))

    def over_budget(signum: int, frame: Any) -> None:
        conn.send({"status": "failed", "message": f"the simulation ran over its CPU budget of {cpu_seconds} s "
                   "(PLAN_CPU_SECONDS): choose fewer simulated studies or a smaller largest study"})  # fmt: skip
        os._exit(3)

    signal.signal(signal.SIGXCPU, over_budget)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from analysis.planning import estimate_components, workers_needed
    from analysis.spec import RatingsError

    try:
        components, notes, pilot_info = job["components"], [], None
        if job.get("pilot_frame") is not None:
            estimate = estimate_components(job["pilot_frame"], job["pilot_spec"])
            components, notes, pilot_info = estimate.components, estimate.notes, estimate.as_dict()
        effect = job["effect"] / components.latent_sd if job["effect_unit"] == "points" else job["effect"]
        plan = workers_needed(job["design"], components, effect, **job["search"])
        plan.notes[:0] = notes
        conn.send({"status": "done", "plan": plan.as_dict(), "pilot": pilot_info})
    except (RatingsError, ValueError) as exc:
        conn.send({"status": "failed", "message": str(exc)})
    except Exception:  # noqa: BLE001 (the parent logs it and tells the page)
        conn.send({"status": "crashed", "message": traceback.format_exc(), "design": asdict(job["design"])})
    finally:
        conn.close()
