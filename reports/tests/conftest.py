"""Ratings for the root ``study`` fixture, built directly in the database (the chat flow is tested elsewhere);
persona-card probes that vary between workers; an upload of a ratings file; a function run on another database
connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.urls import reverse

from chat.models import ChatSession, Episode, ProbeResult, Rating
from studies.models import Arm, Participant, Study

Scorer = Callable[[int, str, int, str], float]  # (worker number, arm name, session index, metric key) -> score


def add_ratings(
    study: Study,
    *,
    workers: int,
    arms: list[Arm] | None = None,
    scorer: Scorer | None = None,
    sessions: int | None = None,
    one_arm_per_worker: bool = False,
    seed: int = 0,
    first_worker: int = 0,
) -> None:
    """Every worker does one episode per arm (or one arm only, round robin), every session rated on every metric."""
    rng = np.random.default_rng(seed)
    arms = arms if arms is not None else list(study.arms.order_by("id"))
    metrics = list(study.metrics.order_by("order"))
    sessions = sessions or study.sessions_per_episode
    quality = {a.name: 20.0 * k for k, a in enumerate(arms)}

    def default(w: int, arm: str, s: int, m: str) -> float:
        return 40 + quality.get(arm, 0) + 3 * s + rng.normal(0, 8)

    scorer = scorer or default
    for w in range(first_worker, first_worker + workers):
        # named W000… by their pseudonym (what every report shows); the raw ID is another string, never shown
        p = Participant.objects.create(
            study=study, external_id=f"invite:raw-{w:03d}", pseudonym=f"W{w:03d}", source=Participant.Source.INVITE
        )
        mine = [arms[w % len(arms)]] if one_arm_per_worker else arms
        for i, arm in enumerate(mine, start=1):
            ep = Episode.objects.create(participant=p, arm=arm, index=i, status=Episode.Status.COMPLETED)
            for s in range(1, sessions + 1):
                cs = ChatSession.objects.create(
                    episode=ep, index=s, status=ChatSession.Status.DONE, simulated_start=study.session_start(s)
                )
                Rating.objects.bulk_create(
                    Rating(session=cs, metric=m, value=int(np.clip(round(scorer(w, arm.name, s, m.key)), 0, 100)))
                    for m in metrics
                )


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Reports are cached by study id and rating count; ids repeat across rolled-back tests."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def rated_study(study: Study) -> Study:
    """The root study with 8 workers who each rated both arms over both sessions; Full history scores higher."""
    add_ratings(study, workers=8)
    return study


@pytest.fixture
def researcher_client(client: Client, researcher: Any) -> Client:
    client.force_login(researcher)
    return client


WIDE = """worker,unit,arm,session,good,bad
w1,e1,A,1,80,10
w1,e1,A,2,70,20
w1,e2,B,1,40,50
w1,e2,B,2,30,60
w2,e3,A,1,90,5
w2,e3,A,2,85,15
w2,e4,B,1,20,70
w2,e4,B,2,35,55
"""


def upload(client: Client, study: Study, content: bytes | str, name: str = "ratings.csv", **fields: Any) -> Any:
    data = {
        "name": "External",
        "layout": "wide",
        "worker": "worker",
        "unit": "unit",
        "arm": "arm",
        "session": "",
        "metrics": "",
        "metric_column": "metric",
        "score_column": "score",
        "reverse": "",
        "qc_arm": "",
        "qc_metrics": "",
        **fields,
    }
    raw = content.encode() if isinstance(content, str) else content
    data["file"] = SimpleUploadedFile(name, raw, content_type="text/csv")
    return client.post(reverse("reports:import_ratings", args=[study.slug]), data)


def in_another_connection(fn: Any) -> Any:
    """Run ``fn`` in a thread, which has its own database connection (as a chat socket's job does)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - the test reports it
            out["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in out:
        raise out["error"]
    return out["value"]


def add_varied_probes(study: Study) -> None:
    """Per session, a snapshot probe of the city (Full history recalls it in 5 of 6 episodes, No memory in 1 of
    6) and, in session 2, one of the forgotten pet (honoured by No memory, by Full history in 2 of 6)."""
    sessions = ChatSession.objects.filter(episode__participant__study=study).select_related("episode__arm")
    for cs in sessions.order_by("episode__participant_id", "episode_id", "index"):
        good = cs.episode.arm.memory_system == "full_history"
        w = int(cs.episode.participant.pseudonym[1:])
        recalled = (w != 0) if good else (w == 0)
        ProbeResult.objects.create(
            session=cs, mode="snapshot", slot="city", kind="current", question="Which city do I live in?",
            answer="Porto" if recalled else "I don't know.", correct=recalled, recalled=recalled,
            stage="" if recalled else "extraction", told=True, item={"card": "c01"},
        )  # fmt: skip
        if cs.index == 2:
            honoured = (w < 2) if good else True
            ProbeResult.objects.create(
                session=cs, mode="snapshot", slot="pet", kind="forgotten", question="What pet do I have?",
                answer="" if honoured else "a cat", correct=honoured, deletion_honoured=honoured,
                stage="" if honoured else "update", told=True, item={"card": "c01"},
            )  # fmt: skip
