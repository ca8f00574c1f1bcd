"""Signals of the studies app, for the apps above it.

``participant_erasing``: sent with ``participants`` (a queryset) just before those participants are deleted with
everything they made (chat.privacy.erase_participant, studies.preview.end_previews). A model above chat that keeps a
protected reference to their rows (pairwise's judgements point at episodes) deletes what refers to them here: the
deletion's protection check runs before Django's own pre_delete signals."""

from __future__ import annotations

from django.dispatch import Signal

participant_erasing = Signal()
