"""What to analyse and how: one :class:`AnalysisSpec` instead of the same fourteen keyword arguments everywhere.

``analyze(df, worker=..., unit=..., ...)`` keeps working: the keyword arguments are the spec's fields, and
:meth:`AnalysisSpec.of` turns them into one. The constants the whole library shares live here too, each
defined once (the name of the overall score, the significance level, the confidence level, the tests and the
Holm families).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

OVERALL = "overall"  # the pseudo-metric "mean of all of a unit's scores", next to the real metrics
ALPHA = 0.05  # QC pass level, Holm-adjusted significance level of the marks and families
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


class RatingsError(ValueError):
    """The ratings table (or the way it is to be analysed) cannot be used as given; the message says what to fix."""


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
    checks its own settings against. ``covariates`` names numeric columns reported per arm and put into a mixed
    model beside the arm (:mod:`analysis.covariates`).
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
    covariates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("metrics", "reverse", "qc_metrics", "exclude", "exclude_rows", "covariates"):
            object.__setattr__(self, name, _names(getattr(self, name)))
        if self.value_col and not self.metric_col:
            object.__setattr__(self, "metric_col", "metric")
        if self.metric_col and not self.value_col:
            object.__setattr__(self, "value_col", "score")
        if self.test not in TESTS:
            raise RatingsError(f"unknown test {self.test!r}; choose one of {', '.join(TESTS)}")
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

    def params(self) -> dict[str, Any]:
        """The settings as the report's ``params`` section (JSON-ready; the pre-registration is summarised elsewhere)."""
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if k != "preregistration"}
        out["qc_metrics"] = list(self.effective_qc_metrics)
        out["confidence"] = CONFIDENCE
        out["alpha"] = ALPHA
        out["correction"] = "holm"
        return out
