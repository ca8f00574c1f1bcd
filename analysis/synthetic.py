"""Synthetic multi-session studies with known effects, for tests and the benchmark.

The generative model: score = 50 + worker leniency + arm effect + arm-specific per-session trend + noise,
clipped to [0, 100] and rounded like a slider. Each worker does ``episodes_per_worker`` episodes (with
different arms when ``within_worker``, one arm for all of them otherwise) plus, when ``qc_arm`` is set, one
session with a degraded bot that real workers rate ``qc_penalty`` points lower. A fraction of careless
workers rate at random, ignoring the bot, and should fail QC.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

DEFAULT_METRICS = ("coherence", "consistency", "engagingness", "humanness", "memorability")


def synthetic_ratings(
    n_sessions: int = 1000,
    *,
    arms: Sequence[str] = ("none", "accumulate", "update"),
    effects: Sequence[float] = (0.0, 5.0, 10.0),
    trends: Sequence[float] | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    sessions_per_episode: int = 5,
    episodes_per_worker: int = 2,
    within_worker: bool = True,
    qc_arm: str | None = "qc",
    qc_penalty: float = 35.0,
    careless_rate: float = 0.1,
    leniency_sd: float = 10.0,
    noise_sd: float = 12.0,
    seed: int = 0,
) -> pd.DataFrame:
    """A wide ratings table: columns ``worker, episode, arm, session`` and one per metric.

    ``n_sessions`` counts the rated sessions of the real arms (QC sessions come on top). ``trends`` is the
    per-session change of each arm's scores (default: the first arm loses 2 points per session).
    """
    if len(effects) != len(arms):
        raise ValueError("one effect per arm")
    if within_worker and episodes_per_worker > len(arms):
        raise ValueError("a within-worker design needs at least as many arms as episodes per worker")
    rng = np.random.default_rng(seed)
    trends = list(trends) if trends is not None else [-2.0] + [0.0] * (len(arms) - 1)
    n_episodes = max(1, n_sessions // sessions_per_episode)
    n_workers = max(1, -(-n_episodes // episodes_per_worker))
    worker_of_episode = np.arange(n_episodes) // episodes_per_worker
    slot = np.arange(n_episodes) % episodes_per_worker
    if within_worker:
        order = np.argsort(rng.random((n_workers, len(arms))), axis=1)  # a random arm order per worker
        arm_idx = order[worker_of_episode, slot]
    else:
        arm_idx = rng.integers(0, len(arms), n_workers)[worker_of_episode]
    careless = rng.random(n_workers) < careless_rate
    leniency = rng.normal(0, leniency_sd, n_workers)

    ep = np.repeat(np.arange(n_episodes), sessions_per_episode)
    sess = np.tile(np.arange(1, sessions_per_episode + 1), n_episodes)
    w = worker_of_episode[ep]
    a = arm_idx[ep]
    eff = np.asarray(effects, dtype=float)[a] + np.asarray(trends, dtype=float)[a] * (sess - 1)
    k = len(metrics)
    mu = 50 + leniency[w] + eff
    scores = mu[:, None] + rng.normal(0, noise_sd, (len(ep), k))
    frame = {
        "worker": np.char.add("w", w.astype(str)),
        "episode": np.char.add("e", ep.astype(str)),
        "arm": np.asarray(arms, dtype=object)[a],
        "session": sess,
    }
    if qc_arm is not None:
        qw = np.arange(n_workers)
        q_scores = (50 + leniency - qc_penalty)[:, None] + rng.normal(0, noise_sd, (n_workers, k))
        scores = np.vstack([scores, q_scores])
        frame = {
            "worker": np.concatenate([frame["worker"], np.char.add("w", qw.astype(str))]),
            "episode": np.concatenate([frame["episode"], np.char.add("q", qw.astype(str))]),
            "arm": np.concatenate([frame["arm"], np.full(n_workers, qc_arm, dtype=object)]),
            "session": np.concatenate([frame["session"], np.ones(n_workers, dtype=int)]),
        }
        w = np.concatenate([w, qw])
    rows_careless = careless[w]
    scores[rows_careless] = rng.uniform(0, 100, (int(rows_careless.sum()), k))
    df = pd.DataFrame(frame)
    for j, m in enumerate(metrics):
        df[m] = np.clip(np.round(scores[:, j]), 0, 100).astype(int)
    return df
