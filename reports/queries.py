"""The only ORM code of the reports app: studies and imported datasets in, tidy DataFrames out.

The long frame has one row per single rating, with the columns of :data:`LONG_COLUMNS`. For a live study the
*unit* is the episode (one worker x one arm over all its sessions), and each rated session contributes one
row per metric with its session index; ``analysis.report.analyze`` groups the sessions by unit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import pandas as pd
from django.db import transaction
from django.db.models import Count, Max, Sum

from chat.models import ChatSession, Episode, Rating
from reports.models import ImportedDataset, ImportedRating
from studies.models import Study

LONG_COLUMNS = ["worker", "unit", "arm", "session", "metric", "score"]


def study_ratings_frame(study: Study) -> pd.DataFrame:
    """Every rating of ``study`` as a long frame: worker (the participant's external id), unit (``e<episode id>``),
    arm (its name), session (1-based index), metric (its key) and score (raw 0-100, not reversed)."""
    rows = Rating.objects.filter(session__episode__participant__study=study).values_list(
        "session__episode__participant__external_id",
        "session__episode_id",
        "session__episode__arm__name",
        "session__index",
        "metric__key",
        "value",
    )
    df = pd.DataFrame.from_records(list(rows), columns=LONG_COLUMNS)
    df["unit"] = "e" + df["unit"].astype(str)
    df["score"] = df["score"].astype(float)
    return df


def study_metrics(study: Study) -> tuple[list[str], list[str]]:
    """The study's metric keys in display order, and those marked reversed."""
    metrics = list(study.metrics.order_by("order", "id").values_list("key", "reversed"))
    return [k for k, _ in metrics], [k for k, r in metrics if r]


def study_qc_arm(study: Study) -> str | None:
    """The name of the study's quality-control arm (the first one if several are marked), or None."""
    return study.arms.filter(is_qc=True).order_by("id").values_list("name", flat=True).first()


def study_progress(study: Study) -> list[dict[str, Any]]:
    """Per arm: episodes by status and rated sessions, in arm order (arms without episodes included)."""
    out: dict[int, dict[str, Any]] = {}
    for arm in study.arms.order_by("id"):
        out[arm.pk] = {
            "arm": arm.name,
            "is_qc": arm.is_qc,
            "arm_active": arm.active,
            "episodes": 0,
            **{s.value: 0 for s in Episode.Status},
            "rated_sessions": 0,
        }
    episodes = Episode.objects.filter(participant__study=study).values("arm_id", "status").annotate(n=Count("id"))
    for row in episodes:
        entry = out[row["arm_id"]]
        entry[row["status"]] += row["n"]
        entry["episodes"] += row["n"]
    rated = (
        ChatSession.objects.filter(episode__participant__study=study, status=ChatSession.Status.DONE)
        .values("episode__arm_id")
        .annotate(n=Count("id"))
    )
    for row in rated:
        out[row["episode__arm_id"]]["rated_sessions"] = row["n"]
    return list(out.values())


def study_data_version(study: Study) -> str:
    """A short key that changes whenever the study's ratings or analysis settings change (for caching)."""
    agg = Rating.objects.filter(session__episode__participant__study=study).aggregate(
        n=Count("id"), last=Max("id"), latest=Max("created_at"), total=Sum("value")
    )
    settings_part = (
        list(study.metrics.order_by("id").values_list("key", "reversed")),
        list(study.arms.order_by("id").values_list("name", "is_qc")),
    )
    raw = repr((agg["n"], agg["last"], agg["total"], str(agg["latest"]), settings_part))
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


def dataset_ratings_frame(dataset: ImportedDataset) -> pd.DataFrame:
    """An imported dataset's ratings as the same long frame as :func:`study_ratings_frame`, plus ``row`` (the
    rated conversation's position in the uploaded file)."""
    columns = ["row", *LONG_COLUMNS]
    rows = dataset.ratings.order_by("row", "id").values_list(*columns)
    df = pd.DataFrame.from_records(list(rows), columns=columns)
    df["score"] = df["score"].astype(float)
    return df


def datasets_for_study(study: Study) -> list[ImportedDataset]:
    return list(study.imported_datasets.order_by("-created_at", "-id"))


@transaction.atomic
def create_imported_dataset(
    study: Study,
    *,
    name: str,
    long: pd.DataFrame,
    metrics: list[str],
    reverse_metrics: Iterable[str],
    has_session: bool,
    qc_arm: str,
    qc_metrics: Iterable[str],
    mapping: dict[str, Any],
    source_filename: str,
    uploaded_by: Any,
) -> ImportedDataset:
    """Store an already validated long frame (``row`` + :data:`LONG_COLUMNS`, no missing scores) as a dataset."""
    dataset = ImportedDataset.objects.create(
        study=study,
        name=name,
        source_filename=source_filename[:255],
        metrics=list(metrics),
        reverse_metrics=list(reverse_metrics),
        has_session=has_session,
        qc_arm=qc_arm,
        qc_metrics=list(qc_metrics),
        mapping=mapping,
        n_ratings=len(long),
        uploaded_by=uploaded_by if getattr(uploaded_by, "is_authenticated", False) else None,
    )
    ImportedRating.objects.bulk_create(
        (
            ImportedRating(dataset=dataset, row=r, worker=w, unit=u, arm=a, session=s, metric=m, score=float(v))
            for r, w, u, a, s, m, v in long[["row", *LONG_COLUMNS]].itertuples(index=False, name=None)
        ),
        batch_size=2000,
    )
    return dataset


def delete_dataset(dataset: ImportedDataset) -> None:
    dataset.delete()
