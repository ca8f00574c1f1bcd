"""The study's pairwise design options, as an abstract base of :class:`studies.models.Study` (kept out of
studies/models.py, which holds the study's core fields)."""

from __future__ import annotations

from django.db import models


class SideBySideSettings(models.Model):
    # Live side by side (chat/sidebyside.py, docs/pairwise.md): two arms per episode, one vote per session.
    side_by_side = models.BooleanField(
        default=False,
        help_text="Live side by side: each message goes to two arms at once, shown as chatbots A and B (each with its "
        "own memory over the episode's sessions); the worker votes A, B, tie or both bad after each session, with a "
        "one-line reason. The pair of arms is drawn per episode (balanced; the QC arm is not drawn).",
    )
    side_by_side_sliders = models.BooleanField(
        default=False, help_text="Live side by side: the worker also rates each chatbot on the study's sliders."
    )

    class Meta:
        abstract = True
