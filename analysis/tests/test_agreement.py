"""Agreement statistics against the published reference values of notes/statistics-and-reliability.md §A6."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.agreement import (
    counts_from_labels,
    fleiss_kappa,
    krippendorff_alpha,
    krippendorff_alpha_from_counts,
    majority_label,
    per_category_kappa,
)

WIKIPEDIA = [
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]  # fmt: skip

# Fleiss (1971): 30 patients, 6 psychiatrists each, 5 diagnoses (as in statsmodels' test_inter_rater.py)
FLEISS_1971 = [
    [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5], [2, 2, 2, 4, 4, 4],
    [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4], [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5],
    [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4], [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5],
    [3, 3, 3, 3, 3, 5], [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
    [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4], [1, 4, 4, 4, 4, 5],
    [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4], [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5],
]  # fmt: skip

nan = np.nan
# Krippendorff (2011), "Computing Krippendorff's alpha-reliability", p. 8: 4 coders x 12 units with gaps
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
    [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan],
]
# the krippendorff package's docstring example: 3 coders x 15 units
DOCSTRING = [
    [nan, nan, nan, nan, nan, 3, 4, 1, 2, 1, 1, 3, 3, nan, 3],
    [1, nan, 2, 1, 3, 3, 4, 3, nan, nan, nan, nan, nan, nan, nan],
    [nan, nan, 2, 1, 3, 4, 4, nan, 2, 1, 1, 3, 3, nan, 4],
]


def test_fleiss_kappa_reproduces_the_wikipedia_example() -> None:
    assert fleiss_kappa(WIKIPEDIA) == pytest.approx(0.2099, abs=5e-5)


def test_randolph_free_marginal_kappa_reproduces_the_wikipedia_example() -> None:
    assert fleiss_kappa(WIKIPEDIA, method="randolph") == pytest.approx(0.2225, abs=5e-5)


def test_fleiss_kappa_reproduces_fleiss_1971_from_raw_labels() -> None:
    counts = counts_from_labels(FLEISS_1971, categories=[1, 2, 3, 4, 5])
    assert counts.shape == (30, 5)
    assert (counts.sum(axis=1) == 6).all()
    assert fleiss_kappa(counts) == pytest.approx(0.4302445, abs=1e-7)


def test_fleiss_kappa_is_one_for_perfect_agreement_and_nan_when_only_one_category_is_used() -> None:
    perfect = counts_from_labels(
        [["PASS"] * 3, ["DELETE"] * 3, ["APPEND"] * 3], ["PASS", "REPLACE", "APPEND", "DELETE"]
    )
    assert fleiss_kappa(perfect) == pytest.approx(1.0)
    assert np.isnan(fleiss_kappa([[3, 0], [3, 0]]))


def test_fleiss_kappa_refuses_items_with_different_numbers_of_ratings() -> None:
    with pytest.raises(ValueError, match="same number of ratings"):
        fleiss_kappa([[2, 1], [1, 1]])


def test_counts_from_labels_rejects_a_label_outside_the_categories() -> None:
    with pytest.raises(ValueError, match="'APEND'"):
        counts_from_labels([["PASS", "APEND", "PASS"]], ["PASS", "REPLACE", "APPEND", "DELETE"])


@pytest.mark.parametrize(
    ("level", "expected"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849), ("ratio", 0.797)]
)
def test_krippendorff_alpha_reproduces_krippendorff_2011_at_every_level(level: str, expected: float) -> None:
    assert krippendorff_alpha(KRIPPENDORFF_2011, level=level) == pytest.approx(expected, abs=5e-4)


def test_krippendorff_alpha_defaults_to_the_nominal_level() -> None:
    assert krippendorff_alpha(DOCSTRING) == pytest.approx(0.691358, abs=5e-7)
    assert krippendorff_alpha(DOCSTRING, level="interval") == pytest.approx(0.810845, abs=5e-7)


def test_krippendorff_alpha_accepts_string_labels_and_none_for_missing() -> None:
    labels = {1: "PASS", 2: "REPLACE", 3: "APPEND", 4: "DELETE"}
    as_text = [[None if np.isnan(v) else labels[int(v)] for v in row] for row in DOCSTRING]
    assert krippendorff_alpha(as_text) == pytest.approx(0.691358, abs=5e-7)


def test_krippendorff_alpha_from_counts_equals_alpha_from_the_rater_matrix() -> None:
    per_item = [[int(v) for v in col if not np.isnan(v)] for col in np.array(DOCSTRING).T]
    counts = counts_from_labels(per_item, [1, 2, 3, 4])
    assert krippendorff_alpha_from_counts(counts) == pytest.approx(0.691358, abs=5e-7)


def test_krippendorff_alpha_refuses_string_labels_at_the_interval_level() -> None:
    with pytest.raises(ValueError, match="nominal"):
        krippendorff_alpha([["PASS", "DELETE"], ["PASS", "PASS"]], level="interval")


def test_per_category_kappa_is_high_for_a_well_separated_class() -> None:
    labels = [["PASS"] * 3] * 6 + [["DELETE", "DELETE", "APPEND"], ["APPEND", "DELETE", "APPEND"]]
    counts = counts_from_labels(labels, ["PASS", "APPEND", "DELETE"])
    per_class = per_category_kappa(counts, ["PASS", "APPEND", "DELETE"])
    assert per_class["PASS"] == pytest.approx(1.0)
    assert per_class["APPEND"] < 0.5


def test_majority_label_reports_a_three_way_split_as_a_tie() -> None:
    assert majority_label(["APPEND", "DELETE", "REPLACE"]) == (None, True)
    assert majority_label(["APPEND", "DELETE", "APPEND"]) == ("APPEND", False)


def test_majority_label_needs_the_minimum_number_of_votes() -> None:
    assert majority_label(["PASS", "PASS", "APPEND"], min_votes=2) == ("PASS", False)
    assert majority_label(["PASS", "PASS", "APPEND"], min_votes=3) == (None, False)
    assert majority_label(["PASS", "APPEND"], min_votes=1) == (None, True)
    assert majority_label([], min_votes=1) == (None, False)
