"""Loading and validating ratings: wide or long tables, from a CSV or a DataFrame.

Two layouts are accepted (docs/analysis.md shows both):

* **wide**: one row per rated session (or per rated conversation), one column per metric, e.g. the
  Ji et al. file: ``worker_id, hit_id, model, interesting, fun, ...``;
* **long**: one row per single rating, with a metric-name column and a score column, e.g.
  ``worker, episode, arm, session, metric, score``.

Both are normalised to the *canonical wide frame*: columns ``_worker``, ``_unit``, ``_arm`` and (if given)
``_session``, one float column per metric, and one boolean column per exclusion filter (:func:`flag_column`).
Scores must lie in [0, 100]; a missing score is allowed (NaN) but a missing worker, unit or arm is an error, as
is a non-numeric or out-of-range score. Rows of a wide table that share their (worker, unit, arm, session) but
differ are distinct conversations (kept, and counted in the report); exact copies of a row are refused unless
the spec's ``duplicates`` policy says to drop or keep them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pandas as pd

from analysis.covariates import cov_column, covariate_values
from analysis.spec import AnalysisSpec, RatingsError

__all__ = [
    "RatingsError",
    "canonical_frame",
    "check_arms",
    "data_warnings",
    "flag_column",
    "is_long",
    "read_csv",
    "read_text_table",
    "repeated_rows_info",
]

WORKER, UNIT, ARM, SESSION = "_worker", "_unit", "_arm", "_session"
KEYS = (WORKER, UNIT, ARM, SESSION)
# A wide table without a session column can hold several rows with the same (worker, unit, arm) that differ:
# distinct conversations. CONV numbers them (0, 1, ...) and is part of the unit; REPEATS_ATTR is the frame
# attribute holding the report's ``repeated_rows`` section.
CONV = "_conv"
# Columns the report adds to the analysed ratings: the unit's number and the worker's (analysis.report.prepare).
UID, WID = "_uid", "_wid"
REPEATS_ATTR = "memeval_repeated_rows"
SCORE_MIN, SCORE_MAX = 0.0, 100.0
_TRUE = frozenset({"true", "t", "yes", "y", "1", "1.0"})
_FALSE = frozenset({"false", "f", "no", "n", "0", "0.0", ""})


def read_csv(path: str | Path) -> pd.DataFrame:
    """Read a ratings CSV with every column as text (types are checked by :func:`canonical_frame`)."""
    p = Path(path)
    if p.is_dir():
        raise RatingsError(f"{path} is a directory, not a CSV file")
    try:
        with p.open(encoding="utf-8", newline="") as handle:
            return read_text_table(handle)
    except FileNotFoundError as exc:
        raise RatingsError(f"no such file: {path}") from exc
    except PermissionError as exc:
        raise RatingsError(f"{path} cannot be read (permission denied)") from exc
    except IsADirectoryError as exc:
        raise RatingsError(f"{path} is a directory, not a CSV file") from exc
    except pd.errors.EmptyDataError as exc:
        raise RatingsError(f"{path} is empty") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise RatingsError(f"{path} is not a readable CSV file: {exc}") from exc
    except RatingsError as exc:
        raise RatingsError(f"{path}: {exc}") from None
    except OSError as exc:
        raise RatingsError(f"{path} cannot be read: {exc.strerror or exc}") from exc


def read_text_table(handle: IO[str]) -> pd.DataFrame:
    """Parse an open text CSV with every column as text, refusing what pandas would change silently.

    pandas' C parser ends a cell at a NUL character (``"ab\\x00cd"`` becomes ``"ab"``) and renames a repeated
    column name (``score``, ``score.1``): either would analyse something other than the file. Both are
    :class:`RatingsError` naming the line and column. The file is still parsed in blocks (no whole copy): a
    thin reader looks at each block as pandas takes it. Raises pandas' ``EmptyDataError``/``ParserError`` as
    :func:`pandas.read_csv` does.
    """
    scan = _ScanningReader(handle)
    table: pd.DataFrame = pd.read_csv(cast("Any", scan), dtype=str, keep_default_na=False, na_values=[""])
    scan.check()
    return table


_HEADER_SCAN_LIMIT = 1 << 20  # characters


class _ScanningReader:
    """A text file as pandas reads it (``read`` in blocks), noting its header line and the first NUL character."""

    mode = "r"

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle
        self._head: list[str] = []  # the blocks up to the end of the header record (pandas' header)
        self._head_size = 0
        self._header_done = False
        self._lines = 0  # newlines before the current block
        self._nul: tuple[int, str] | None = None  # (line number, the line's text)

    def read(self, size: int = -1) -> str:
        block = self._handle.read(size)
        if not self._header_done:
            self._head.append(block)
            self._head_size += len(block)
            # Most headers end in the first block; a header past it (blank lines first, a quoted line break, old
            # Mac line ends) is parsed again only when a block brings a line end, and not past a megabyte (an
            # unclosed quote would make every block parse the whole file again).
            if (
                not block
                or self._head_size > _HEADER_SCAN_LIMIT
                or (("\n" in block or "\r" in block) and _header_record("".join(self._head)) is not None)
            ):
                self._header_done = True
        if self._nul is None and "\x00" in block:
            at = block.index("\x00")
            start = block.rfind("\n", 0, at) + 1
            end = block.find("\n", at)
            self._nul = (self._lines + block.count("\n", 0, at) + 1, block[start : end if end >= 0 else len(block)])
        self._lines += block.count("\n")
        return block

    def __iter__(self) -> Iterator[str]:  # pandas takes only objects with __iter__ for files
        return iter(self._handle)

    def check(self) -> None:
        header = _header_record("".join(self._head), at_end=True) or []
        if self._nul is not None:
            line, text = self._nul
            fields = _csv_fields(text)
            column = next((i for i, f in enumerate(fields) if "\x00" in f), None)
            where = f"line {line}" if line > 1 else "the header"
            if column is not None:
                where += (
                    f", column {header[column]!r}" if column < len(header) and line > 1 else f", field {column + 1}"
                )
            raise RatingsError(
                f"a NUL character (\\x00) in {where}: the file is damaged or not a text CSV (remove the character "
                "and try again)"
            )
        seen: dict[str, int] = {}
        for i, name in enumerate(header):
            if not name:  # pandas names an empty header cell "Unnamed: <i>" (a spreadsheet's trailing commas)
                continue
            if name in seen:
                raise RatingsError(
                    f"the header names the column {name!r} twice (columns {seen[name] + 1} and {i + 1}): give every "
                    "column its own name"
                )
            seen[name] = i


def _header_record(text: str, *, at_end: bool = False) -> list[str] | None:
    """The first non-blank CSV record of ``text`` (the header pandas reads: it skips blank lines, and a quoted
    name may hold a line break); ``None`` while it may still go on past the end of ``text``."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff"), newline=""))
    try:
        for fields in reader:
            if not fields:
                continue
            if at_end:
                return fields
            next(reader)  # a following record (even a blank line) proves this one complete
            return fields
    except StopIteration:
        return None
    except csv.Error:
        return [] if at_end else None
    return [] if at_end else None


def _csv_fields(line: str) -> list[str]:
    """The fields of one CSV line (best effort: a quoted field that goes on past this line is cut)."""
    try:
        return next(csv.reader([line.rstrip("\r")]), [])
    except csv.Error:
        return []


def flag_column(name: str) -> str:
    """The canonical frame's column holding exclusion filter ``name`` (a boolean per row)."""
    return f"_flag:{name}"


def is_long(df: pd.DataFrame, metrics: Sequence[str], metric_col: str | None, value_col: str | None) -> bool:
    """Whether ``df`` is in the long layout: explicitly (metric_col given) or because the metric columns are
    absent while the default ``metric``/``score`` columns are present."""
    if metric_col is not None:
        return True
    return not any(m in df.columns for m in metrics) and "metric" in df.columns and "score" in df.columns


def canonical_frame(df: pd.DataFrame, spec: AnalysisSpec | None = None, **options: Any) -> pd.DataFrame:
    """Validate ``df`` and return the canonical wide frame (reversed metrics already turned into 100 - x).

    Takes an :class:`~analysis.spec.AnalysisSpec` or its fields as keyword arguments.
    """
    spec = AnalysisSpec.of(spec, options)
    metrics = list(spec.metrics)
    bad_names = [m for m in metrics if m in KEYS]
    if bad_names:
        raise RatingsError(f"metric names {bad_names} are reserved")
    key_cols = {WORKER: spec.worker, UNIT: spec.unit, ARM: spec.arm}
    if spec.session is not None:
        key_cols[SESSION] = spec.session
    filters = [*spec.exclude, *spec.exclude_rows]
    if is_long(df, metrics, spec.metric_col, spec.value_col):
        metric_col = spec.metric_col or "metric"
        value_col = spec.value_col or "score"
        _require_columns(df, [*key_cols.values(), metric_col, value_col, *filters, *spec.covariates])
        dropped = 0
        if spec.duplicates == "drop":  # exact copies of a rating row: dropped first, counted in the report
            copies = df.duplicated(keep="first").to_numpy()
            dropped = int(copies.sum())
            df = df[~copies].reset_index(drop=True)
        wide = _long_to_wide(df, key_cols, metrics, metric_col, value_col, filters, spec.covariates)
    else:
        _require_columns(df, [*key_cols.values(), *metrics, *filters, *spec.covariates])
        wide = pd.DataFrame({k: df[c].to_numpy() for k, c in key_cols.items()})
        for m in metrics:
            wide[m] = _numeric(df[m], m).to_numpy()
        for f in filters:
            wide[flag_column(f)] = flag_values(df[f], f)
        for cov in spec.covariates:
            wide[cov_column(cov)] = covariate_values(df[cov], cov)

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
        wide[SESSION] = _session_values(wide[SESSION])
    scores = wide[metrics].to_numpy(dtype=float)
    out_of_range = (scores < SCORE_MIN) | (scores > SCORE_MAX)
    if out_of_range.any():
        r, c = np.nonzero(out_of_range)
        examples = ", ".join(f"row {i + 2} {metrics[j]}={scores[i, j]:g}" for i, j in zip(r[:5], c[:5], strict=True))
        raise RatingsError(f"{len(r)} score(s) outside [0, 100]: {examples}")
    if np.isnan(scores).all():
        raise RatingsError("no scores at all")
    if not is_long(df, metrics, spec.metric_col, spec.value_col):
        wide, repeats = _repeated_rows(df, wide, spec, list(key_cols.values()), filters)
    else:
        repeats = no_repeats(spec)
        repeats["dropped"] = repeats["exact_duplicates"] = dropped
    for m in spec.reverse:
        wide[m] = SCORE_MAX - wide[m]
    wide = wide.reset_index(drop=True)
    wide.attrs[REPEATS_ATTR] = repeats
    return wide


def repeated_rows_info(frame: pd.DataFrame, spec: AnalysisSpec) -> dict[str, Any]:
    """The report's ``repeated_rows`` section of a frame made by :func:`canonical_frame` (zeros when it has none)."""
    return dict(frame.attrs.get(REPEATS_ATTR) or no_repeats(spec))


def no_repeats(spec: AnalysisSpec) -> dict[str, Any]:
    return {
        "key": list(spec.key_columns),
        "groups": 0,
        "rows": 0,
        "treated_as": None,
        "exact_duplicates": 0,
        "policy": spec.duplicates,
        "dropped": 0,
        "lines": [],
    }


def _repeated_rows(
    df: pd.DataFrame, wide: pd.DataFrame, spec: AnalysisSpec, key_names: list[str], filters: list[str]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Rows of a wide table that share their (worker, unit, arm[, session]).

    Rows that differ are distinct rated conversations (published files, e.g. Ji et al.'s second run, hold two
    conversations with the same system in one HIT and no conversation id): they are kept. Without a session
    column each becomes a unit of its own (column :data:`CONV`: its number among them, in the canonical order
    of its scores, so the row order of the file does not matter), as Ji et al. count every conversation; with a
    session column they are ratings of the same session of one unit, averaged in it. Rows that are exact copies
    of another row (every column of the file equal) are refused, dropped or kept as ``spec.duplicates`` says.
    """
    keys = list(key_cols_of(wide))
    info = no_repeats(spec)
    repeated = wide.duplicated(keys, keep=False).to_numpy()
    if not repeated.any():
        return wide, info
    # identity of a row: its canonical keys, scores and flags, and every other column of the file as read
    others = [c for c in df.columns if c not in {*key_names, *spec.metrics, *filters}]
    identity = wide.copy()
    for c in others:
        identity[f"_other:{c}"] = df[c].to_numpy()
    copies = identity.duplicated(keep="first").to_numpy() & repeated
    info["exact_duplicates"] = int(copies.sum())
    if copies.any():
        lines = _row_numbers(np.flatnonzero(copies))
        if spec.duplicates == "refuse":
            raise RatingsError(
                f"{int(copies.sum())} row(s) are exact copies of an earlier row, every column equal (rows {lines}): "
                "a file pasted twice would count them twice. Remove them, or analyse with the duplicates policy 'drop' "
                "(--duplicates drop: the copies are dropped and counted in the report) or 'keep' (--duplicates "
                "keep: distinct conversations that happen to have identical scores)"
            )
        if spec.duplicates == "drop":
            wide = wide[~copies]
            repeated = wide.duplicated(keys, keep=False).to_numpy()
            info["dropped"] = int(copies.sum())
            info["dropped_lines"] = lines
    if repeated.any():
        groups = wide[repeated].groupby(keys, sort=False).ngroups
        info.update(
            groups=int(groups),
            rows=int(repeated.sum()),
            lines=[int(i) + 2 for i in wide.index[repeated][:20]],
            treated_as="ratings of the same session of one unit (averaged in it)"
            if spec.session is not None
            else "distinct conversations (one unit each)",
        )
        if spec.session is None:
            order = wide.sort_values([*keys, *spec.metrics], kind="stable", na_position="last")
            wide = wide.assign(**{CONV: order.groupby(keys, sort=False).cumcount().reindex(wide.index)})
    return wide, info


def key_cols_of(frame: pd.DataFrame) -> tuple[str, ...]:
    """The canonical key columns present in ``frame``."""
    return tuple(k for k in KEYS if k in frame.columns)


def check_arms(spec: AnalysisSpec, arms: Sequence[str]) -> None:
    """The settings that need the data: the QC arm must occur among the table's arms."""
    if spec.qc_arm is not None and spec.qc_arm not in set(arms):
        raise RatingsError(f"QC arm {spec.qc_arm!r} does not occur in column {spec.arm!r} (arms: {sorted(arms)})")


def data_warnings(frame: pd.DataFrame, spec: AnalysisSpec) -> list[str]:
    """What is odd about a valid canonical frame but must not pass silently: empty metrics, metrics missing for
    some arms, scores that do not look like 0-100 sliders, workers who gave one constant score (without a QC arm
    to catch them)."""
    out: list[str] = []
    metrics = list(spec.metrics)
    counts = frame.groupby(ARM)[metrics].count()
    empty = [m for m in metrics if counts[m].sum() == 0]
    if empty:
        out.append(f"metric(s) {empty} have no scores at all: they are absent from every table and overall score")
    real = counts.drop(index=[spec.qc_arm], errors="ignore") if spec.qc_arm else counts
    for m in metrics:
        if m in empty:
            continue
        missing_arms = [str(a) for a, n in real[m].items() if n == 0]
        if missing_arms:
            out.append(
                f"metric {m!r} has no scores for arm(s) {missing_arms}: their overall score is a mean over the "
                f"other {len(metrics) - 1 - len(empty)} metric(s), so it is not comparable with the other arms'"
            )
    values = frame[metrics].to_numpy(dtype=float)
    values = values[~np.isnan(values)]
    if values.size >= 20:
        lo, hi = float(values.min()), float(values.max())
        integers = bool(np.all(values == np.round(values)))
        if hi <= 10 or (integers and np.unique(values).size <= 11 and hi - lo <= 10):
            out.append(
                f"every score lies between {lo:g} and {hi:g}: this looks like a {lo:g}-{hi:g} rating scale, not 0-100 "
                "sliders. z-scores and rank tests are unaffected, but raw means are on that scale; check the "
                "columns (reversed metrics are computed as 100 - x)"
            )
    if spec.qc_arm is None:
        stacked = frame[[WORKER, *metrics]].melt(id_vars=WORKER).dropna()
        spread = stacked.groupby(WORKER)["value"].agg(["min", "max", "size"])
        constant = spread[(spread["min"] == spread["max"]) & (spread["size"] > 1)].index.tolist()
        if constant:
            shown = ", ".join(map(str, constant[:5])) + (f", ... ({len(constant)} in all)" if len(constant) > 5 else "")
            out.append(
                f"{len(constant)} worker(s) gave the same score to everything ({shown}): their z-scores are all 0 and "
                "they are kept, because there is no QC arm to test them against; consider excluding them"
            )
    return out


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


def flag_values(series: pd.Series, name: str) -> np.ndarray:
    """A boolean exclusion column: true/false, yes/no, 1/0 (any case); an empty cell is false (not flagged)."""
    if pd.api.types.is_bool_dtype(series):
        return series.to_numpy(dtype=bool)
    text = series.astype("string").fillna("").str.strip().str.lower()
    bad = ~text.isin(_TRUE | _FALSE)
    if bad.any():
        rows = _row_numbers(np.flatnonzero(bad.to_numpy()))
        examples = ", ".join(repr(v) for v in series[bad.to_numpy()].head(3))
        raise RatingsError(
            f"exclusion column {name!r} must be true/false (or yes/no, 1/0): got {examples} (rows {rows})"
        )
    return text.isin(_TRUE).to_numpy(dtype=bool)


def _long_to_wide(
    df: pd.DataFrame,
    key_cols: dict[str, str],
    metrics: list[str],
    metric_col: str,
    value_col: str,
    filters: list[str],
    covariates: tuple[str, ...] = (),
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
        copies = int((dup.to_numpy() & df.duplicated(keep="first").to_numpy()).sum())
        raise RatingsError(
            f"{int(dup.sum())} rows rate the same metric twice for one worker/unit/arm/session "
            f"(rows {_row_numbers(np.flatnonzero(dup.to_numpy()))}): in a long table the rows of two conversations "
            "cannot be told apart; add a column that tells them apart (a session or conversation id) and name it"
            + (
                f". {copies} of these rows are exact copies of an earlier row: --duplicates drop removes them"
                if copies
                else ""
            )
        )
    for key in keys:
        codes, uniques = pd.factorize(long[key])
        long[key] = np.array([str(u).strip() for u in uniques], dtype=object)[codes]
    wide = long.pivot(index=keys, columns="_metric", values="_value")
    wide = wide.reindex(columns=metrics)
    if filters:
        flags = pd.DataFrame({flag_column(f): flag_values(df[f], f) for f in filters}, index=long.index)
        # a rated session (or conversation) is flagged when any of its rating rows is
        wide = wide.join(flags.groupby([long[k] for k in keys]).any().rename_axis(keys))
    if covariates:  # measured per rated session: its rating rows repeat the value (their mean, if they differ)
        values = pd.DataFrame({cov_column(c): covariate_values(df[c], c) for c in covariates}, index=long.index)
        wide = wide.join(values.groupby([long[k] for k in keys]).mean().rename_axis(keys))
    wide = wide.reset_index()
    wide.columns.name = None
    return wide


def _session_values(values: pd.Series) -> pd.Series:
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
