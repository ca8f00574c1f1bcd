"""How a number is written in every report format: an estimate, a p-value, a confidence interval ("–" for
none). Its own module so that the modules the writers import (covariates, comparisons) can write numbers too
without importing the writers back (tests/test_house_rules.py: no import circle); ``analysis.writers``
re-exports them."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt", "fmt_ci", "fmt_p"]


def fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}f}"


def fmt_p(p: Any) -> str:
    if p is None:
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_ci(ci: list[Any], digits: int = 3) -> str:
    if not ci or ci[0] is None:
        return "–"
    return f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"
