"""The worker's rating form: one 0-100 slider per metric of the study, and the session's attention checks
(instructed-response items, ``studies.models.AttentionCheck``) placed among them, looking the same.

Looking the same down to the markup (issue 21: the check's field was named ``check.<id>`` and its statement
carried the target, so a random-rating script found it and set it right): every slider's field has a name of
the same form, ``r`` and 12 hex digits, derived from the session and the item with the site's secret
(:func:`field_name`: stable across reloads, meaningless to the page), and the digits of every statement are
drawn, not written (chat/glyphs.py)."""

from __future__ import annotations

import hashlib
import hmac
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.safestring import SafeString

from chat.glyphs import statement_html
from studies.models import AttentionCheck, Metric

SLIDER_START = 50  # where an unmoved slider sits; the value a worker must actively confirm


@dataclass(frozen=True)
class SliderRow:
    """What the rating page shows for one metric."""

    metric: Metric | AttentionCheck  # both have key, statement, low_label and high_label
    name: str  # the form field's name (field_name): the same form for metrics and checks
    statement: SafeString  # escaped, its digits drawn
    value: int
    touched: bool
    error: str


def field_name(seed: int, item: Metric | AttentionCheck) -> str:
    """The rating form's field name of ``item`` on the page of session ``seed``: ``r`` + 12 hex digits of an
    HMAC, so neither the item's kind nor its key can be read from it."""
    kind = "check" if isinstance(item, AttentionCheck) else "metric"
    message = f"memeval.rating:{seed}:{kind}:{item.pk}".encode()
    return "r" + hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()[:12]


class WholeNumberField(forms.IntegerField):
    """An integer written as plain ASCII digits (an optional minus sign): Django's IntegerField goes
    through Python's ``int()``, which also reads ``1_0`` as 10, ``10.0`` as 10 and other scripts' digits."""

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        text = str(value).strip()
        if len(text) > 10 or not re.fullmatch(r"-?[0-9]{1,9}", text):
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
        self.names = {id(m): field_name(seed, m) for m in self.items}
        for m in self.items:
            self.fields[self.name(m)] = WholeNumberField(
                min_value=0,
                max_value=100,
                error_messages={
                    "required": "Please rate this statement.",
                    "invalid": "The rating must be a whole number from 0 to 100.",
                    "min_value": "The rating must be between 0 and 100.",
                    "max_value": "The rating must be between 0 and 100.",
                },
            )

    def name(self, item: Metric | AttentionCheck) -> str:
        return self.names[id(item)]

    def _touched(self, key: str) -> bool:
        # Without JavaScript both the hidden field and the checkbox are posted under the same name.
        name = f"touched_{key}"
        values = self.data.getlist(name) if hasattr(self.data, "getlist") else [self.data.get(name)]
        return "1" in [str(v) for v in values]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for m in self.items:
            name = self.name(m)
            if name in data and not self._touched(name):
                self.add_error(
                    name, "Please move this slider to give your rating (even if you then set it back to 50)."
                )
        return data

    def values(self) -> dict[int, int]:
        """The valid ratings by metric id (call after ``is_valid()``)."""
        return {m.pk: self.cleaned_data[self.name(m)] for m in self.metrics}

    def attention_values(self) -> dict[int, int]:
        """The answers to the attention checks by check id (call after ``is_valid()``)."""
        return {c.pk: self.cleaned_data[self.name(c)] for c in self.checks}

    def rows(self) -> list[SliderRow]:
        """One row per slider: the value to show (the posted one when it is valid, else 50), whether it
        counts as moved, and its error."""
        rows = []
        for m in self.items:
            name = self.name(m)
            raw = str(self.data.get(name, "")) if self.is_bound else ""
            # a posted value is shown again only when it is a plain 0-100 (never int() of a 5,000-digit string)
            value = int(raw) if len(raw) <= 3 and raw.isascii() and raw.isdigit() and int(raw) <= 100 else SLIDER_START
            error = " ".join(str(e) for e in self.errors.get(name, [])) if self.is_bound else ""
            touched = self.is_bound and self._touched(name) and not error
            statement = statement_html(m.statement)
            rows.append(SliderRow(metric=m, name=name, statement=statement, value=value, touched=touched, error=error))
        return rows
