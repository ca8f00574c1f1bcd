"""``best_attainable_p``: the smallest p-value the per-worker QC test can give, the study form's design check."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.data import ARM, UNIT, WORKER
from analysis.qc import best_attainable_p, quality_control


@pytest.mark.parametrize("n_qc,n_other", [(1, 1), (3, 3), (5, 5), (5, 10), (10, 10)])
def test_best_attainable_p_is_what_the_qc_test_gives_a_perfectly_attentive_worker(n_qc: int, n_other: int) -> None:
    # one metric: every QC rating below every other rating, no ties
    frame = pd.DataFrame(
        {
            WORKER: ["w"] * (n_qc + n_other),
            UNIT: ["u1"] * n_qc + ["u2"] * n_other,
            ARM: ["qc"] * n_qc + ["real"] * n_other,
            "m": [float(i) for i in range(n_qc + n_other)],
        }
    )
    [check] = quality_control(frame, qc_arm="qc", qc_metrics=["m"], all_metrics=["m"])
    assert check.p == pytest.approx(best_attainable_p(n_qc, n_other))


def test_a_design_with_three_qc_ratings_against_three_cannot_reach_alpha_and_five_against_five_can() -> None:
    assert best_attainable_p(3, 3) >= 0.05 > best_attainable_p(5, 5)
    assert best_attainable_p(0, 5) == 1.0
