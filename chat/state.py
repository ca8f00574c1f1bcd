"""Compare-and-set writes of an episode's memory state.

Two kinds of job write ``Episode.memory_state``: the per-turn update after each reply
(``after_turn``) and the end-of-session update (``end_session``). Both read the state, spend seconds
in LLM calls, then write. Without a check, whichever finished last won, and a late per-turn update
computed from the state *before* the end-of-session update threw that update away (issue 8).

:func:`apply` reads the state with its ``state_version``, computes the update from it and writes only
if the version is unchanged; otherwise it computes again from the newer state. No update is lost,
whatever the order in which the jobs finish.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chat.models import Episode
from memory.base import Update

log = logging.getLogger(__name__)

MAX_ROUNDS = 3


class StateConflict(Exception):
    """The state kept changing under the update (every round lost the compare-and-set)."""


@dataclass
class Applied:
    """What :func:`apply` did: the update it wrote (or ``None`` if the state was already that),
    the version written and how many rounds it took (more than 1: another job wrote in between)."""

    update: Update
    version: int
    rounds: int
    written: bool


def read(episode_id: int) -> tuple[dict[str, Any], int]:
    """The episode's memory state and its version, read together."""
    state, version = Episode.objects.values_list("memory_state", "state_version").get(pk=episode_id)
    return dict(state or {}), int(version)


def write(episode_id: int, state: dict[str, Any], expected_version: int) -> bool:
    """Write ``state`` if the episode is still at ``expected_version`` (bumping it); ``False`` if
    another job wrote first."""
    return bool(
        Episode.objects.filter(pk=episode_id, state_version=expected_version).update(
            memory_state=state, state_version=expected_version + 1
        )
    )


def apply(
    episode_id: int,
    compute: Callable[[dict[str, Any]], Update],
    *,
    start: tuple[dict[str, Any], int] | None = None,
    max_rounds: int = MAX_ROUNDS,
) -> Applied:
    """Compute an update from the current state and write it with compare-and-set, recomputing from
    the newer state when another job wrote in between. ``start`` is a state and version the caller
    already read (the first round uses it instead of reading again). Raises :class:`StateConflict`
    after ``max_rounds`` lost rounds."""
    state, version = start if start is not None else read(episode_id)
    for rounds in range(1, max_rounds + 1):
        update = compute(state)
        if update.state == state:
            return Applied(update, version, rounds, written=False)
        if write(episode_id, update.state, version):
            return Applied(update, version + 1, rounds, written=True)
        log.info("memory state of episode %s changed during an update; recomputing", episode_id)
        state, version = read(episode_id)
    raise StateConflict(f"the memory state of episode {episode_id} kept changing; update not applied")
