"""The worker's rating form: one 0-100 slider per metric of the study, and the session's attention checks
(instructed-response items, ``studies.models.AttentionCheck``) placed among them, looking the same."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from studies.models import AttentionCheck, Metric

SLIDER_START = 50  # where an unmoved slider sits; the value a worker must actively confirm


@dataclass(frozen=True)
class SliderRow:
    """What the rating page shows for one metric."""

    metric: Metric | AttentionCheck  # both have key, statement, low_label and high_label
    value: int
    touched: bool
    error: str


class WholeNumberField(forms.IntegerField):
    """An integer written as plain ASCII digits (an optional minus sign): Django's IntegerField goes
    through Python's ``int()``, which also reads ``1_0`` as 10, ``10.0`` as 10 and other scripts' digits."""

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        text = str(value).strip()
        if not re.fullmatch(r"-?[0-9]{1,9}", text):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return int(text)


class RatingForm(forms.Form):
    """Every slider must hold a whole number from 0 to 100 *and* have been moved (``touched_<key>`` is
    ``"1"``): an untouched slider at 50 is no rating. The page's script sets ``touched_<key>`` when the
    slider moves; without JavaScript the worker ticks a box next to each slider instead."""

    def __init__(
        self,
        metrics: Iterable[Metric],
        data: Any = None,
        *,
        checks: Iterable[AttentionCheck] = (),
        seed: int = 0,
    ) -> None:
        super().__init__(data)
        self.metrics = list(metrics)
        self.checks = list(checks)
        # Each check goes among the metrics at a place fixed by ``seed`` (the session): never first, so it is
        # met after the worker has seen what the sliders are about, and the same on every reload.
        self.items: list[Metric | AttentionCheck] = list(self.metrics)
        rng = random.Random(seed)
        for c in self.checks:
            self.items.insert(rng.randint(min(1, len(self.items)), len(self.items)), c)
        for m in self.items:
            self.fields[m.key] = WholeNumberField(
                min_value=0,
                max_value=100,
                error_messages={
                    "required": "Please rate this statement.",
                    "invalid": "The rating must be a whole number from 0 to 100.",
                    "min_value": "The rating must be between 0 and 100.",
                    "max_value": "The rating must be between 0 and 100.",
                },
            )

    def _touched(self, key: str) -> bool:
        # Without JavaScript both the hidden field and the checkbox are posted under the same name.
        name = f"touched_{key}"
        values = self.data.getlist(name) if hasattr(self.data, "getlist") else [self.data.get(name)]
        return "1" in [str(v) for v in values]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for m in self.items:
            if m.key in data and not self._touched(m.key):
                self.add_error(
                    m.key, "Please move this slider to give your rating (even if you then set it back to 50)."
                )
        return data

    def values(self) -> dict[int, int]:
        """The valid ratings by metric id (call after ``is_valid()``)."""
        return {m.pk: self.cleaned_data[m.key] for m in self.metrics}

    def attention_values(self) -> dict[int, int]:
        """The answers to the attention checks by check id (call after ``is_valid()``)."""
        return {c.pk: self.cleaned_data[c.key] for c in self.checks}

    def rows(self) -> list[SliderRow]:
        """One row per slider: the value to show (the posted one when it is valid, else 50), whether it
        counts as moved, and its error."""
        rows = []
        for m in self.items:
            raw = str(self.data.get(m.key, "")) if self.is_bound else ""
            value = int(raw) if raw.isascii() and raw.isdigit() and int(raw) <= 100 else SLIDER_START
            error = " ".join(str(e) for e in self.errors.get(m.key, [])) if self.is_bound else ""
            touched = self.is_bound and self._touched(m.key) and not error
            rows.append(SliderRow(metric=m, value=value, touched=touched, error=error))
        return rows
