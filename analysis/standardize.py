"""Per-worker standardization, exactly as Ji et al. (2022) and Bae et al. (2022) do it.

For each worker, every score that worker gave (all metrics, all arms including the QC arm, all units and
sessions, after reversing the negative metrics) is pooled into one vector; z = (x - mean) / (sd + 1e-6)
with the sample SD (ddof = 1). It is *not* per metric and not per unit. A worker with a single score has
no SD and gets NaN z-scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data import WORKER

EPSILON = 1e-6


def zscore_per_worker(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Return a frame (same index as ``frame``) of per-worker z-scores, one column per metric."""
    metrics = list(metrics)
    return standardize_values(frame[metrics], frame[WORKER], worker_moments(frame, metrics))


def standardize_values(values: pd.DataFrame, workers: pd.Series, moments: pd.DataFrame) -> pd.DataFrame:
    """Any scores of the workers in ``workers`` (e.g. a unit's mean raw scores) on their workers' z scale.

    The z-transform is linear, so the z of a unit's raw mean equals the mean of the unit's z-scores; computing
    it from the raw mean keeps units with equal raw means exactly equal (no rounding error of a sum of z-scores
    can break a tie in a rank test).
    """
    mean = workers.map(moments["mean"]).to_numpy(dtype=float)[:, None]
    sd = workers.map(moments["sd"]).to_numpy(dtype=float)[:, None]
    return pd.DataFrame(
        (values.to_numpy(dtype=float) - mean) / (sd + EPSILON), index=values.index, columns=values.columns
    )


def worker_moments(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Per worker: number of scores, mean and SD (ddof=1) of all pooled scores."""
    values = frame[list(metrics)].to_numpy(dtype=float)
    pooled = pd.DataFrame({WORKER: np.repeat(frame[WORKER].to_numpy(), values.shape[1]), "v": values.ravel()})
    g = pooled.dropna().groupby(WORKER)["v"]
    return pd.DataFrame({"n": g.size(), "mean": g.mean(), "sd": g.std(ddof=1)})
