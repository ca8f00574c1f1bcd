from __future__ import annotations

from typing import Any

import pytest

from pairwise.models import Comparison
from pairwise.tests.factories import finished_study


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def done_study(study: Any) -> Any:
    return finished_study(study)


@pytest.fixture
def comparison(done_study: Any, researcher: Any) -> Comparison:
    return Comparison.objects.create(
        study=done_study, name="ACUTE", status=Comparison.Status.OPEN, pairs_per_judge=3, checks_per_judge=1,
        questions=["engaging", "remembers"], created_by=researcher,
    )  # fmt: skip
