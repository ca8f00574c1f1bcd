"""Inter-annotator agreement for categorical labels (memory-operation pairs and similar judgements).

Thin, checked wrappers around the library implementations: Fleiss' kappa from statsmodels and
Krippendorff's alpha from the ``krippendorff`` package. Krippendorff's own default level of measurement is
"interval"; for operation labels (PASS/REPLACE/APPEND/DELETE) the right level is "nominal", which is our
default here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import krippendorff
import numpy as np
from statsmodels.stats import inter_rater

Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS: tuple[str, ...] = ("nominal", "ordinal", "interval", "ratio")


def counts_from_labels(labels_per_item: Sequence[Sequence[Hashable]], categories: Sequence[Hashable]) -> np.ndarray:
    """Turn the labels each item received into an items x categories count matrix.

    ``labels_per_item[i]`` is the list of labels given to item ``i`` (any number, any annotators);
    the column order is ``categories``. A label outside ``categories`` raises ``ValueError``: a typo in a
    label must not silently vanish from the agreement.
    """
    cats = list(categories)
    if len(set(cats)) != len(cats):
        raise ValueError(f"categories contain duplicates: {cats}")
    index = {c: k for k, c in enumerate(cats)}
    counts = np.zeros((len(labels_per_item), len(cats)), dtype=int)
    for i, labels in enumerate(labels_per_item):
        for label in labels:
            if label not in index:
                raise ValueError(f"item {i}: label {label!r} is not one of the categories {cats}")
            counts[i, index[label]] += 1
    return counts


def fleiss_kappa(counts: Any, method: Literal["fleiss", "randolph"] = "fleiss") -> float:
    """Fleiss' kappa of an items x categories count matrix (statsmodels ``fleiss_kappa``).

    Every item must have the same number of ratings (Fleiss' assumption; the raters need not be the same
    people). ``method="randolph"`` gives the free-marginal kappa. Returns NaN when agreement is undefined
    (e.g. every rating falls in one category, so chance agreement is 1).
    """
    table = np.asarray(counts, dtype=float)
    if table.ndim != 2 or table.shape[0] == 0 or table.shape[1] == 0:
        raise ValueError(f"counts must be a non-empty items x categories matrix, got shape {table.shape}")
    if (table < 0).any():
        raise ValueError("counts must be non-negative")
    per_item = table.sum(axis=1)
    if per_item.min() != per_item.max():
        raise ValueError(
            "Fleiss' kappa needs the same number of ratings per item; got between "
            f"{int(per_item.min())} and {int(per_item.max())} (use krippendorff_alpha for unequal counts)"
        )
    if per_item[0] < 2:
        raise ValueError("Fleiss' kappa needs at least 2 ratings per item")
    if method == "fleiss":
        p_cat = table.sum(axis=0) / table.sum()
        if np.isclose((p_cat**2).sum(), 1.0):
            return float("nan")  # all ratings in one category: chance agreement is 1, kappa undefined
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(inter_rater.fleiss_kappa(table, method=method))


def krippendorff_alpha(data: Any, level: Level = "nominal") -> float:
    """Krippendorff's alpha of a raters x items matrix, NaN (or None) marking a missing rating.

    Cells may be numbers or, for the nominal level, any labels (strings are mapped to codes first).
    Items rated by fewer than two raters are ignored by the coefficient, as Krippendorff defines it.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    matrix = _as_reliability_matrix(data, level)
    if matrix.ndim != 2 or matrix.shape[0] < 2:
        raise ValueError("reliability data must be a raters x items matrix with at least 2 raters")
    pairable = (~np.isnan(matrix)).sum(axis=0) >= 2
    if not pairable.any():
        raise ValueError("no item was rated by two or more raters")
    values = np.unique(matrix[:, pairable][~np.isnan(matrix[:, pairable])])
    if values.size < 2:
        return float("nan")  # a single value in the data: disagreement and expected disagreement are both 0
    return float(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level))


def krippendorff_alpha_from_counts(counts: Any, level: Level = "nominal") -> float:
    """Krippendorff's alpha from an items x categories count matrix (no rater identity needed).

    Convenient for queue data where each item got labels from whichever annotators claimed it; unequal
    numbers of labels per item are fine.
    """
    table = np.asarray(counts, dtype=float)
    if table.ndim != 2 or table.shape[1] < 2:
        raise ValueError(f"counts must be an items x categories matrix with >= 2 categories, got {table.shape}")
    pairable = table.sum(axis=1) >= 2
    if not pairable.any():
        raise ValueError("no item has two or more labels")
    if np.count_nonzero(table[pairable].sum(axis=0)) < 2:
        return float("nan")
    return float(krippendorff.alpha(value_counts=table, level_of_measurement=level))


def per_category_kappa(counts: Any, categories: Sequence[Hashable]) -> dict[Hashable, float]:
    """One-vs-rest Fleiss' kappa per category (how reliably each label is recognised)."""
    table = np.asarray(counts, dtype=float)
    if table.shape[1] != len(categories):
        raise ValueError("counts has a different number of columns than categories")
    out: dict[Hashable, float] = {}
    total = table.sum(axis=1, keepdims=True)
    for k, cat in enumerate(categories):
        binary = np.hstack([table[:, [k]], total - table[:, [k]]])
        out[cat] = fleiss_kappa(binary)
    return out


def majority_label(labels: Sequence[Hashable], min_votes: int = 1) -> tuple[Hashable | None, bool]:
    """The strict-majority label of one item and whether the vote was a tie.

    Returns ``(label, False)`` when one label has more votes than every other and at least ``min_votes``,
    ``(None, True)`` for a tie (e.g. a 1/1/1 split of three votes; ties go to adjudication, never to an
    arbitrary pick) and ``(None, False)`` when the leader has fewer than ``min_votes`` votes (or there are none).
    """
    if not labels:
        return None, False
    ranked = Counter(labels).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None, True
    if ranked[0][1] < min_votes:
        return None, False
    return ranked[0][0], False


def _as_reliability_matrix(data: Any, level: str) -> np.ndarray:
    arr = np.asarray(data, dtype=object)
    if arr.ndim != 2:
        raise ValueError("reliability data must be 2-dimensional (raters x items)")
    flat = arr.ravel()
    missing = np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in flat], dtype=bool)
    present = flat[~missing]
    if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in present):
        out = np.full(flat.shape, np.nan)
        out[~missing] = present.astype(float)
        return out.reshape(arr.shape)
    if level != "nominal":
        raise ValueError(f"non-numeric labels only make sense at the nominal level, not {level!r}")
    codes = {v: k for k, v in enumerate(sorted({str(v) for v in present}))}
    out = np.full(flat.shape, np.nan)
    out[~missing] = [codes[str(v)] for v in present]
    return out.reshape(arr.shape)
