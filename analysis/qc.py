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

from analysis.data import ARM, WORKER
from analysis.spec import ALPHA
from analysis.standardize import worker_moments
from analysis.stats import mannwhitneyu


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
    """Test every worker of the canonical ``frame``; returns one :class:`WorkerQC` per worker, in first-seen order.

    Vectorised: workers with the same numbers of QC and other scores (and the same presence of ties) are tested
    in one scipy call, with the method chosen exactly as scipy's "auto" would choose it per worker (exact for
    small samples without ties, asymptotic otherwise), so batching changes no p-value.
    """
    qc_metrics = list(qc_metrics)
    workers = frame[WORKER].to_numpy()
    order = pd.unique(workers)
    codes = pd.Categorical(workers, categories=order).codes.astype(np.int64)
    n_workers = len(order)
    sd = worker_moments(frame, all_metrics)["sd"].reindex(order).to_numpy(dtype=float)
    # one entry per (row, QC metric) score that is present: worker, whether it is a QC-arm score, value
    values = frame[qc_metrics].to_numpy(dtype=float)
    is_qc = np.repeat((frame[ARM] == qc_arm).to_numpy(), len(qc_metrics))
    w = np.repeat(codes, len(qc_metrics))
    v = values.ravel()
    present = ~np.isnan(v)
    w, is_qc, v = w[present], is_qc[present], v[present]
    n1 = np.bincount(w[is_qc], minlength=n_workers)
    n2 = np.bincount(w[~is_qc], minlength=n_workers)
    # sort by worker, other scores before QC scores (stable: input order within each), then cut per worker
    sort = np.lexsort((is_qc, w))
    w, is_qc, v = w[sort], is_qc[sort], v[sort]
    start = np.searchsorted(w, np.arange(n_workers))
    lo = np.full(n_workers, np.inf)
    hi = np.full(n_workers, -np.inf)
    np.minimum.at(lo, w, v)
    np.maximum.at(hi, w, v)
    out: list[WorkerQC | None] = [None] * n_workers
    testable = np.zeros(n_workers, dtype=bool)
    for k in range(n_workers):
        worker = order[k]
        if not np.isfinite(sd[k]) or sd[k] == 0:
            out[k] = WorkerQC(worker, False, None, int(n1[k]), int(n2[k]), "zero variance")
        elif n1[k] == 0:
            out[k] = WorkerQC(worker, False, None, 0, int(n2[k]), f"no ratings of the QC arm {qc_arm!r}")
        elif n2[k] == 0:
            out[k] = WorkerQC(worker, False, None, int(n1[k]), 0, "no ratings of any other arm")
        elif lo[k] == hi[k]:
            out[k] = WorkerQC(worker, False, None, int(n1[k]), int(n2[k]), "identical scores on the QC metrics")
        else:
            testable[k] = True
    groups: dict[tuple[int, int], list[int]] = {}
    for i in np.flatnonzero(testable):
        groups.setdefault((int(n1[i]), int(n2[i])), []).append(int(i))
    for (a, b), members in groups.items():
        ks = np.asarray(members)
        other = v[start[ks][:, None] + np.arange(b)]  # each worker's other scores come first ...
        qc_vals = v[start[ks][:, None] + b + np.arange(a)]  # ... then its QC scores
        pooled = np.sort(np.hstack([qc_vals, other]), axis=1)
        ties = (np.diff(pooled, axis=1) == 0).any(axis=1)
        for has_ties in (False, True):
            rows = np.flatnonzero(ties == has_ties)
            if not rows.size:
                continue
            _, pvalues = mannwhitneyu(qc_vals[rows], other[rows], "less", _method(a, b, has_ties))
            for k, p in zip(ks[rows], np.atleast_1d(pvalues), strict=True):
                passed = bool(p < alpha)
                reason = "" if passed else f"QC arm not rated lower (p = {p:.3g} >= {alpha})"
                out[k] = WorkerQC(order[k], passed, float(p), a, b, reason)
    return [c for c in out if c is not None]


def best_attainable_p(n_qc: int, n_other: int) -> float:
    """The smallest p-value the per-worker QC test can give a worker with ``n_qc`` QC-arm scores and ``n_other``
    other scores: every QC score below every other one, no ties, the method chosen as :func:`quality_control`
    chooses it. A design where this is not below alpha lets nobody pass, however attentive (a design check)."""
    if n_qc < 1 or n_other < 1:
        return 1.0
    qc, other = np.arange(n_qc, dtype=float), np.arange(n_qc, n_qc + n_other, dtype=float)
    _, pvalue = mannwhitneyu(qc, other, "less", _method(n_qc, n_other, has_ties=False))
    return float(pvalue)


def _method(n_qc: int, n_other: int, has_ties: bool) -> str:
    """scipy's "auto" choice for one worker's test: exact for small samples without ties, else asymptotic."""
    return "asymptotic" if (n_qc > 8 and n_other > 8) or has_ties else "exact"
