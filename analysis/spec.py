"""What to analyse and how: one :class:`AnalysisSpec` instead of the same fourteen keyword arguments everywhere.

``analyze(df, worker=..., unit=..., ...)`` keeps working: the keyword arguments are the spec's fields, and
:meth:`AnalysisSpec.of` turns them into one. The constants the whole library shares live here too, each
defined once (the name of the overall score, the significance level, the confidence level, the tests and the
Holm families).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

OVERALL = "overall"  # the pseudo-metric "mean of all of a unit's scores", next to the real metrics
# memeval's flag of a session whose bot turns broke blinding (judges/blinding.py): a row filter applied by default
NON_BLIND = "non_blind"
ALPHA = 0.05  # QC pass level; the default significance level of the arm comparisons (AnalysisSpec.alpha)
CONFIDENCE = 0.95

Test = Literal["cluster-t", "mwu-greater", "mwu-two-sided", "welch"]
TESTS: tuple[str, ...] = ("cluster-t", "mwu-greater", "mwu-two-sided", "welch")
DEFAULT_TEST: Test = "cluster-t"
TEST_LABELS: dict[str, str] = {
    "cluster-t": "t-test of the difference in means with worker-clustered standard errors (two-sided; default)",
    "mwu-greater": "Mann-Whitney U, one-sided, every ordered pair (Ji et al. 2022; replication mode)",
    "mwu-two-sided": "Mann-Whitney U, two-sided",
    "welch": "Welch's t-test (two-sided)",
}

# Which p-values one Holm correction covers. "metric": the pairs of arms on one metric, for the whole episode
# or one session (the narrowest, and the historical behaviour); "all-metrics": every metric and the overall
# score together, for the whole episode or one session; "all": every test in the report.
Family = Literal["metric", "all-metrics", "all"]
FAMILIES: tuple[str, ...] = ("metric", "all-metrics", "all")
DEFAULT_FAMILY: Family = "metric"

# What to do with rows that are exact copies of another row (every column equal): refuse the table (default: a
# doubled file once turned p = 0.013 into 0.00045), drop the copies (counted in the report), or keep them as
# distinct conversations that happen to have the same scores. Rows that share their keys but differ are always
# kept, as distinct conversations (see analysis.data).
Duplicates = Literal["refuse", "drop", "keep"]
DUPLICATE_POLICIES: tuple[str, ...] = ("refuse", "drop", "keep")


class RatingsError(ValueError):
    """The ratings table (or the way it is to be analysed) cannot be used as given; the message says what to fix."""


def write_out(out: Path | None, text: str) -> None:
    """A command's output: to the file ``--out`` names, else to stdout; a file that cannot be written is a
    :class:`RatingsError` (exit 2) that says why."""
    if not out:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RatingsError(f"cannot write --out {out}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class Comparison:
    """One primary (confirmatory) comparison, as pre-registered: the arms' tests on ``metric`` (a metric or
    ``"overall"``), for the whole unit (``session`` None: over all sessions) or one session; every pair of arms,
    or only ``a`` against ``b`` (for the one-sided ``mwu-greater`` test, only the direction "a scores higher
    than b").

    Written ``METRIC``, ``METRIC:ARM_A:ARM_B``, ``METRIC@SESSION`` or ``METRIC:ARM_A:ARM_B@SESSION`` on the
    command line (names holding ``:``, ``@`` or ``,`` go in a pre-registration file), ``{"metric": ..., "a": ...,
    "b": ..., "session": ...}`` in JSON.
    """

    metric: str
    a: str | None = None
    b: str | None = None
    session: Any = None

    def __post_init__(self) -> None:
        if not self.metric:
            raise RatingsError("a primary comparison needs a metric (or 'overall')")
        if (self.a is None) != (self.b is None):
            raise RatingsError(f"primary comparison on {self.metric!r}: name both arms or neither")
        if self.a is not None and self.a == self.b:
            raise RatingsError(f"primary comparison on {self.metric!r} compares arm {self.a!r} with itself")

    @classmethod
    def of(cls, value: Comparison | str | Mapping[str, Any]) -> Comparison:
        if isinstance(value, Comparison):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"metric", "a", "b", "session"})
            if unknown:
                raise RatingsError(f"a primary comparison has unknown key(s) {unknown} (metric, a, b, session)")
            a, b = value.get("a"), value.get("b")
            return cls(
                str(value.get("metric") or ""),
                None if a is None else str(a),
                None if b is None else str(b),
                value.get("session"),
            )
        text, _, session = str(value).strip().partition("@")
        parts = [t.strip() for t in text.split(":")]
        if len(parts) not in (1, 3):
            raise RatingsError(f"primary comparison {value!r}: write METRIC or METRIC:ARM_A:ARM_B (and @SESSION)")
        sess: Any = session.strip() or None
        if sess is not None and sess.isdigit():
            sess = int(sess)
        if len(parts) == 3:
            return cls(parts[0], parts[1], parts[2], sess)
        return cls(parts[0], None, None, sess)

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "a": self.a, "b": self.b, "session": self.session}

    def label(self) -> str:
        pair = f" {self.a} vs {self.b}" if self.a is not None else " (every pair of arms)"
        scope = f", session {self.session}" if self.session is not None else ""
        return f"{self.metric}{pair}{scope}"

    def covers(self, entry: Mapping[str, Any], one_sided: bool) -> bool:
        """Whether the pairwise test ``entry`` (a report's ``pairwise``/``pairwise_by_session`` item) is this one."""
        if entry["metric"] != self.metric or entry.get("session") != self.session:
            return False
        if self.a is None:
            return True
        if one_sided:
            return (entry["a"], entry["b"]) == (self.a, self.b)
        return {entry["a"], entry["b"]} == {self.a, self.b}


def _names(value: Iterable[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # a single name is a common slip for a one-element list
        return (value,)
    return tuple(value)


@dataclass(frozen=True)
class AnalysisSpec:
    """Which columns hold what, and the analysis settings.

    ``worker``, ``unit``, ``arm`` and ``session`` name columns of the ratings table; the table is wide (one
    column per metric) or long (``metric_col``/``value_col``, or columns named ``metric`` and ``score``).
    ``reverse`` lists metrics scored as 100 - x first. ``qc_arm``/``qc_metrics`` enable quality control (QC
    metrics default to all metrics). ``test`` is one of :data:`TESTS`; ``family`` one of :data:`FAMILIES`.
    ``mixedlm``: fit the mixed model for the overall score and every metric (True), never (False), or for the
    overall score only when the design needs it (None). ``exclude`` names boolean columns: a worker flagged
    true in any row is removed entirely; ``exclude_rows`` names boolean columns whose flagged rows alone are
    removed. ``preregistration`` is a pre-registration (the dict of :mod:`analysis.prereg`) that the report
    checks its own settings against. ``duplicates`` says what to do with rows that are exact copies of another
    row (:data:`DUPLICATE_POLICIES`); rows that share their keys but differ are distinct conversations.
    checks its own settings against. ``covariates`` names numeric columns reported per arm and put into a mixed
    model beside the arm (:mod:`analysis.covariates`). A table with a :data:`NON_BLIND` column (memeval's flag of a
    session whose bot named its arm, vendor or memory tools) has the flagged rows removed as a row filter unless
    ``include_non_blind`` is true (:func:`with_non_blind_filter`).
    """

    worker: str
    unit: str
    arm: str
    metrics: tuple[str, ...]
    session: str | None = None
    reverse: tuple[str, ...] = ()
    qc_arm: str | None = None
    qc_metrics: tuple[str, ...] = ()
    test: Test = DEFAULT_TEST
    metric_col: str | None = None
    value_col: str | None = None
    mixedlm: bool | None = None
    reference_arm: str | None = None
    family: Family = DEFAULT_FAMILY
    exclude: tuple[str, ...] = ()
    exclude_rows: tuple[str, ...] = ()
    preregistration: Mapping[str, Any] | None = None
    duplicates: Duplicates = "refuse"
    primary: tuple[Comparison, ...] | None = None
    alpha: float | None = None
    covariates: tuple[str, ...] = ()
    include_non_blind: bool = False

    def __post_init__(self) -> None:
        for name in ("metrics", "reverse", "qc_metrics", "exclude", "exclude_rows", "covariates"):
            object.__setattr__(self, name, _names(getattr(self, name)))
        if self.primary is not None:
            given: Any = self.primary  # a tuple of Comparisons, strings or dicts, or a single one
            items = [given] if isinstance(given, (str, Mapping, Comparison)) else list(given)
            primary = tuple(dict.fromkeys(Comparison.of(c) for c in items))
            object.__setattr__(self, "primary", primary)
            unknown_metrics = sorted({c.metric for c in primary} - {OVERALL, *self.metrics})
            if unknown_metrics:
                raise RatingsError(
                    f"primary comparison(s) on {unknown_metrics}, which are not among the metrics "
                    f"{[*self.metrics]} or {OVERALL!r}"
                )
            if not primary:
                raise RatingsError("an empty list of primary comparisons: leave it unset for the default")
        if self.alpha is not None and not 0 < self.alpha < 1:
            raise RatingsError(f"the significance level alpha must lie between 0 and 1, not {self.alpha!r}")
        if self.value_col and not self.metric_col:
            object.__setattr__(self, "metric_col", "metric")
        if self.metric_col and not self.value_col:
            object.__setattr__(self, "value_col", "score")
        if self.test not in TESTS:
            raise RatingsError(f"unknown test {self.test!r}; choose one of {', '.join(TESTS)}")
        if self.duplicates not in DUPLICATE_POLICIES:
            raise RatingsError(
                f"unknown duplicates policy {self.duplicates!r}; choose one of {', '.join(DUPLICATE_POLICIES)}"
            )
        if self.family not in FAMILIES:
            raise RatingsError(f"unknown Holm family {self.family!r}; choose one of {', '.join(FAMILIES)}")
        if not self.metrics:
            raise RatingsError("no metrics given")
        if len(set(self.metrics)) != len(self.metrics):
            raise RatingsError(f"metrics listed twice: {list(self.metrics)}")
        unknown_rev = [m for m in self.reverse if m not in self.metrics]
        if unknown_rev:
            raise RatingsError(f"reversed metric(s) {unknown_rev} are not among the metrics {list(self.metrics)}")
        if self.qc_arm is None and self.qc_metrics:
            raise RatingsError("QC metrics given without a QC arm")
        unknown_qc = [m for m in self.qc_metrics if m not in self.metrics]
        if unknown_qc:
            raise RatingsError(f"QC metric(s) {unknown_qc} are not among the metrics {list(self.metrics)}")
        flags = [*self.exclude, *self.exclude_rows]
        if self.include_non_blind and NON_BLIND in flags:
            raise RatingsError(f"{NON_BLIND!r} is both an exclusion column and included (include_non_blind)")
        clash = sorted({c for c in flags if c in self.metrics or c in self.key_columns or flags.count(c) > 1})
        if clash:
            raise RatingsError(f"exclusion column(s) {clash} are also used as a key, a metric or twice as a filter")
        used = {*self.metrics, *self.key_columns, *flags}
        clash = sorted({c for c in self.covariates if c in used or self.covariates.count(c) > 1})
        if clash:
            raise RatingsError(f"covariate column(s) {clash} are also used as a key, a metric, a filter or twice")

    @classmethod
    def of(cls, spec: AnalysisSpec | None = None, options: Mapping[str, Any] | None = None) -> AnalysisSpec:
        """``spec`` itself, or a spec built from keyword ``options`` (the fields); not both."""
        options = dict(options or {})
        if spec is not None:
            if options:
                raise TypeError(f"give either a spec or keyword options, not both (got {sorted(options)})")
            return spec
        unknown = sorted(set(options) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"unknown analysis option(s) {unknown}")
        return cls(**options)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return (self.worker, self.unit, self.arm) + ((self.session,) if self.session else ())

    @property
    def effective_qc_metrics(self) -> tuple[str, ...]:
        """The metrics of the QC test: the chosen ones, or every metric."""
        return (self.qc_metrics or self.metrics) if self.qc_arm is not None else ()

    @property
    def effective_alpha(self) -> float:
        """The significance level of the arm comparisons: the set one, else the registered one, else 0.05."""
        if self.alpha is not None:
            return float(self.alpha)
        registered = ((self.preregistration or {}).get("analysis") or {}).get("alpha")
        if isinstance(registered, (int, float)) and not isinstance(registered, bool) and 0 < registered < 1:
            return float(registered)
        return ALPHA

    @property
    def effective_primary(self) -> tuple[tuple[Comparison, ...] | None, str]:
        """The primary comparisons and where they come from: the setting, the pre-registration, or the default
        (None: every metric and the overall score, every pair of arms, over all sessions)."""
        if self.primary is not None:
            return self.primary, "setting"
        registered = ((self.preregistration or {}).get("analysis") or {}).get("primary")
        if registered:
            try:
                items = [registered] if isinstance(registered, (str, Mapping)) else list(registered)
                return tuple(dict.fromkeys(Comparison.of(c) for c in items)), "preregistration"
            except (RatingsError, TypeError) as exc:
                raise RatingsError(f"the pre-registration's primary comparisons cannot be read: {exc}") from exc
        return None, "default"

    def params(self) -> dict[str, Any]:
        """The settings as the report's ``params`` section (JSON-ready; the pre-registration is summarised elsewhere)."""
        out = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in asdict(self).items()
            if k not in ("preregistration", "primary", "alpha")
        }
        out["qc_metrics"] = list(self.effective_qc_metrics)
        out["confidence"] = CONFIDENCE
        out["alpha"] = self.effective_alpha
        out["correction"] = "holm"
        primary, _ = self.effective_primary
        out["primary"] = [c.as_dict() for c in primary] if primary is not None else None
        return out


def with_non_blind_filter(columns: Iterable[str], spec: AnalysisSpec) -> AnalysisSpec:
    """``spec`` with the :data:`NON_BLIND` column added to its row filters when the table has that column and the
    spec neither lists it nor includes non-blind sessions (``include_non_blind``): the default exclusion."""
    if spec.include_non_blind or NON_BLIND not in set(columns) or NON_BLIND in (*spec.exclude, *spec.exclude_rows):
        return spec
    return replace(spec, exclude_rows=(*spec.exclude_rows, NON_BLIND))
