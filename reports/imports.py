"""Reading an external ratings CSV with a column mapping into the long frame that reports.queries stores.

Pure (no ORM): validation is the analysis library's own (:func:`analysis.data.canonical_frame`), so an
imported table is accepted exactly when the CLI would accept it, plus the checks that only matter for storing
it (duplicate rows, QC settings that name arms or metrics the table does not have).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import IO, Any

import pandas as pd

from analysis.data import ARM, SESSION, UNIT, WORKER, RatingsError, canonical_frame

LONG_COLUMNS = ["row", "worker", "unit", "arm", "session", "metric", "score"]


@dataclass
class Mapping:
    """Which CSV columns hold what. ``layout`` is ``"wide"`` (one column per metric, named in ``metrics``) or
    ``"long"`` (a metric-name column and a score column; ``metrics`` may be empty = every name present)."""

    worker: str
    unit: str
    arm: str
    layout: str = "wide"
    session: str | None = None
    metrics: list[str] = field(default_factory=list)
    metric_column: str | None = None
    score_column: str | None = None
    reverse: list[str] = field(default_factory=list)
    qc_arm: str | None = None
    qc_metrics: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ParsedImport:
    long: pd.DataFrame  # LONG_COLUMNS, raw scores (not reversed), missing scores dropped; row = rated conversation
    metrics: list[str]
    n_source_rows: int
    arms: list[str]
    workers: int


def read_table(fileobj: IO[bytes] | IO[str]) -> pd.DataFrame:
    """Read an uploaded CSV with every column as text (types are checked later)."""
    raw = fileobj.read()
    text = raw.decode("utf-8-sig", errors="strict") if isinstance(raw, bytes) else raw
    if not text.strip():
        raise RatingsError("the file is empty")
    try:
        return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_values=[""])
    except pd.errors.ParserError as exc:
        raise RatingsError(f"not a readable CSV file: {exc}") from exc


def parse_ratings(table: pd.DataFrame, mapping: Mapping) -> ParsedImport:
    """Validate ``table`` under ``mapping``; raise :class:`RatingsError` with a message for the researcher."""
    if mapping.layout not in ("wide", "long"):
        raise RatingsError(f"unknown layout {mapping.layout!r}")
    metrics = list(mapping.metrics)
    metric_col = value_col = None
    if mapping.layout == "long":
        metric_col = mapping.metric_column or "metric"
        value_col = mapping.score_column or "score"
        if metric_col not in table.columns:
            raise RatingsError(f"unknown column(s) [{metric_col!r}]; the table has {list(table.columns)}")
        if not metrics:
            metrics = sorted(table[metric_col].dropna().astype(str).str.strip().unique())
    elif not metrics:
        raise RatingsError("name the metric columns of the wide table")
    frame = canonical_frame(
        table,
        worker=mapping.worker,
        unit=mapping.unit,
        arm=mapping.arm,
        metrics=metrics,
        session=mapping.session or None,
        reverse=(),  # stored raw; the analysis reverses, so the dataset can be re-analysed either way
        metric_col=metric_col,
        value_col=value_col,
    )
    keys = [WORKER, UNIT, ARM] + ([SESSION] if mapping.session else [])
    dup = frame.duplicated(keys, keep=False)
    if dup.any():
        names = [mapping.worker, mapping.unit, mapping.arm] + ([mapping.session] if mapping.session else [])
        raise RatingsError(
            f"{int(dup.sum())} rows share the same ({', '.join(names)}); each rated conversation must be one row"
        )
    unknown_rev = [m for m in mapping.reverse if m not in metrics]
    if unknown_rev:
        raise RatingsError(f"reversed metric(s) {unknown_rev} are not among the metrics {metrics}")
    arms = sorted(frame[ARM].unique())
    if mapping.qc_arm:
        if mapping.qc_arm not in arms:
            raise RatingsError(f"QC arm {mapping.qc_arm!r} does not occur in column {mapping.arm!r} (arms: {arms})")
        unknown_qc = [m for m in mapping.qc_metrics if m not in metrics]
        if unknown_qc:
            raise RatingsError(f"QC metric(s) {unknown_qc} are not among the metrics {metrics}")
    elif mapping.qc_metrics:
        raise RatingsError("QC metrics given without a QC arm")

    frame["row"] = range(len(frame))  # canonical_frame keeps the table's row order (long tables: sorted keys)
    long = frame.melt(
        id_vars=["row", *[k for k in (WORKER, UNIT, ARM, SESSION) if k in frame]],
        value_vars=metrics,
        var_name="metric",
        value_name="score",
    )
    long = long.dropna(subset=["score"])
    long = long.rename(columns={WORKER: "worker", UNIT: "unit", ARM: "arm", SESSION: "session"})
    long["session"] = long["session"].astype(str) if "session" in long else ""
    return ParsedImport(
        long=long[LONG_COLUMNS].reset_index(drop=True),
        metrics=metrics,
        n_source_rows=len(table),
        arms=arms,
        workers=int(frame[WORKER].nunique()),
    )


def split_names(value: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c'] (order kept, duplicates dropped)."""
    return list(dict.fromkeys(v.strip() for v in value.replace("\n", ",").split(",") if v.strip()))
