"""Synthetic multi-session studies with known effects, for tests, the benchmark, calibration and planning.

:func:`synthetic_ratings` is the simple model the tests and the report benchmark use. :func:`simulate_study`
is the planning model (a :class:`StudyDesign` and its :class:`VarianceComponents`, effects in latent SD units)
that ``python -m analysis calibrate`` and the study planner simulate.

The generative model: score = 50 + worker leniency + arm effect + arm-specific per-session trend + noise,
clipped to [0, 100] and rounded like a slider. Each worker does ``episodes_per_worker`` episodes (with
different arms when ``within_worker``, one arm for all of them otherwise) plus, when ``qc_arm`` is set, one
session with a degraded bot that real workers rate ``qc_penalty`` points lower. A fraction of careless
workers rate at random, ignoring the bot, and should fail QC.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

DEFAULT_METRICS = ("coherence", "consistency", "engagingness", "humanness", "memorability")
QC_ARM = "qc"


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


# ---------------------------------------------------------------------------------------------- planning model
DesignKind = Literal["within", "nested", "mixed"]


@dataclass(frozen=True)
class VarianceComponents:
    """The generative model of one rating on the 0-100 slider (all SDs in slider points).

    x = clip(round(center + b_w + s_w * (effect_a + e_episode + e_session + e_rating)), 0, 100), with the
    worker's leniency b_w ~ N(0, worker_sd), the worker's use of the slider's range s_w = exp(N(0, scale_sd)),
    and episode, session and rating noise N(0, episode_sd), N(0, session_sd), N(0, residual_sd). A careless
    worker (probability ``careless_rate``) moves every slider uniformly at random.

    Effects are given in *latent SD* units: multiples of :attr:`latent_sd`, the SD of one rating around its
    arm's mean for a typical worker (s_w = 1), sqrt(episode_sd^2 + session_sd^2 + residual_sd^2).
    """

    # Defaults: the estimates from Ji et al. (2022) free-topic run 1 (analysis.planning.estimate_components on
    # shared/data/ji2022-dialogue-eval; docs/analysis.md, "Planning"), whose conversations had one session:
    # their conversation SD (14.5) is split equally between episode and session here, an assumption. The
    # careless rate is the 5% of the issue's simulation (Ji et al.'s QC failed 30% of their workers).
    worker_sd: float = 11.5
    scale_sd: float = 0.2
    episode_sd: float = 10.0
    session_sd: float = 10.0
    residual_sd: float = 22.0
    center: float = 40.0
    careless_rate: float = 0.05
    qc_effect: float = -0.8  # the QC arm's effect, latent SD (Ji et al.: -0.81)

    def __post_init__(self) -> None:
        for name in ("worker_sd", "scale_sd", "episode_sd", "session_sd", "residual_sd"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0 <= self.careless_rate <= 1:
            raise ValueError("careless_rate must lie in [0, 1]")
        if self.latent_sd <= 0:
            raise ValueError("episode_sd, session_sd and residual_sd cannot all be 0")

    @property
    def latent_sd(self) -> float:
        return math.sqrt(self.episode_sd**2 + self.session_sd**2 + self.residual_sd**2)


@dataclass(frozen=True)
class StudyDesign:
    """A study design to simulate: ``kind`` "within" (each worker's episodes have different arms), "nested" (all
    of a worker's episodes have one arm) or "mixed" (half the workers each way); plus a QC episode of
    ``qc_sessions`` sessions per worker when ``qc``."""

    workers: int = 60
    arms: int = 4
    episodes_per_worker: int = 2
    sessions: int = 5
    metrics: int = 5
    kind: DesignKind = "within"
    qc: bool = True
    qc_sessions: int = 1

    def __post_init__(self) -> None:
        if self.workers < 2 or self.arms < 2 or self.sessions < 1 or self.metrics < 1 or self.episodes_per_worker < 1:
            raise ValueError("a design needs at least 2 workers, 2 arms, 1 episode, 1 session and 1 metric")
        if self.kind not in ("within", "nested", "mixed"):
            raise ValueError(f"unknown design kind {self.kind!r}")
        if self.kind != "nested" and self.episodes_per_worker > self.arms:
            raise ValueError("a within-worker design needs at least as many arms as episodes per worker")
        if self.kind != "nested" and self.episodes_per_worker < 2:
            raise ValueError(f"a {self.kind} design needs at least 2 episodes per worker")

    @property
    def arm_names(self) -> list[str]:
        return [f"arm{k + 1}" for k in range(self.arms)]

    @property
    def metric_names(self) -> list[str]:
        return list(DEFAULT_METRICS[: self.metrics]) + [
            f"metric{k + 1}" for k in range(len(DEFAULT_METRICS), self.metrics)
        ]


def simulate_study(
    design: StudyDesign,
    components: VarianceComponents,
    effects: Sequence[float] | None = None,
    *,
    rng: np.random.Generator | int = 0,
    prefix: str = "",
) -> pd.DataFrame:
    """One simulated study as a wide table: ``worker, episode, arm, session`` and one column per metric.

    ``effects`` are the arms' true effects in latent SD units (default: all 0, the null). Arms are assigned as
    the platform does within a worker (different arms, balanced over the study); ``prefix`` is put before
    worker and episode ids (to stack several studies in one table).
    """
    rng = np.random.default_rng(rng)
    k = design.arms
    eff = np.zeros(k) if effects is None else np.asarray(effects, dtype=float)
    if eff.shape != (k,):
        raise ValueError(f"one effect per arm ({k}), got {len(eff)}")
    n_w, n_e, n_s, n_m = design.workers, design.episodes_per_worker, design.sessions, design.metrics
    sd = components.latent_sd
    # arms per episode: a random, balanced start arm per worker, then different arms (within) or the same (nested)
    start = rng.permutation(np.arange(n_w) % k)
    if design.kind == "within":
        within = np.ones(n_w, dtype=bool)
    elif design.kind == "nested":
        within = np.zeros(n_w, dtype=bool)
    else:
        within = rng.permutation(np.arange(n_w) % 2 == 0)
    offsets = np.stack([rng.permutation(np.arange(1, k))[: n_e - 1] for _ in range(n_w)]) if n_e > 1 else None
    arm = np.repeat(start[:, None], n_e, axis=1)
    if offsets is not None:
        arm[:, 1:] = np.where(within[:, None], (start[:, None] + offsets) % k, start[:, None])
    leniency = rng.normal(0, components.worker_sd, n_w)
    scale = np.exp(rng.normal(0, components.scale_sd, n_w))
    careless = rng.random(n_w) < components.careless_rate

    # real episodes: (worker, episode, session, metric)
    ep_noise = rng.normal(0, components.episode_sd, (n_w, n_e, 1, 1))
    s_noise = rng.normal(0, components.session_sd, (n_w, n_e, n_s, 1))
    r_noise = rng.normal(0, components.residual_sd, (n_w, n_e, n_s, n_m))
    latent = (eff[arm] * sd)[:, :, None, None] + ep_noise + s_noise + r_noise
    blocks = [latent.reshape(n_w, n_e * n_s, n_m)]
    arms = [arm.repeat(n_s, axis=1)]
    episodes = [np.repeat(np.arange(n_e), n_s)[None, :].repeat(n_w, axis=0)]
    sessions = [np.tile(np.arange(1, n_s + 1), n_e)[None, :].repeat(n_w, axis=0)]
    if design.qc:
        q = design.qc_sessions
        qc_latent = (
            components.qc_effect * sd
            + rng.normal(0, components.episode_sd, (n_w, 1, 1))
            + rng.normal(0, components.session_sd, (n_w, q, 1))
            + rng.normal(0, components.residual_sd, (n_w, q, n_m))
        )
        blocks.append(qc_latent)
        arms.append(np.full((n_w, q), k))
        episodes.append(np.full((n_w, q), n_e))
        sessions.append(np.tile(np.arange(1, q + 1), (n_w, 1)))
    latent_all = np.concatenate(blocks, axis=1)  # workers x rows x metrics
    x = components.center + leniency[:, None, None] + scale[:, None, None] * latent_all
    x[careless] = rng.uniform(0, 100, x[careless].shape)
    x = np.clip(np.round(x), 0, 100)
    rows = x.shape[1]
    arm_names = np.array([*design.arm_names, QC_ARM], dtype=object)
    worker_ids = np.char.add(f"{prefix}w", np.arange(n_w).astype(str))
    ep = np.concatenate(episodes, axis=1)
    frame = pd.DataFrame(
        {
            "worker": np.repeat(worker_ids, rows),
            "episode": np.char.add(np.repeat(worker_ids, rows), np.char.add("e", ep.ravel().astype(str))),
            "arm": arm_names[np.concatenate(arms, axis=1).ravel()],
            "session": np.concatenate(sessions, axis=1).ravel(),
        }
    )
    values = x.reshape(n_w * rows, n_m)
    for j, m in enumerate(design.metric_names):
        frame[m] = values[:, j]
    return frame
