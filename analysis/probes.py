"""What the bot remembered: the statistics of persona-card probes, beside the sliders.

Input: one row per scored probe (memory/cardeval.py and the platform's probing write them), with the columns
of :data:`COLUMNS`. A probe counts only when the worker did what the card asked (``told``: the fact or its
update was said, the forget asked for); the others are counted and left out.

Per arm, and per arm and session, three rates (:data:`METRICS`):

- ``recall``: probes of current and updated facts whose answer gives the current value;
- ``stale_rate``: probes of updated facts whose answer gives an old value and not the current one;
- ``deletion_honoured``: probes of forgotten facts absent from the answer and from every store of the arm.

Each rate is first taken per unit (episode; per episode and session for the session table), then averaged
over the arm's workers: a worker's units in one arm are averaged first, so the 95% t-interval over workers is
a worker-clustered interval (in memeval a worker meets an arm in one episode, so a unit is a worker). Arms are
compared on the per-unit rates with the sliders' test (default ``cluster-t``: worker-clustered CR2 standard
errors, so a worker's episodes in different arms are not taken as independent) and Holm-corrected within each
family of one rate (whole episode, or one session), as the sliders' ``metric`` families. Every probe test is
**exploratory** (``role``), unless the pre-registration lists the rate among its primary comparisons.

Also: the memory gain (recall over the probes that neither the ``none`` arm nor a closed-book prompt answered),
the correlation of objective recall with the memorability rating (does the worker notice?), and the
failure-stage counts per arm.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.spec import ALPHA, CONFIDENCE, RatingsError
from analysis.stats import compare_columns, correlate, grouped_mean_ci, holm

COLUMNS = ("worker", "unit", "arm", "session", "mode", "kind", "recalled", "stale", "deletion_honoured", "correct",
           "stage", "answerable_without_memory", "told", "dependent", "scored_by")  # fmt: skip
#: ``scored_by`` of a probe whose answer needs a judge (a free-text fact) and has no admitted judge's verdict: its
#: scores are empty (kept out of every rate) and it is counted apart
NOT_ADMITTED = "not admitted"
#: ``scored_by`` of an offline probe of a free-text fact that no judge scored (the run had no judge model, or its
#: verdict was unreadable): left out of the offline rates, as a live one without an admitted judge's verdict is
NOT_JUDGED = "not judged"
JUDGE = "judge"
METRICS: dict[str, str] = {
    "recall": "share of probes of current and updated facts whose answer gives the current value",
    "stale_rate": "share of probes of updated facts whose answer gives an old value and not the current one",
    "deletion_honoured": "share of probes of forgotten facts absent from the answer and from every store of the arm",
    "dependent_consistent": "share of probes of dependent facts (the pet's name after the pet changed or was "
    "forgotten) scored correct",
}
_SOURCE = {"recall": "recalled", "stale_rate": "stale", "deletion_honoured": "deletion_honoured",
           "dependent_consistent": "correct"}  # fmt: skip
_KINDS = {"recall": ("current", "updated"), "stale_rate": ("updated",), "deletion_honoured": ("forgotten",),
          "dependent_consistent": ("current", "updated", "forgotten")}  # fmt: skip
STAGES = ("extraction", "update", "retrieval", "generation")
MODES = ("snapshot", "inline")


def probe_frame(rows: pd.DataFrame | Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The probes as a frame with the canonical columns; raises :class:`RatingsError` naming what is missing."""
    frame = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    missing = [c for c in ("worker", "unit", "arm", "session", "kind") if c not in frame.columns]
    if missing:
        raise RatingsError(f"the probe table lacks column(s) {', '.join(missing)}")
    defaults = {"mode": "snapshot", "recalled": None, "stale": None, "deletion_honoured": None, "correct": None,
                "stage": None, "answerable_without_memory": False, "told": True, "dependent": False,
                "scored_by": "match"}  # fmt: skip
    for col, value in defaults.items():
        if col not in frame.columns:
            frame[col] = value
    bad = sorted(set(frame["kind"].dropna()) - {"current", "updated", "forgotten"})
    if bad:
        raise RatingsError(f"unknown probe kind(s) {bad}: current, updated or forgotten")
    try:
        frame["session"] = pd.to_numeric(frame["session"]).astype(int)
    except (TypeError, ValueError) as exc:
        raise RatingsError(f"probe sessions must be whole numbers ({exc})") from exc
    for col, absent in (("told", True), ("dependent", False), ("answerable_without_memory", False)):
        frame[col] = [_flag(v, absent) for v in frame[col]]
        frame[col] = frame[col].astype(bool)
    frame["scored_by"] = [str(v) if isinstance(v, str) and v else "match" for v in frame["scored_by"]]
    for col in _SOURCE.values():
        frame[col] = frame[col].map(lambda v: math.nan if v is None or v != v else float(bool(v)))  # noqa: PLR0124
    return frame[list(COLUMNS)]


def _flag(value: Any, absent: bool) -> bool:
    """A boolean cell, ``absent`` where it is missing (None or NaN)."""
    return absent if value is None or value != value else bool(value)  # noqa: PLR0124


def _rates(frame: pd.DataFrame, by: list[str], *, needed_only: bool = False) -> pd.DataFrame:
    """Per group (unit, or unit and session): each rate over the group's probes of its kinds (NaN: none)."""
    out: list[pd.DataFrame | pd.Series[Any]] = []
    for name, source in _SOURCE.items():
        rows = frame[frame["kind"].isin(_KINDS[name])]
        if name == "dependent_consistent":
            rows = rows[rows["dependent"]]
        if needed_only:
            rows = rows[~rows["answerable_without_memory"]]
        out.append(rows.groupby(by, sort=True)[source].mean().rename(name))
    keys = frame.groupby(by, sort=True)[["worker", "arm"]].first()
    return keys.join(out, how="left").reset_index()


def _ci_table(rates: pd.DataFrame, by: list[str], metrics: Sequence[str]) -> dict[Any, dict[str, Any]]:
    """Worker-clustered means: units averaged per worker first, then a t-interval over the workers."""
    per_worker = rates.groupby([*by, "worker"], sort=True)[list(metrics)].mean().reset_index()
    table = grouped_mean_ci(per_worker, by, list(metrics), CONFIDENCE)
    units = rates.groupby(by, sort=True)[list(metrics)].count()
    out: dict[Any, dict[str, Any]] = {}
    for key in table.index:
        row = table.loc[key]
        out[key] = {
            m: {
                "mean": _num(row[m]),
                "ci95": [_num(row[f"{m}_lo"]), _num(row[f"{m}_hi"])],
                "n_workers": int(row[f"{m}_n"]),
                "n_units": int(units.loc[key, m]),
            }
            for m in metrics
        }
    return out


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _pairwise(rates: pd.DataFrame, arms: list[str], test: str, session: Any = None) -> list[dict[str, Any]]:
    out = []
    metrics = list(METRICS)
    for a, b in combinations(arms, 2):
        ra, rb = rates[rates["arm"] == a], rates[rates["arm"] == b]
        results = compare_columns(
            ra[metrics].to_numpy(dtype=float), rb[metrics].to_numpy(dtype=float), test,  # type: ignore[arg-type]
            ra["worker"].to_numpy(), rb["worker"].to_numpy(),
        )  # fmt: skip
        for m, res in zip(metrics, results, strict=True):
            entry = {"metric": m, "a": a, "b": b, "test": test, "scale": "rate", "sample": "units", **res}
            if session is not None:
                entry["session"] = session
            out.append(entry)
    return out


def _families(entries: list[dict[str, Any]], primary: Sequence[str]) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        scope = f"session {e['session']}: " if "session" in e else ""
        e["family"] = f"probes {scope}{e['metric']}"
        is_primary = e["metric"] in primary and "session" not in e
        e["role"] = "primary" if is_primary else "exploratory"
        groups.setdefault(e["family"], []).append(e)
    out = []
    for fid, members in groups.items():
        for e, p in zip(members, holm([_p(e) for e in members]), strict=True):
            e["p_holm"] = _num(p)
        out.append({"id": fid, "kind": "probe metric", "tests": sum(1 for e in members if not math.isnan(_p(e))),
                    "significant": sum(1 for e in members if e["p_holm"] is not None and e["p_holm"] < ALPHA)})  # fmt: skip
    return out


def _p(entry: Mapping[str, Any]) -> float:
    p = entry.get("p")
    return math.nan if p is None else float(p)


def _section(frame: pd.DataFrame, arms: list[str], test: str, primary: Sequence[str]) -> dict[str, Any]:
    unit_rates = _rates(frame, ["unit"])
    session_rates = _rates(frame, ["unit", "session"])
    needed = _rates(frame, ["unit"], needed_only=True)
    by_arm_table = _ci_table(unit_rates, ["arm"], list(METRICS))
    gain = _ci_table(needed.rename(columns={"recall": "memory_gain"}), ["arm"], ["memory_gain"])
    by_arm = {}
    for a in arms:
        rows = frame[frame["arm"] == a]
        by_arm[a] = {
            **by_arm_table.get(a, dict.fromkeys(METRICS)),
            "memory_gain": gain.get(a, {}).get("memory_gain"),
            "n_probes": int(len(rows)),
            "n_units": int(rows["unit"].nunique()),
            "n_workers": int(rows["worker"].nunique()),
            "answerable_without_memory": int(rows["answerable_without_memory"].sum()),
            "stages": {s: int((rows["stage"] == s).sum()) for s in STAGES},
        }
    by_session = []
    table = _ci_table(session_rates, ["arm", "session"], list(METRICS))
    for (a, s), cells in sorted(table.items(), key=lambda kv: (arms.index(kv[0][0]), kv[0][1])):
        by_session.append({"arm": a, "session": int(s), **cells})
    whole = _pairwise(unit_rates, arms, test)
    per_session: list[dict[str, Any]] = []
    for _, rows in session_rates.groupby("session", sort=True):
        per_session += _pairwise(rows, arms, test, session=int(rows["session"].iloc[0]))
    families = _families([*whole, *per_session], primary)
    return {
        "n_probes": int(len(frame)),
        "n_judged": int((frame["scored_by"] == JUDGE).sum()),
        "n_not_admitted": int((frame["scored_by"] == NOT_ADMITTED).sum()),
        "by_arm": by_arm,
        "by_arm_session": by_session,
        "pairwise": whole,
        "pairwise_by_session": per_session,
        "families": families,
    }


def _notice(frame: pd.DataFrame, ratings: pd.DataFrame | None, metric: str) -> dict[str, Any] | None:
    """Recall of the memory a session started from (the snapshot after the session before) against the
    worker's rating of that session on ``metric``, per (unit, session); and per unit (means)."""
    if ratings is None or ratings.empty or metric not in ratings.columns:
        return None
    snap = frame[(frame["mode"] == "snapshot") & frame["kind"].isin(_KINDS["recall"])]
    recall = snap.groupby(["unit", "session"], sort=True)["recalled"].mean().reset_index()
    recall["session"] = recall["session"] + 1  # the memory after session k is what session k + 1 starts from
    rated = ratings[["unit", "session", metric]].dropna()
    pairs = recall.merge(rated, on=["unit", "session"], how="inner")
    per_unit = pairs.groupby("unit")[["recalled", metric]].mean()
    return {
        "metric": metric,
        "what": f"recall of the memory each session started from (probed after the session before) against the "
        f"{metric} rating of that session",
        "sessions": correlate(pairs["recalled"], pairs[metric]),
        "units": correlate(per_unit["recalled"], per_unit[metric]),
    }


def analyze_probes(
    rows: pd.DataFrame | Iterable[Mapping[str, Any]],
    *,
    arms: Sequence[str] | None = None,
    test: str = "cluster-t",
    ratings: pd.DataFrame | None = None,
    rating_metric: str = "memorability",
    primary: Sequence[str] = (),
    alpha: float = ALPHA,
    offline: pd.DataFrame | Iterable[Mapping[str, Any]] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The probe report: per mode (``snapshot``: after each session, from the stored memory; ``inline``: asked
    by the worker in the chat), per arm and per arm and session, the three rates with worker-clustered 95% CIs,
    pairwise tests with Holm families, the memory gain, the stage counts; and the correlation of snapshot recall
    with the ``rating_metric`` rating (``ratings``: one row per rated session with ``unit``, ``session`` and the
    metric). ``primary`` names rates the pre-registration made primary (else every probe test is exploratory):
    their whole-episode tests, in every mode, form the probes' primary family, Holm-corrected together
    (``p_holm_primary``) and significant below ``alpha`` (the registration's). ``offline``: the probes of the
    offline card evaluation of the same arms (rows as :func:`offline_rows` makes them), set beside the live ones
    with the agreement of the two orderings of the arms (:func:`compare_offline`; ``n_boot`` bootstrap
    replicates, ``seed``). The result is JSON-ready (keys in docs/analysis.md)."""
    unknown = [m for m in primary if m not in METRICS]
    if unknown:
        raise RatingsError(f"unknown probe rate(s) {', '.join(unknown)} among the primary ones (one of "
                           f"{', '.join(METRICS)})")  # fmt: skip
    frame = probe_frame(rows)
    untold = frame[~frame["told"]]
    kept = frame[frame["told"]]
    names = list(arms) if arms is not None else sorted(kept["arm"].dropna().unique().tolist())
    out: dict[str, Any] = {
        "metrics": dict(METRICS),
        "test": test,
        "role": "exploratory unless pre-registered",
        "primary": list(primary),
        "arms": names,
        "n_probes": int(len(kept)),
        "n_untold": int(len(untold)),
        "untold_note": "probes of facts the worker did not bring up (or a forget not asked for) are left out",
        "scoring": {
            "match": int((~kept["scored_by"].isin([JUDGE, NOT_ADMITTED])).sum()),
            "judge": int((kept["scored_by"] == JUDGE).sum()),
            "not_admitted": int((kept["scored_by"] == NOT_ADMITTED).sum()),
            "note": "match: the card's value or one of its aliases in the answer (exact or alias); judge: a free-text "
            "fact scored by an automatic judge admitted on the study's probe answers; not admitted: a free-text fact "
            "with no admitted judge's verdict, kept out of every rate",
        },
        "n_units": int(kept["unit"].nunique()),
        "n_workers": int(kept["worker"].nunique()),
        "modes": {},
    }
    for mode in MODES:
        rows_of = kept[kept["mode"] == mode]
        if not rows_of.empty:
            out["modes"][mode] = _section(rows_of, [a for a in names if a in set(rows_of["arm"])], test, primary)
    out["primary_family"] = _primary_family(out["modes"], primary, alpha)
    if offline is not None:
        out["offline"] = compare_offline(kept, offline, arms=names, n_boot=n_boot, seed=seed)
    out["recall_vs_rating"] = _notice(kept, ratings, rating_metric)
    safe: dict[str, Any] = _json_safe(out)
    return safe


def _primary_family(modes: Mapping[str, Any], primary: Sequence[str], alpha: float) -> dict[str, Any]:
    """Mark every probe test primary or not, and Holm-correct the primary ones (the whole-episode tests of the
    rates ``primary`` names, in every mode) as one family: ``primary`` (bool) and ``p_holm_primary`` (None for
    exploratory tests, whose ``p_holm`` is corrected within their own rate's family only)."""
    chosen: list[dict[str, Any]] = []
    for section in modes.values():
        for e in [*section["pairwise"], *section["pairwise_by_session"]]:
            e["primary"] = e["role"] == "primary"
            e["p_holm_primary"] = None
            if e["primary"]:
                chosen.append(e)
    for e, p in zip(chosen, holm([_p(e) for e in chosen]), strict=True):
        e["p_holm_primary"] = _num(p)
    return {
        "id": "probes primary",
        "rates": list(primary),
        "modes": [m for m in modes if any(e["primary"] for e in modes[m]["pairwise"])],
        "tests": sum(1 for e in chosen if not math.isnan(_p(e))),
        "significant": sum(1 for e in chosen if e["p_holm_primary"] is not None and e["p_holm_primary"] < alpha),
        "alpha": alpha,
        "correction": "holm",
        "description": (
            "pre-registered primary probe rates: " + ", ".join(primary) + "; their whole-episode tests in every "
            "mode are Holm-corrected as one family (separate from the sliders' primary family)"
            if primary
            else "no probe rate is pre-registered as primary: every probe test is exploratory"
        ),
    }


# ------------------------------------------------------------------------------- offline beside live

#: The rates set side by side offline and live (the issue's: what was kept, what went stale, what was forgotten).
COMPARED = ("recall", "stale_rate", "deletion_honoured")
OFFLINE_SOURCE = (
    "python -m memory eval ARM --dataset cards on the study's card bank and event script: a scripted user plays "
    "each card through each arm, on the arm's endpoint"
)


def offline_rows(items: Iterable[Mapping[str, Any]], arm: str) -> list[dict[str, Any]]:
    """The per-probe results of an offline card evaluation (memory.cardeval's ``items``) of ``arm`` as probe rows:
    each card is a unit played by its own scripted user (``worker`` = the card, so an arm's interval is over the
    cards, and the same card in two arms is one "worker" meeting both, as in the live design).

    The same facts count as live: a probe of a current or updated free-text fact counts only with a judge's
    readable verdict (the run's judge model: ``scored_by`` ``judge``). Without one (``match (no judge)``: a run
    without a judge model; or an unreadable verdict, ``judge_parsed`` false) its key-phrase match is not used:
    the row says ``scored_by`` :data:`NOT_JUDGED` with empty scores, and :func:`compare_offline` leaves it out and
    counts it, as the live probes leave out a free-text answer without an admitted judge's verdict."""
    rows = []
    for i in items:
        row = {
            "worker": f"card {i['card']}",
            "unit": f"{arm}/{i['card']}",
            "arm": arm,
            "session": i["session"],
            "mode": i.get("mode", "snapshot"),
            "kind": i["kind"],
            "recalled": i.get("recalled"),
            "stale": i.get("stale"),
            "deletion_honoured": i.get("deletion_honoured"),
            "correct": i.get("correct"),
            "stage": i.get("stage"),
            "answerable_without_memory": bool(i.get("answerable_without_memory")),
            "told": True,
            "dependent": bool(i.get("dependent")),
            "scored_by": str(i.get("scored_by") or "match"),
        }  # fmt: skip
        if not_judged(i):
            row.update(recalled=None, stale=None, correct=None, stage=None, scored_by=NOT_JUDGED)
        rows.append(row)
    return rows


def not_judged(item: Mapping[str, Any]) -> bool:
    """Whether an offline probe item is of a current or updated free-text fact without a judge's readable verdict
    (memory.probes: ``scored_by`` ``match (no judge)``, or ``judge`` with ``judge_parsed`` false)."""
    if item.get("kind") not in ("current", "updated"):
        return False  # a forgotten fact is scored by its key phrases, live and offline
    scored_by = str(item.get("scored_by") or "match")
    if scored_by == JUDGE:
        return item.get("judge_parsed") is False
    return bool(item.get("free_text")) or scored_by.startswith("match (no judge")


def compare_offline(
    live: pd.DataFrame | Iterable[Mapping[str, Any]],
    offline: pd.DataFrame | Iterable[Mapping[str, Any]],
    *,
    arms: Sequence[str] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Offline and live, side by side: per mode and arm, the offline rates of :data:`COMPARED` with their 95%
    t-interval over cards (``by_arm``, cells as the live ones), and per mode and rate the agreement of the
    offline and live orderings of the arms (:func:`ordering_agreement`). Untold live probes are left out as in
    :func:`analyze_probes`.

    Both sides count the same facts: a free-text probe without a judge's verdict (live: no admitted judge's,
    ``not admitted``; offline: none of the run's judge, :data:`NOT_JUDGED`) is left out of the rates on its side
    and counted (``free_text_left_out``: offline; ``live_free_text_left_out``: live; per arm in ``by_arm``)."""
    live_frame = probe_frame(live)
    live_frame = live_frame[live_frame["told"]]
    live_left = live_frame["scored_by"].isin([NOT_ADMITTED, NOT_JUDGED])
    live_frame = live_frame[~live_left]
    everything = probe_frame(offline)
    left = everything["scored_by"].isin([NOT_ADMITTED, NOT_JUDGED])
    off = everything[~left]
    dropped = everything[left]
    names = list(arms) if arms is not None else sorted(set(live_frame["arm"]) | set(everything["arm"]))
    names += [a for a in sorted(set(everything["arm"])) if a not in names]
    out: dict[str, Any] = {
        "source": OFFLINE_SOURCE, "rates": list(COMPARED), "n_probes": int(len(off)),
        "free_text_left_out": int(len(dropped)), "live_free_text_left_out": int(live_left.sum()),
        "scoring": {
            "match": int((~off["scored_by"].isin([JUDGE])).sum()), "judge": int((off["scored_by"] == JUDGE).sum()),
            "note": "offline as live: a probe of a free-text fact counts only with a judge's readable verdict "
            "(offline: the run's judge model; live: a judge admitted on the study's probe answers); without one "
            "it is left out of the rates on its side (free_text_left_out, live_free_text_left_out), never scored by "
            "its key phrases",
        },
        "arms": [a for a in names if a in set(everything["arm"])], "modes": {},
    }  # fmt: skip
    for mode in MODES:
        rows = off[off["mode"] == mode]
        gone = dropped[dropped["mode"] == mode]
        if rows.empty and gone.empty:
            continue
        unit_rates = _rates(rows, ["unit"])
        table = _ci_table(unit_rates, ["arm"], list(COMPARED))
        by_arm = {
            a: {
                **table.get(a, dict.fromkeys(COMPARED)),
                "n_probes": int((rows["arm"] == a).sum()),
                "n_cards": int(rows.loc[rows["arm"] == a, "worker"].nunique()),
                "free_text_left_out": int((gone["arm"] == a).sum()),
            }  # fmt: skip
            for a in names
            if a in set(rows["arm"]) | set(gone["arm"])
        }
        live_rows = live_frame[live_frame["mode"] == mode]
        agreement = {}
        if not live_rows.empty:
            live_rates = _rates(live_rows, ["unit"])
            for rate in COMPARED:
                agreement[rate] = ordering_agreement(live_rates, unit_rates, rate, n_boot=n_boot, seed=seed)
        out["modes"][mode] = {"by_arm": by_arm, "agreement": agreement, "free_text_left_out": int(len(gone))}
    return out


def left_out_text(offline: Mapping[str, Any]) -> str:
    """The free-text probes the comparison leaves out, as one sentence (empty when none)."""
    off, live = offline.get("free_text_left_out") or 0, offline.get("live_free_text_left_out") or 0
    if not off and not live:
        return ""
    return (f"free-text probes left out: {off} offline (no judge's readable verdict in the run), {live} live (no "
            "admitted judge's verdict); a free-text fact counts only with a judge's verdict on both sides")  # fmt: skip


def ordering_agreement(
    live: pd.DataFrame, offline: pd.DataFrame, rate: str, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> dict[str, Any]:
    """Kendall's tau-b between the live and the offline ordering of the arms on ``rate`` (each arm's mean of its
    per-worker, resp. per-card, rates), over the arms both have, with a percentile bootstrap CI: each replicate
    resamples an arm's workers (live) and its cards (offline) with replacement, independently. As the
    human-against-automatic orderings (analysis.judging.arm_order_tau): fewer than 3 arms give no CI (tau over
    two arms is +1 or -1), an ordering with every arm tied gives no tau. ``live``/``offline``: per-unit rates
    with ``worker`` and ``arm`` columns."""
    from analysis.judging import tau_b

    def groups(frame: pd.DataFrame) -> dict[str, Any]:
        per_worker = frame.groupby(["arm", "worker"], sort=True)[rate].mean().dropna()
        return {str(a): g.to_numpy(dtype=float) for a, g in per_worker.groupby(level="arm", sort=True)}

    lg, og = groups(live), groups(offline)
    shared = [a for a in sorted(lg) if a in og]
    means = {a: {"live": float(lg[a].mean()), "offline": float(og[a].mean())} for a in shared}
    out: dict[str, Any] = {"rate": rate, "arms": len(shared), "tau": None, "ci_low": None, "ci_high": None,
                           "n_boot": n_boot, "means": means}  # fmt: skip
    if len(shared) < 2:
        out["note"] = "the orderings need at least 2 arms with both live and offline probes of this rate"
        return out
    x = np.array([[means[a]["live"] for a in shared]])
    y = np.array([[means[a]["offline"] for a in shared]])
    tau = float(tau_b(x, y)[0])
    out["tau"] = None if math.isnan(tau) else tau
    if len(shared) < 3 or n_boot <= 0:
        return out
    rng = np.random.default_rng(seed)

    def boot(g: dict[str, Any]) -> Any:
        return np.stack([g[a][rng.integers(0, len(g[a]), (n_boot, len(g[a])))].mean(axis=1) for a in shared], axis=1)

    taus = tau_b(boot(lg), boot(og))
    taus = taus[~np.isnan(taus)]
    if taus.size:
        tail = (1 - level) / 2 * 100
        out["ci_low"], out["ci_high"] = (float(v) for v in np.percentile(taus, [tail, 100 - tail]))
    return out


def _json_safe(x: Any) -> Any:
    """NaN (a correlation of a constant, a rate with no probe) as None, so the result is strict JSON."""
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def stage_table(result: Mapping[str, Any], mode: str = "snapshot") -> list[dict[str, Any]]:
    """Failed probes per arm and stage (rows for a table or CSV)."""
    section = result.get("modes", {}).get(mode)
    if not section:
        return []
    return [{"arm": a, **row["stages"], "failed": sum(row["stages"].values())} for a, row in section["by_arm"].items()]


def rate_rows(result: Mapping[str, Any], mode: str = "snapshot") -> list[dict[str, Any]]:
    """Per arm and per arm and session: each rate with its CI (flat rows for a table or CSV)."""
    section = result.get("modes", {}).get(mode)
    if not section:
        return []
    out = []
    for a, row in section["by_arm"].items():
        out.append({"arm": a, "session": "all", **_flat(row)})
    for row in section["by_arm_session"]:
        out.append({"arm": row["arm"], "session": row["session"], **_flat(row)})
    return out


def _flat(row: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for m in [*METRICS, "memory_gain"]:
        cell = row.get(m)
        flat[m] = cell["mean"] if cell else None
        flat[f"{m}_ci95"] = cell["ci95"] if cell else [None, None]
        flat[f"{m}_units"] = cell["n_units"] if cell else 0
    return flat


def scoring_text(result: Mapping[str, Any]) -> str:
    """How the probes were scored: by matching, by an admitted judge (with its admission figures), and how many
    free-text answers had no admitted judge's verdict (kept out of recall). ``result["judge"]``, when the caller
    adds it, names the judge: ``judge``, ``model``, ``prompt``, ``prompt_sha256``, ``admitted``, ``admission``
    (``items``, ``annotators``, ``winning_rate``, ``alpha_humans``, ``alpha_judge_vs_mean``), ``reasons``."""
    scoring = result.get("scoring") or {}
    judge = result.get("judge") or {}
    text = f"Scored by matching the card's values (exact or alias): {scoring.get('match', 0)}"
    name = ""
    if judge:
        name = (f"judge {judge.get('judge')} ({judge.get('model')}, {judge.get('prompt')} sha256 "
                f"{str(judge.get('prompt_sha256', ''))[:12]})")  # fmt: skip
    if scoring.get("judge"):
        a = judge.get("admission") or {}

        def f(x: Any) -> str:
            return "–" if x is None else f"{x:.2f}"

        text += (f"; by the {name}, admitted on {a.get('items')} probe answers of the judge sample with "
                 f"{a.get('annotators')} annotators (alt-test winning rate {f(a.get('winning_rate'))}, "
                 f"Krippendorff's alpha humans {f(a.get('alpha_humans'))}, judge vs their mean "
                 f"{f(a.get('alpha_judge_vs_mean'))}): {scoring['judge']}")  # fmt: skip
    if scoring.get("not_admitted"):
        why = f" ({name}: {'; '.join(judge.get('reasons') or [])})" if judge else " (no judge has scored them)"
        text += (f"; free-text answers not admitted, kept out of every rate: {scoring['not_admitted']} (no verdict "
                 f"of an admitted judge{why})")  # fmt: skip
    return text + "."


def to_markdown(result: Mapping[str, Any]) -> str:
    """The probe report as Markdown tables: per mode, the rates per arm and session (mean [95% CI]) and the
    failure stages per arm."""

    def cell(v: Any, ci: Any) -> str:
        if v is None:
            return "–"
        lo, hi = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)
        return f"{v:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")

    lines = ["## What the bot remembered (persona-card probes)", "",
             f"{result.get('n_probes', 0)} probes scored, {result.get('n_untold', 0)} left out "
             f"({result.get('untold_note', '')}). Rates per episode, averaged per worker, 95% CI over workers.",
             "", scoring_text(result)]  # fmt: skip
    family = result.get("primary_family") or {}
    if family.get("rates"):
        lines += ["", f"**Primary (pre-registered):** {family['description']}; {family.get('significant', 0)} of "
                  f"{family.get('tests', 0)} significant at alpha = {family.get('alpha', ALPHA)}.", "",
                  "| mode | rate | arms | difference | p | p (Holm, primary family) |", "|---|---|---|---|---|---|"]  # fmt: skip
        for mode in MODES:
            for e in (result.get("modes", {}).get(mode) or {}).get("pairwise", []):
                if e.get("primary"):
                    diff = e.get("mean_diff")
                    lines.append(f"| {mode} | {e['metric']} | {e['a']} vs {e['b']} | "
                                 f"{'–' if diff is None else f'{diff:+.2f}'} | {_pv(e.get('p'))} | "
                                 f"{_pv(e.get('p_holm_primary'))} |")  # fmt: skip
    rates = [*METRICS, "memory_gain"]
    for mode in MODES:
        if mode not in result.get("modes", {}):
            continue
        lines += ["", f"### {mode} probes", "", "| arm | session | " + " | ".join(rates) + " |",
                  "|---|---|" + "---|" * len(rates)]  # fmt: skip
        for row in rate_rows(result, mode):
            cells = [cell(row[m], row[f"{m}_ci95"]) for m in rates]
            lines.append(f"| {row['arm']} | {row['session']} | " + " | ".join(cells) + " |")
        lines += ["", "| arm | " + " | ".join(STAGES) + " | failed |", "|---|" + "---|" * (len(STAGES) + 1)]
        for s in stage_table(result, mode):
            lines.append(f"| {s['arm']} | " + " | ".join(str(s[k]) for k in STAGES) + f" | {s['failed']} |")
    notice = result.get("recall_vs_rating")
    if notice and notice.get("sessions"):
        r = notice["sessions"].get("pearson_r")
        lines += ["", f"Recall against {notice['metric']}: Pearson r = {'–' if r is None else f'{r:.2f}'} "
                  f"over {notice['sessions'].get('n', 0)} rated sessions."]  # fmt: skip
    lines += _offline_markdown(result)
    return "\n".join(lines) + "\n"


def side_by_side(result: Mapping[str, Any], mode: str) -> list[dict[str, Any]]:
    """Per arm with live or offline probes in ``mode``: each rate of :data:`COMPARED` live and offline (the
    cells of ``modes.<mode>.by_arm`` and ``offline.modes.<mode>.by_arm``: mean, ci95, ...; None where absent)."""
    live = ((result.get("modes") or {}).get(mode) or {}).get("by_arm") or {}
    off = (((result.get("offline") or {}).get("modes") or {}).get(mode) or {}).get("by_arm") or {}
    arms = [*live, *(a for a in off if a not in live)]
    return [
        {"arm": a, **{m: {"live": (live.get(a) or {}).get(m), "offline": (off.get(a) or {}).get(m)} for m in COMPARED}}
        for a in arms
    ]


def agreement_text(entry: Mapping[str, Any] | None) -> str:
    """Kendall's tau of the two orderings with its bootstrap CI, as one short text."""
    if not entry or entry.get("tau") is None:
        return "–" + (f" ({entry['note']})" if entry and entry.get("note") else "")
    ci = ""
    if entry.get("ci_low") is not None and entry.get("ci_high") is not None:
        ci = f" [{entry['ci_low']:.2f}, {entry['ci_high']:.2f}]"
    return f"{entry['tau']:.2f}{ci} ({entry['arms']} arms)"


def _cell_text(cell: Mapping[str, Any] | None) -> str:
    if not cell or cell.get("mean") is None:
        return "–"
    lo, hi = cell.get("ci95") or (None, None)
    return f"{cell['mean']:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")


def _offline_markdown(result: Mapping[str, Any]) -> list[str]:
    offline = result.get("offline")
    if not offline or not offline.get("modes"):
        return []
    lines = ["", "### Offline and live, side by side", "", f"Offline: {offline['source']}. Live rates are per "
             "episode with a 95% CI over workers; offline rates per card with a 95% CI over cards. Agreement: "
             "Kendall's tau-b of the two orderings of the arms [95% bootstrap CI]."]  # fmt: skip
    if left_out_text(offline):
        lines[-1] += f" {left_out_text(offline).capitalize()}."
    for run in offline.get("runs") or []:
        if run.get("stand_in_model"):
            lines += ["", f"**Offline run of {run['arm']} on a stand-in model: its rates measure nothing.**"]
    for mode in MODES:
        if mode not in offline["modes"]:
            continue
        head = " | ".join(f"{m} live | {m} offline" for m in COMPARED)
        lines += ["", f"#### {mode} probes", "", f"| arm | {head} |", "|---|" + "---|" * (2 * len(COMPARED))]
        for row in side_by_side(result, mode):
            cells = " | ".join(f"{_cell_text(row[m]['live'])} | {_cell_text(row[m]['offline'])}" for m in COMPARED)
            lines.append(f"| {row['arm']} | {cells} |")
        agreement = offline["modes"][mode].get("agreement") or {}
        if agreement:
            lines += ["", "Agreement of the orderings: " + "; ".join(
                f"{m} {agreement_text(agreement.get(m))}" for m in COMPARED) + "."]  # fmt: skip
    return lines


def to_html(result: Mapping[str, Any]) -> str:
    """The probe section of the HTML report: per mode the rates per arm and session (mean [95% CI]), the failure
    stages, and, with an offline card evaluation, the offline and live rates side by side with their agreement.
    Self-contained HTML (the caller puts it in its page)."""
    import html

    def esc(x: Any) -> str:
        return html.escape(str(x))

    def table(head: Sequence[str], rows: Iterable[Sequence[Any]], cls: str) -> str:
        th = "".join(f"<th>{esc(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'

    parts = ['<section id="probes"><h2>What the bot remembered (persona-card probes)</h2>',
             f"<p>{esc(result.get('n_probes', 0))} probes scored, {esc(result.get('n_untold', 0))} left out "
             f"({esc(result.get('untold_note', ''))}). Rates per episode, averaged per worker, 95% CI over workers.</p>"]  # fmt: skip
    family = result.get("primary_family") or {}
    if family.get("rates"):
        parts.append(f'<p class="probes-primary"><strong>Primary (pre-registered):</strong> {esc(family["description"])}; '
                     f"{esc(family.get('significant', 0))} of {esc(family.get('tests', 0))} significant at alpha = "
                     f"{esc(family.get('alpha'))}.</p>")  # fmt: skip
    rates = [*METRICS, "memory_gain"]
    for mode in MODES:
        if mode not in (result.get("modes") or {}):
            continue
        parts.append(f"<h3>{esc(mode)} probes</h3>")
        parts.append(table(["arm", "session", *rates], ([r["arm"], r["session"], *(_cell_text(
            {"mean": r[m], "ci95": r[f"{m}_ci95"]}) for m in rates)] for r in rate_rows(result, mode)),
            "probe-rates"))  # fmt: skip
        tests = [e for e in result["modes"][mode]["pairwise"] if e.get("p") is not None]
        if tests:
            parts.append(table(["rate", "arms", "p", "p (Holm, its rate)", "p (Holm, primary family)", "role"],
                               ([e["metric"], f"{e['a']} vs {e['b']}", _pv(e.get("p")), _pv(e.get("p_holm")),
                                 _pv(e.get("p_holm_primary")) if e.get("primary") else "–", e.get("role", "")]
                                for e in tests), "probe-tests"))  # fmt: skip
        parts.append(table(["arm", *STAGES, "failed"], ([s["arm"], *(s[k] for k in STAGES), s["failed"]]
                                                        for s in stage_table(result, mode)), "probe-stages"))  # fmt: skip
    offline = result.get("offline")
    if offline and offline.get("modes"):
        parts.append('<h3 id="probes-offline">Offline and live, side by side</h3>'
                     f"<p>Offline: {esc(offline['source'])}. Offline rates per card with a 95% CI over cards. "
                     "Agreement: Kendall's tau-b of the two orderings of the arms [95% bootstrap CI].</p>")  # fmt: skip
        if left_out_text(offline):
            parts.append(f'<p class="probe-left-out">{esc(left_out_text(offline).capitalize())}.</p>')
        for run in offline.get("runs") or []:
            if run.get("stand_in_model"):
                parts.append(f"<p><strong>Offline run of {esc(run['arm'])} on a stand-in model: its rates measure "
                             "nothing.</strong></p>")  # fmt: skip
        for mode in MODES:
            if mode not in offline["modes"]:
                continue
            head = ["arm", *(f"{m} {side}" for m in COMPARED for side in ("live", "offline"))]
            rows = ([r["arm"], *(_cell_text(r[m][side]) for m in COMPARED for side in ("live", "offline"))]
                    for r in side_by_side(result, mode))  # fmt: skip
            parts.append(f"<h4>{esc(mode)} probes</h4>" + table(head, rows, "probe-offline"))
            agreement = offline["modes"][mode].get("agreement") or {}
            if agreement:
                parts.append(table(["rate", "Kendall's tau [95% CI]"], ([m, agreement_text(agreement.get(m))]
                                                                          for m in COMPARED), "probe-agreement"))  # fmt: skip
    parts.append("</section>")
    return "\n".join(parts)


def _pv(p: Any) -> str:
    return "–" if p is None else ("< 0.001" if p < 0.001 else f"{p:.3f}")


_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no"}
_BOOL_COLUMNS = ("recalled", "stale", "deletion_honoured", "correct", "answerable_without_memory", "told", "dependent")


def read_probe_table(path: str | Path) -> pd.DataFrame:
    """A probe table from a file: memeval's ``probes`` export (CSV after its ``#`` header lines, or JSON lines
    after its ``{"header": ...}`` line) or any CSV with the columns of :func:`probe_frame`. Text booleans
    (``True``/``false``/``1``/empty) become booleans or None; a file that cannot be read is a
    :class:`RatingsError` naming it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RatingsError(f"{path} cannot be read: {exc}") from exc
    lines = text.splitlines()
    if p.suffix == ".jsonl":
        try:
            records = [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError as exc:
            raise RatingsError(f"{path} is not JSON lines: {exc}") from exc
        frame = pd.DataFrame([r for r in records if isinstance(r, dict) and "header" not in r])
    else:
        skip = 0
        first = re.match(r"\"?# (\d+) header lines", lines[0]) if lines else None  # a quoted cell, or not
        if first:
            skip = int(first.group(1))
        try:
            frame = pd.read_csv(io.StringIO(text), skiprows=skip, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise RatingsError(f"{path} is not a readable CSV file: {exc}") from exc
        for col in _BOOL_COLUMNS:
            if col in frame.columns:
                frame[col] = frame[col].map(_text_bool)
        if "stage" in frame.columns:
            frame["stage"] = frame["stage"].map(lambda s: s or None)
    if "unit" not in frame.columns and "episode" in frame.columns:
        frame["unit"] = frame["episode"].astype(str)
    return frame


def _text_bool(value: Any) -> bool | None:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text in ("", "none", "nan"):
        return None
    raise RatingsError(f"{value!r} is not a boolean (true, false, 1, 0 or empty)")
