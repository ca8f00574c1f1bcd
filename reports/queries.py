"""The only ORM code of the reports app: studies and imported datasets in, tidy DataFrames out.

The long frame has one row per single rating, with the columns of :data:`reports.imports.LONG_COLUMNS`. For a live study the
*unit* is the episode (one worker x one arm over all its sessions), and each rated session contributes one
row per metric with its session index; ``analysis.report.analyze`` groups the sessions by unit.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import replace
from itertools import islice
from typing import Any

import numpy as np
import pandas as pd
from django.db import connection, transaction
from django.db.models import Avg, Count, Max, QuerySet, Sum
from django.db.models.functions import Length

from analysis.probes import offline_rows
from analysis.spec import AnalysisSpec
from chat.models import ArmJob, AttentionResponse, ChatSession, Episode, Message, ProbeResult, Rating
from chat.quality import DEFAULT_ROW_FILTERS, SIGNAL_COLUMNS, WorkerQuality, signal_columns, study_quality
from memory import cards
from reports import probejudging
from reports.imports import IMPORT_COLUMNS, LONG_COLUMNS
from reports.models import ImportedDataset, ImportedRating, Preregistration
from reports.reporting import Source, source_spec
from studies.models import Participant, Study


def study_ratings_frame(study: Study, quality: list[WorkerQuality] | None = None) -> pd.DataFrame:
    """Every rating of ``study`` as a long frame: worker (the participant's pseudonym), unit (``e<episode id>``),
    arm (its name), session (1-based index), metric (its key) and score (raw 0-100, not reversed), then one
    boolean column per quality signal (:data:`chat.quality.SIGNAL_COLUMNS`), the exclusion filters' input."""
    rows = (
        Rating.objects.filter(session__episode__participant__study=study).exclude(
            session__episode__participant__source=Participant.Source.PREVIEW
        )  # a researcher's preview
    ).values_list(
        "session__episode__participant__pseudonym",
        "session__episode_id",
        "session__episode__arm__name",
        "session__index",
        "metric__key",
        "value",
        "session_id",
        "session__silent",
        "session__non_blind",
    )
    df = pd.DataFrame.from_records(list(rows), columns=[*LONG_COLUMNS, "_session_id", "_silent", "_non_blind"])
    by_worker, fast, unfinished = signal_columns(study_quality(study) if quality is None else quality)
    df["unfinished"] = df["unit"].isin(unfinished)
    for col in SIGNAL_COLUMNS:
        if col == "too_fast":
            df[col] = df["_session_id"].isin(fast)
        elif col == "silent_session":  # chat.sessions.is_silent, stored when the session ended and was rated
            df[col] = df["_silent"].astype(bool)
        elif col == "non_blind":  # ChatSession.non_blind, set by the blinding scan (judges/blinding.py)
            df[col] = df["_non_blind"].astype(bool)
        elif col != "unfinished":
            df[col] = df["worker"].isin({w for w, cols in by_worker.items() if cols.get(col)})
    latency = session_latencies(study)
    for col in LATENCY_COLUMNS:
        df[col] = df["_session_id"].map(latency[col]).astype(float) if len(latency) else float("nan")
    df = df.drop(columns=["_session_id", "_silent", "_non_blind"])
    df["unit"] = "e" + df["unit"].astype(str)
    df["score"] = df["score"].astype(float)
    return df


# Per rated session, the mean over its replies to the worker (chat/pacing.py measures them) in seconds from the
# worker's message: the model's first piece, the whole reply written (the true latency), the reply shown whole
# (after the study's pacing: what the worker waited). Empty for sessions without measured replies.
LATENCY_COLUMNS: dict[str, str] = {
    "latency_first_token_s": "first_token_ms",
    "latency_reply_s": "generated_ms",
    "latency_shown_s": "shown_ms",
}
# The covariate of a live study's analysis: the wait the worker saw, which is what could sway a rating (the true
# latency reaches the worker only through it; with pacing off the two are the same).
LATENCY_COVARIATE = "latency_shown_s"


def _replies(study: Study) -> QuerySet[Message]:
    """The bot's replies to the worker's messages that were written (the session's opener answers nothing)."""
    return Message.objects.filter(
        session__episode__participant__study=study,
        speaker=Message.Speaker.BOT,
        status=Message.Status.COMPLETE,
        reply_to__isnull=False,
    )


def session_latencies(study: Study) -> pd.DataFrame:
    """:data:`LATENCY_COLUMNS` per session id (seconds)."""
    rows = _replies(study).values("session_id").annotate(**{c: Avg(f) for c, f in LATENCY_COLUMNS.items()})
    frame = pd.DataFrame.from_records(list(rows), columns=["session_id", *LATENCY_COLUMNS]).set_index("session_id")
    return frame.astype(float) / 1000


def reply_latency(study: Study) -> dict[str, Any]:
    """The per-arm reply latency table (the report's ``reply_latency``): for each arm, over its replies to the
    worker, the median and 90th percentile of the first piece and of the whole reply from the model (the true
    latency) and of the reply shown (after pacing), in seconds, and how many replies were shown later than the
    study's pacing schedule allowed (an arm slower than the schedule: timing can tell it apart)."""
    min_s, cps, paced = float(study.pace_min_seconds), float(study.pace_chars_per_second), bool(study.pace_replies)
    rows = pd.DataFrame.from_records(
        list(
            _replies(study).values_list(
                "session__episode__arm__name", "first_token_ms", "generated_ms", "shown_ms", Length("text")
            )
        ),
        columns=["arm", "first", "reply", "shown", "chars"],
    )
    arms = []
    for arm in study.arms.order_by("id").values_list("name", flat=True):
        r = rows[(rows["arm"] == arm) & rows["shown"].notna()]
        entry: dict[str, Any] = {"arm": arm, "replies": int(len(r))}
        for key in ("first", "reply", "shown"):
            values = r[key].dropna().to_numpy(dtype=float) / 1000
            entry[f"{key}_median_s"] = float(np.median(values)) if len(values) else None
            entry[f"{key}_p90_s"] = float(np.percentile(values, 90)) if len(values) else None
        due = min_s + r["chars"].to_numpy(dtype=float) / cps
        late = r["shown"].to_numpy(dtype=float) / 1000 > due + PACING_TOLERANCE_S
        entry["later_than_schedule"] = int(late.sum()) if paced else None
        arms.append(entry)
    return {
        "pacing": {"on": paced, "min_seconds": min_s, "chars_per_second": cps},
        "arms": arms,
        "note": "replies to the worker's messages (not the session openers); seconds from the worker's message "
        "(or Retry): first piece and whole reply from the model (the true latency), and the reply shown whole "
        "(after pacing: what the worker waited)",
    }


# A reply shown within this of its schedule kept to it (the schedule's last frame is released in steps).
PACING_TOLERANCE_S = 0.5


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
        # the quality columns change without a new rating: an episode finished or abandoned, a message sent
        list(Episode.objects.filter(participant__study=study).values_list("status").annotate(n=Count("id"))),
        Message.objects.filter(session__episode__participant__study=study).aggregate(m=Max("id"))["m"],
        AttentionResponse.objects.filter(session__episode__participant__study=study).count(),
        study.pilot,
        list(
            ArmJob.objects.filter(arm__study=study, kind__in=[ArmJob.Kind.EVALUATION, ArmJob.Kind.CARDS]).values_list(
                "id", "job__status"
            )
        ),
        ProbeResult.objects.filter(session__episode__participant__study=study).aggregate(n=Count("id"), m=Max("id")),
        # the blinding scan marks sessions non-blind without a new rating
        ChatSession.objects.filter(episode__participant__study=study, non_blind=True).count(),
        probejudging.version(study),  # a judge's verdicts on probe answers, the judge sample's labels
    )
    raw = repr((agg["n"], agg["last"], agg["total"], str(agg["latest"]), settings_part))
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


def dataset_ratings_frame(dataset: ImportedDataset) -> pd.DataFrame:
    """An imported dataset's ratings as the same long frame as :func:`study_ratings_frame`, plus ``row`` (the
    rated conversation's position in the uploaded file)."""
    rows = dataset.ratings.order_by("row", "id").values_list(*IMPORT_COLUMNS)
    df = pd.DataFrame.from_records(list(rows), columns=IMPORT_COLUMNS)
    df["score"] = df["score"].astype(float)
    return df


def datasets_for_study(study: Study) -> list[ImportedDataset]:
    return list(study.imported_datasets.filter(complete=True).order_by("-created_at", "-id"))


# Ratings are written IMPORT_CHUNK_ROWS at a time, each chunk in its own transaction, so an import never holds
# the database's write lock for longer than one chunk: on SQLite (one writer at a time) a worker's chat
# message waits at most that long (its busy timeout is 5 s) instead of failing with "database is locked"
# while a large file is imported. On SQLite the import also pauses between chunks for longer than SQLite's
# longest busy-wait step (100 ms), so a waiting writer gets the lock instead of the next chunk.
IMPORT_CHUNK_ROWS = 5000
IMPORT_PAUSE_SECONDS = 0.12


def _between_chunks() -> None:
    if connection.vendor == "sqlite":
        time.sleep(IMPORT_PAUSE_SECONDS)


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
    """Store an already validated long frame (:data:`IMPORT_COLUMNS`, no missing scores) as a dataset.

    The ratings are written in chunks of :data:`IMPORT_CHUNK_ROWS`, one transaction each; the dataset is
    marked ``complete`` after the last one (until then it is listed and analysed nowhere), and deleted
    with its ratings if any chunk fails."""
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
        complete=False,
        uploaded_by=uploaded_by if getattr(uploaded_by, "is_authenticated", False) else None,
    )
    rows = long[IMPORT_COLUMNS].itertuples(index=False, name=None)
    try:
        while chunk := list(islice(rows, IMPORT_CHUNK_ROWS)):
            with transaction.atomic():
                ImportedRating.objects.bulk_create(
                    [
                        ImportedRating(
                            dataset=dataset, row=r, worker=w, unit=u, arm=a, session=s, metric=m, score=float(v)
                        )
                        for r, w, u, a, s, m, v in chunk
                    ],
                    batch_size=1000,
                )
            _between_chunks()
        dataset.complete = True
        dataset.save(update_fields=["complete"])
    except BaseException:
        dataset.delete()  # nothing half-imported stays behind (the ratings cascade)
        raise
    return dataset


def delete_dataset(dataset: ImportedDataset) -> None:
    dataset.delete()


def latest_preregistration(study: Study) -> Preregistration | None:
    """The study's newest pre-registration, which its analysis is checked against."""
    return study.preregistrations.order_by("-created_at", "-id").first()


def preregistrations_for_study(study: Study) -> list[Preregistration]:
    return list(study.preregistrations.order_by("-created_at", "-id"))


def study_spec(study: Study) -> AnalysisSpec | None:
    """How a live study is analysed: its metrics, reversed metrics and QC arm, and the default row filters
    (:data:`chat.quality.DEFAULT_ROW_FILTERS`: silent and non-blind sessions' ratings) (None without metrics)."""
    metrics, reverse = study_metrics(study)
    qc_arm = study_qc_arm(study)
    # Ji et al.'s QC uses the positive metrics only; reversed ones would invert the test's direction.
    qc_metrics = [m for m in metrics if m not in reverse] if qc_arm else []
    spec = source_spec(metrics, reverse=reverse, has_session=True, qc_arm=qc_arm, qc_metrics=qc_metrics)
    if spec is None:
        return None
    return replace(spec, exclude_rows=DEFAULT_ROW_FILTERS, covariates=(LATENCY_COVARIATE,))


def latest_finished(study: Study, kind: str) -> dict[int, ArmJob]:
    """The newest finished arm job of ``kind`` of each arm of ``study``, by arm id, in arm order."""
    latest: dict[int, ArmJob] = {}
    for job in (
        ArmJob.objects.filter(arm__study=study, kind=kind, job__status=ArmJob.Status.DONE)
        .select_related("arm", "job")
        .order_by("arm_id", "-job__finished_at", "-id")
    ):
        latest.setdefault(job.arm_id, job)
    return latest


def automatic_scores(study: Study) -> list[dict[str, Any]]:
    """The newest finished automatic evaluation of each arm (``reports.reporting.AUTOMATIC_COLUMNS``), in arm order."""
    latest = latest_finished(study, ArmJob.Kind.EVALUATION)
    rows = []
    for job in latest.values():
        result = job.result or {}
        overall = result.get("overall") or {}
        rows.append(
            {
                "arm": job.arm.name,
                "memory_system": job.arm.memory_system,
                "dataset": result.get("dataset", ""),
                "backend": job.config.get("backend", ""),
                "model": result.get("model") or job.config.get("model", ""),
                "questions": result.get("questions", 0),
                "f1": overall.get("f1"),
                "judge": overall.get("judge"),
                "judge_stand_in": bool((result.get("judge") or {}).get("stand_in")),
                "stand_in_model": bool(result.get("stand_in_model")),
                "gold_note": result.get("gold_note", ""),
                "finished_at": job.finished_at.isoformat() if job.finished_at else "",
            }
        )
    return rows


def study_source(study: Study) -> Source:
    """A live study's ratings and how to analyse them, with its pilot mark, automatic scores and reply latency."""
    judging = probejudging.judging(study)
    return Source(
        title=study.name,
        slug=study.slug,
        frame=study_ratings_frame(study),
        spec=study_spec(study),
        pilot=study.pilot,
        automatic=automatic_scores(study),
        latency=reply_latency(study),
        probes=study_probe_rows(study, judging),
        probe_judge={k: v for k, v in judging.items() if k != "verdicts"} if judging else None,
        **offline_card_probes(study),
    )


def offline_card_probes(study: Study) -> dict[str, list[dict[str, Any]]]:
    """The newest finished offline card evaluation of each arm (chat/cardjobs.py): ``offline`` (its probes as
    rows for analysis.probes) and ``offline_runs`` (one line per run, with whether it ran on the arm, card bank
    and event script the study has now). Empty lists for a study without persona cards."""
    if not study.persona_cards:
        return {"offline": [], "offline_runs": []}
    latest = latest_finished(study, ArmJob.Kind.CARDS)
    try:
        bank_sha, script = study.persona_bank().sha256, study.persona_script().as_dict()
    except cards.CardError:
        bank_sha, script = "", {}
    rows: list[dict[str, Any]] = []
    runs = []
    for job in latest.values():
        result = job.result or {}
        rows += offline_rows(result.get("items") or [], job.arm.name)
        runs.append(
            {
                "arm": job.arm.name,
                "backend": result.get("backend", ""),
                "model": result.get("model", ""),
                "stand_in_model": bool(result.get("stand_in_model")),
                "cards": result.get("cards", 0),
                "probes": result.get("probes", 0),
                "bank_sha256": (result.get("bank") or {}).get("sha256", ""),
                "current": job.is_current(job.arm)
                and (result.get("bank") or {}).get("sha256") == bank_sha
                and result.get("script") == script,
                "finished_at": job.finished_at.isoformat() if job.finished_at else "",
            }
        )
    return {"offline": rows, "offline_runs": runs}


def study_probe_rows(study: Study, judging: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every scored persona-card probe of ``study`` as rows for ``analysis.probes`` (worker, unit ``e<episode>``,
    arm, session, mode, kind, the scores, stage, the necessity flag, whether the worker told the fact, and
    ``scored_by``). A probe of a free-text fact (current or updated) is scored by the verdict of the admitted judge
    in ``judging`` (reports/probejudging.py): ``scored_by`` "judge"; without one its scores are empty and it says
    "not admitted" (kept out of every rate). The other probes are scored by matching (``scored_by`` "match")."""
    rows = ProbeResult.objects.filter(session__episode__participant__study=study).values_list(
        "session__episode__participant__pseudonym", "session__episode_id", "session__episode__arm__name",
        "session__index", "mode", "kind", "recalled", "stale", "deletion_honoured", "correct", "stage",
        "answerable_without_memory", "told", "item__dependent", "pk", "item__free_text", "item__stale_mentioned",
    )  # fmt: skip
    keys = ("worker", "unit", "arm", "session", "mode", "kind", "recalled", "stale", "deletion_honoured", "correct",
            "stage", "answerable_without_memory", "told", "dependent", "_pk", "_free_text", "_stale_mentioned")  # fmt: skip
    verdicts = (judging or {}).get("verdicts", {}) if (judging or {}).get("admitted") else {}
    out = []
    for row in rows.order_by("session__episode_id", "session__index", "mode", "id"):
        item = dict(zip(keys, row, strict=True))
        item["unit"] = f"e{item['unit']}"
        item["stage"] = item["stage"] or None
        item["dependent"] = bool(item["dependent"])
        item["scored_by"] = "match"
        if item.pop("_free_text") and item["kind"] in ("current", "updated"):
            probejudging.judged_scores(item, verdicts.get(item["_pk"]), bool(item["_stale_mentioned"]))
        item.pop("_pk"), item.pop("_stale_mentioned")
        out.append(item)
    return out


def dataset_source(dataset: ImportedDataset) -> Source:
    """An imported dataset's ratings and the analysis settings chosen at import."""
    spec = source_spec(
        list(dataset.metrics),
        reverse=list(dataset.reverse_metrics),
        has_session=dataset.has_session,
        qc_arm=dataset.qc_arm or None,
        qc_metrics=list(dataset.qc_metrics),
    )
    return Source(
        title=f"{dataset.study.name}: {dataset.name}",
        slug=f"{dataset.study.slug}-import-{dataset.pk}",
        frame=dataset_ratings_frame(dataset),
        spec=spec,
    )
