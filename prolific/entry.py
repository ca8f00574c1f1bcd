"""A worker's link to a later wave continues their participation (studies/entry.py asks through
``studies.signals.later_wave``): each wave is a Prolific study of its own, so the worker arrives with a new
STUDY_ID and a new SESSION_ID (submission), which studies/entry.py would otherwise take for a second person
using the same Prolific ID."""

from __future__ import annotations

from typing import Any

from prolific.models import Wave
from studies.models import Study
from studies.signals import later_wave


def is_later_wave(sender: Any, *, study: Study, recorded: str, arriving: str, **kwargs: Any) -> bool:
    """Whether STUDY_ID ``arriving`` is a later wave of ``study`` than ``recorded`` (both waves of ``study``)."""
    numbers = dict(
        Wave.objects.filter(study=study, prolific_study_id__in=[recorded, arriving]).values_list(
            "prolific_study_id", "number"
        )
    )
    return recorded in numbers and arriving in numbers and numbers[arriving] > numbers[recorded]


def connect() -> None:
    later_wave.connect(is_later_wave, dispatch_uid="prolific.entry")
