"""The leniency control set (memory/leniency.py: Django-free, since ``memory eval`` prints each judge's
false-acceptance rate beside its scores too)."""

from __future__ import annotations

from memory.leniency import CLASSES, DATA, ControlCase, control_cases, perturb

__all__ = ["CLASSES", "DATA", "ControlCase", "control_cases", "perturb"]
