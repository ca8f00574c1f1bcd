"""Signals of the studies app, for the apps above it.

``participant_erasing``: sent with ``participants`` (a queryset) just before those participants are deleted with
everything they made (chat.privacy.erase_participant, studies.preview.end_previews). A model above chat that keeps a
protected reference to their rows (pairwise's judgements point at episodes) deletes what refers to them here: the
deletion's protection check runs before Django's own pre_delete signals.

``transcripts_deleting``: sent with ``participants`` just before their transcripts are deleted while they stay
(chat.privacy.delete_transcripts, a study's retention sweep): an app above chat that copied their words (annotation's
judge-sample items quote a session's transcript) deletes the copy here.

``participant_pseudonymising``: sent with ``participants`` when their raw IDs are dropped while their data stays
(chat.privacy.pseudonymise, a study's retention sweep): an app above chat that copied a raw ID (prolific's
submissions keep the Prolific ID and the submission's id) blanks its copy here."""

from __future__ import annotations

from django.dispatch import Signal

participant_erasing = Signal()
transcripts_deleting = Signal()
participant_pseudonymising = Signal()

#: ``retention_sweeping``: sent with ``study`` and ``before`` (a datetime: now less the study's retention period) by the
#: retention sweep (chat.privacy.sweep_retention), after the study's participants. An app above chat that keeps the raw
#: IDs of people of the study who are not its participants (pairwise's judges: their Prolific IDs) drops those of the
#: ones last seen before ``before``, once each with an audit record, and answers ``{kind: how many}``.
retention_sweeping = Signal()

#: ``participant_footprint``: sent with ``participants`` (a queryset) to count what deleting them removes. Each app above
#: chat answers ``{kind: rows}`` for its rows that go with them (at ``participant_erasing`` or by cascade from their
#: sessions), so that the deletion's summary and its audit record name everything (chat.privacy.footprint).
participant_footprint = Signal()

#: ``later_wave``: sent with ``study``, ``recorded`` (the Prolific STUDY_ID a participant's first link carried) and
#: ``arriving`` (the STUDY_ID of a link with the same Prolific ID but another submission); a receiver answers True
#: when ``arriving`` is a later wave of the same study (prolific/entry.py: ``prolific.Wave``). Then the new
#: submission continues that participation (studies/entry.py) instead of starting one of its own.
later_wave = Signal()
