"""Reading an external ratings CSV with a column mapping into the long frame that reports.queries stores.

Pure (no ORM): validation is the analysis library's own (:class:`analysis.spec.AnalysisSpec`,
:func:`analysis.data.canonical_frame`, :func:`analysis.data.check_arms`), so an imported table is accepted
exactly when the CLI would accept it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from typing import IO, Any, cast

import pandas as pd

from analysis.data import ARM, SESSION, UNIT, WORKER, RatingsError, canonical_frame, check_arms, read_text_table
from analysis.spec import AnalysisSpec

# The long frame of one study's or dataset's ratings (reports.queries reads and writes it); an imported dataset
# adds "row", the rated conversation's position in the uploaded file.
LONG_COLUMNS = ["worker", "unit", "arm", "session", "metric", "score"]
IMPORT_COLUMNS = ["row", *LONG_COLUMNS]


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
    long: pd.DataFrame  # IMPORT_COLUMNS, raw scores (not reversed), missing scores dropped; row = rated conversation
    metrics: list[str]
    n_source_rows: int
    arms: list[str]
    workers: int


def read_table(fileobj: IO[bytes] | IO[str]) -> pd.DataFrame:
    """Read an uploaded CSV with every column as text (types are checked later).

    The parser reads the file itself, in blocks (an upload larger than 2.5 MB is a temporary file on disk), instead
    of one copy of the bytes, one of the text and one of a StringIO before parsing. Bad UTF-8 raises
    ``UnicodeDecodeError``; a NUL character or a repeated column name is a :class:`RatingsError` naming where
    (:func:`analysis.data.read_text_table`: pandas would cut the cell or rename the column silently)."""
    wrapper = None
    if isinstance(fileobj, io.TextIOBase):
        text = cast("IO[str]", fileobj)
    else:
        wrapper = io.TextIOWrapper(cast("IO[bytes]", fileobj), encoding="utf-8-sig", errors="strict", newline="")
        text = wrapper
    try:
        return read_text_table(text)
    except pd.errors.EmptyDataError:
        raise RatingsError("the file is empty") from None
    except pd.errors.ParserError as exc:
        raise RatingsError(f"not a readable CSV file: {exc}") from exc
    finally:
        if wrapper is not None:
            wrapper.detach()  # the upload is the caller's to close, not the wrapper's


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
    spec = AnalysisSpec(
        worker=mapping.worker,
        unit=mapping.unit,
        arm=mapping.arm,
        metrics=tuple(metrics),
        session=mapping.session or None,
        reverse=tuple(mapping.reverse),
        qc_arm=mapping.qc_arm or None,
        qc_metrics=tuple(mapping.qc_metrics),
        metric_col=metric_col,
        value_col=value_col,
    )
    # stored raw: the analysis reverses, so the dataset can be re-analysed either way
    frame = canonical_frame(table, replace(spec, reverse=()))
    arms = sorted(frame[ARM].unique())
    check_arms(spec, arms)

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
    check_lengths(long)
    return ParsedImport(
        long=long[IMPORT_COLUMNS].reset_index(drop=True),
        metrics=metrics,
        n_source_rows=len(table),
        arms=arms,
        workers=int(frame[WORKER].nunique()),
    )


# The longest value each column of an imported rating may have (reports.models.ImportedRating's max_length):
# checked here so a long name is a message naming the column and row, not a database error (PostgreSQL).
FIELD_LIMITS = {"worker": 200, "unit": 200, "arm": 200, "session": 50, "metric": 100}


def check_lengths(long: pd.DataFrame) -> None:
    """:class:`RatingsError` naming the first column whose values are longer than :data:`FIELD_LIMITS`."""
    for column, limit in FIELD_LIMITS.items():
        if column not in long:
            continue
        lengths = long[column].astype(str).str.len()
        too_long = lengths > limit
        if too_long.any():
            first = long.loc[too_long.idxmax()]
            raise RatingsError(
                f"a value in the {column} column has {int(lengths.max())} characters; at most {limit} can be stored "
                f"(first in data row {int(first['row']) + 1}: {str(first[column])[:40]!r}…)"
            )


def split_names(value: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c'] (order kept, duplicates dropped)."""
    return list(dict.fromkeys(v.strip() for v in value.replace("\n", ",").split(",") if v.strip()))
