"""Loading and validating ratings: wide or long tables, from a CSV or a DataFrame.

Two layouts are accepted (docs/analysis.md shows both):

* **wide**: one row per rated session (or per rated conversation), one column per metric, e.g. the
  Ji et al. file: ``worker_id, hit_id, model, interesting, fun, ...``;
* **long**: one row per single rating, with a metric-name column and a score column, e.g.
  ``worker, episode, arm, session, metric, score``.

Both are normalised to the *canonical wide frame*: columns ``_worker``, ``_unit``, ``_arm`` and (if given)
``_session``, plus one float column per metric. Scores must lie in [0, 100]; a missing score is allowed
(NaN) but a missing worker, unit or arm is an error, as is a non-numeric or out-of-range score.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

WORKER, UNIT, ARM, SESSION = "_worker", "_unit", "_arm", "_session"
KEYS = (WORKER, UNIT, ARM, SESSION)
SCORE_MIN, SCORE_MAX = 0.0, 100.0


class RatingsError(ValueError):
    """The ratings table cannot be analysed as given; the message says what to fix."""


def read_csv(path: str | Path) -> pd.DataFrame:
    """Read a ratings CSV with every column as text (types are checked by :func:`canonical_frame`)."""
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except FileNotFoundError as exc:
        raise RatingsError(f"no such file: {path}") from exc
    except pd.errors.EmptyDataError as exc:
        raise RatingsError(f"{path} is empty") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise RatingsError(f"{path} is not a readable CSV file: {exc}") from exc


def is_long(df: pd.DataFrame, metrics: Sequence[str], metric_col: str | None, value_col: str | None) -> bool:
    """Whether ``df`` is in the long layout: explicitly (metric_col given) or because the metric columns are
    absent while the default ``metric``/``score`` columns are present."""
    if metric_col is not None:
        return True
    return not any(m in df.columns for m in metrics) and "metric" in df.columns and "score" in df.columns


def canonical_frame(
    df: pd.DataFrame,
    *,
    worker: str,
    unit: str,
    arm: str,
    metrics: Sequence[str],
    session: str | None = None,
    reverse: Iterable[str] = (),
    metric_col: str | None = None,
    value_col: str | None = None,
) -> pd.DataFrame:
    """Validate ``df`` and return the canonical wide frame (reversed metrics already turned into 100 - x)."""
    metrics = list(metrics)
    if not metrics:
        raise RatingsError("no metrics given")
    if len(set(metrics)) != len(metrics):
        raise RatingsError(f"metrics listed twice: {metrics}")
    reverse = list(reverse)
    unknown_rev = [m for m in reverse if m not in metrics]
    if unknown_rev:
        raise RatingsError(f"reversed metrics {unknown_rev} are not among the metrics {metrics}")
    bad_names = [m for m in metrics if m in KEYS]
    if bad_names:
        raise RatingsError(f"metric names {bad_names} are reserved")

    key_cols = {WORKER: worker, UNIT: unit, ARM: arm}
    if session is not None:
        key_cols[SESSION] = session
    if is_long(df, metrics, metric_col, value_col):
        metric_col = metric_col or "metric"
        value_col = value_col or "score"
        _require_columns(df, [*key_cols.values(), metric_col, value_col])
        wide = _long_to_wide(df, key_cols, metrics, metric_col, value_col)
    else:
        _require_columns(df, [*key_cols.values(), *metrics])
        wide = pd.DataFrame({k: df[c].to_numpy() for k, c in key_cols.items()})
        for m in metrics:
            wide[m] = _numeric(df[m], m).to_numpy()

    for key, col in key_cols.items():
        # strip the distinct values only: there are far fewer workers/units/arms than rows
        codes, uniques = pd.factorize(wide[key], use_na_sentinel=True)
        labels = np.array([str(u).strip() for u in uniques], dtype=object)
        missing = (codes < 0) | np.isin(codes, np.flatnonzero(labels == ""))
        if missing.any():
            rows = _row_numbers(wide.index[missing])
            raise RatingsError(f"column {col!r} is empty in {int(missing.sum())} row(s) (rows {rows})")
        wide[key] = labels[codes] if len(labels) else wide[key].astype(str)
    if SESSION in wide:
        wide[SESSION] = _session_values(wide[SESSION], session or "")

    scores = wide[metrics].to_numpy(dtype=float)
    out_of_range = (scores < SCORE_MIN) | (scores > SCORE_MAX)
    if out_of_range.any():
        r, c = np.nonzero(out_of_range)
        examples = ", ".join(f"row {i + 2} {metrics[j]}={scores[i, j]:g}" for i, j in zip(r[:5], c[:5], strict=True))
        raise RatingsError(f"{len(r)} score(s) outside [0, 100]: {examples}")
    if np.isnan(scores).all(axis=1).all():
        raise RatingsError("no scores at all")
    for m in reverse:
        wide[m] = SCORE_MAX - wide[m]
    return wide.reset_index(drop=True)


def _require_columns(df: pd.DataFrame, needed: Sequence[str]) -> None:
    missing = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing:
        raise RatingsError(f"unknown column(s) {missing}; the table has {list(df.columns)}")


def _numeric(series: pd.Series, name: str) -> pd.Series:
    if pd.api.types.is_numeric_dtype(series):
        return series.astype(float)
    text = series.astype("string").str.strip()
    values = pd.to_numeric(text, errors="coerce")
    bad = values.isna() & text.notna() & (text != "")
    if bad.any():
        rows = _row_numbers(np.flatnonzero(bad.to_numpy()))
        examples = ", ".join(repr(v) for v in text[bad].head(3))
        raise RatingsError(f"non-numeric score(s) in {name!r}: {examples} (rows {rows})")
    return values.astype(float)


def _long_to_wide(
    df: pd.DataFrame, key_cols: dict[str, str], metrics: list[str], metric_col: str, value_col: str
) -> pd.DataFrame:
    long = pd.DataFrame({k: df[c].to_numpy() for k, c in key_cols.items()})
    long["_metric"] = df[metric_col].astype(str).str.strip().to_numpy()
    long["_value"] = _numeric(df[value_col], value_col).to_numpy()
    bad = (long["_value"] < SCORE_MIN) | (long["_value"] > SCORE_MAX)
    if bad.any():
        pos = np.flatnonzero(bad.to_numpy())
        examples = ", ".join(f"row {i + 2} {long['_metric'].iat[i]}={long['_value'].iat[i]:g}" for i in pos[:5])
        raise RatingsError(f"{len(pos)} score(s) outside [0, 100]: {examples}")
    unknown = sorted(set(long["_metric"]) - set(metrics))
    if unknown:
        raise RatingsError(f"unknown metric(s) {unknown} in column {metric_col!r}; expected {metrics}")
    for key, col in key_cols.items():
        missing = long[key].isna()
        if missing.any():
            raise RatingsError(f"column {col!r} is empty in rows {_row_numbers(np.flatnonzero(missing.to_numpy()))}")
    keys = list(key_cols)
    dup = long.duplicated([*keys, "_metric"], keep=False)
    if dup.any():
        raise RatingsError(
            f"{int(dup.sum())} rows rate the same metric twice for one worker/unit/arm/session "
            f"(rows {_row_numbers(np.flatnonzero(dup.to_numpy()))})"
        )
    for key in keys:
        codes, uniques = pd.factorize(long[key])
        long[key] = np.array([str(u).strip() for u in uniques], dtype=object)[codes]
    wide = long.pivot(index=keys, columns="_metric", values="_value")
    wide = wide.reindex(columns=metrics).reset_index()
    wide.columns.name = None
    return wide


def _session_values(values: pd.Series, name: str) -> pd.Series:
    """Sessions sort numerically when they are numbers (1, 2, ..., 10), else as text."""
    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.notna().all() and (numeric == numeric.round()).all():
        return numeric.astype(int)
    return values.astype(str)


def _row_numbers(index: Any, limit: int = 5) -> str:
    """CSV line numbers (header is line 1) of the first few offending rows, given their 0-based positions."""
    idx = list(index)
    shown = ", ".join(str(int(i) + 2) if isinstance(i, (int, np.integer)) else str(i) for i in idx[:limit])
    return shown + (f", ... ({len(idx)} in all)" if len(idx) > limit else "")
