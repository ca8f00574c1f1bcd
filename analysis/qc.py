"""Worker quality control with a deliberately degraded arm (Ji et al. 2022's "QualityControl" bot).

Per worker: one-sided Mann-Whitney U (``alternative="less"``) of the worker's scores for the QC arm against
the same worker's scores for every other arm, pooled over the chosen (positive) metrics. The worker passes
iff p < alpha (0.05). A worker whose scores have zero variance fails (Ji: SD 0 fails), and so does a worker
with no QC-arm scores or no other scores, because nothing shows they can tell a broken bot from a working
one. Rank tests are invariant to the per-worker linear z-transform, so raw scores are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from analysis.data import ARM, WORKER
from analysis.spec import ALPHA
from analysis.standardize import worker_moments


@dataclass(frozen=True)
class WorkerQC:
    worker: str
    passed: bool
    p: float | None
    n_qc: int
    n_other: int
    reason: str


def quality_control(
    frame: pd.DataFrame, *, qc_arm: str, qc_metrics: Sequence[str], all_metrics: Sequence[str], alpha: float = ALPHA
) -> list[WorkerQC]:
    """Test every worker of the canonical ``frame``; returns one :class:`WorkerQC` per worker, in first-seen order."""
    qc_metrics = list(qc_metrics)
    moments = worker_moments(frame, all_metrics)
    is_qc = (frame[ARM] == qc_arm).to_numpy()
    values = frame[qc_metrics].to_numpy(dtype=float)
    workers = frame[WORKER].to_numpy()
    order = pd.unique(workers)
    codes = pd.Categorical(workers, categories=order).codes
    sort = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[sort], np.arange(len(order) + 1))
    out: dict[int, WorkerQC] = {}
    # Workers are tested in batches of equal sample sizes (one vectorised scipy call per batch); the method
    # is chosen per batch exactly as scipy's "auto" would choose it per worker (exact for small samples
    # without ties, asymptotic otherwise), so batching does not change any p-value.
    batches: dict[tuple[int, int, bool], list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for k, worker in enumerate(order):
        rows = sort[bounds[k] : bounds[k + 1]]
        qc_vals = values[rows][is_qc[rows]].ravel()
        other_vals = values[rows][~is_qc[rows]].ravel()
        qc_vals = qc_vals[~np.isnan(qc_vals)]
        other_vals = other_vals[~np.isnan(other_vals)]
        n1, n2 = qc_vals.size, other_vals.size
        sd = moments["sd"].get(worker, np.nan)
        if not np.isfinite(sd) or sd == 0:
            out[k] = WorkerQC(worker, False, None, n1, n2, "zero variance")
        elif n1 == 0:
            out[k] = WorkerQC(worker, False, None, 0, n2, f"no ratings of the QC arm {qc_arm!r}")
        elif n2 == 0:
            out[k] = WorkerQC(worker, False, None, n1, 0, "no ratings of any other arm")
        else:
            pooled = np.sort(np.concatenate([qc_vals, other_vals]))
            if pooled[0] == pooled[-1]:
                out[k] = WorkerQC(worker, False, None, n1, n2, "identical scores on the QC metrics")
                continue
            ties = bool((np.diff(pooled) == 0).any())
            batches.setdefault((n1, n2, ties), []).append((k, qc_vals, other_vals))
    for (n1, n2, ties), members in batches.items():
        method = "asymptotic" if (n1 > 8 and n2 > 8) or ties else "exact"
        x = np.vstack([m[1] for m in members])
        y = np.vstack([m[2] for m in members])
        pvalues = np.atleast_1d(stats.mannwhitneyu(x, y, alternative="less", axis=1, method=method).pvalue)
        for (k, _, _), p in zip(members, pvalues, strict=True):
            passed = bool(p < alpha)
            reason = "" if passed else f"QC arm not rated lower (p = {p:.3g} >= {alpha})"
            out[k] = WorkerQC(order[k], passed, float(p), n1, n2, reason)
    return [out[k] for k in range(len(order))]
