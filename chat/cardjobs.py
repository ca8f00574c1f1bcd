"""The offline card evaluation of a study's arm, run from the study page (an :class:`~chat.models.ArmJob` of kind
``cards``, runtime kind ``chat.card_evaluation``, lane ``long``; chat/armjobs.py starts it and runs its attempts).

It is ``python -m memory eval ARM --dataset cards`` on the study's own card bank and event script
(:meth:`studies.models.Study.persona_bank`, :meth:`~studies.models.Study.persona_script`), against the arm's
configured backend, model and endpoint (as its chat replies), with the arm's parameters: a scripted user plays
each card through the script, the arm replies and updates its memory, and every probe is scored as the live
study scores it (memory/cardeval.py). The report puts its rates beside the live ones (analysis.probes,
``offline``).

Resumable: the run's journal (memory.evaljournal records) is kept on the record and written after each finished
card, so an attempt that takes over a lost run, or a new run started after one failed (same arm configuration,
bank and script), skips the cards already finished and keeps their probes.
"""

from __future__ import annotations

import logging
from typing import Any

from chat.arms import evaluation_options, evaluation_timeout
from chat.models import ArmJob
from memory.evaljournal import DatasetError, Journal
from memory.llm import LLM
from memory.llmwrap import CheckedLLM
from runtime.jobs import Attempt
from runtime.models import Job

log = logging.getLogger(__name__)

#: The journal records written to the database as they come (the probes of a card go with its ``card`` record).
_FLUSHED = ("header", "card")


class StoredJournal(Journal):
    """A :class:`~memory.evaljournal.Journal` kept on an :class:`ArmJob` (``journal``) instead of a file: written
    after each finished card, while the attempt still holds its job. A journal of a run with other settings
    (the arm, bank or script changed) is dropped and the run starts afresh."""

    def __init__(self, record: ArmJob, attempt: Attempt | None = None) -> None:
        super().__init__(None)
        self.record, self.attempt = record, attempt
        self.records = list(record.journal or [])
        self.restarted = False

    def add(self, record: dict[str, Any]) -> None:
        super().add(record)
        if record.get("kind") in _FLUSHED:
            self.flush()

    def flush(self) -> None:
        if self.attempt is not None:
            self.attempt.check()  # a run that lost its job writes nothing
        ArmJob.objects.filter(pk=self.record.pk).update(journal=self.records)

    def start(self, settings: dict[str, Any]) -> None:
        try:
            super().start(settings)
        except DatasetError:
            self.records, self.restarted = [], True
            super().start(settings)

    @property
    def finished_cards(self) -> list[str]:
        return [str(r["dialogue"]) for r in self.records if r.get("kind") == "card"]


def seed_journal(record: ArmJob) -> None:
    """Give a new card evaluation the journal of the arm's newest failed one run on the same configuration, so it
    goes on where that one stopped (its header must still match the new run's settings, else it starts afresh)."""
    failed = (
        ArmJob.objects.filter(arm=record.arm, kind=ArmJob.Kind.CARDS, job__status=Job.Status.FAILED)
        .exclude(pk=record.pk)
        .order_by("-created_at", "-id")
        .first()
    )
    if failed is not None and failed.journal and failed.config == record.config:
        record.journal = list(failed.journal)
        record.save(update_fields=["journal"])


def run_cards(record: ArmJob, attempt: Attempt, wrap: Any) -> dict[str, Any]:
    """One attempt of an offline card evaluation: the result (memory.cardeval's, with ``items``) and how many
    cards an earlier attempt or run had finished (``resumed_cards``). ``wrap(llm)`` guards the model calls."""
    from memory import cardeval

    arm = record.arm
    study = arm.study
    journal = StoredJournal(record, attempt)
    kept = journal.finished_cards
    max_cards = record.options.get("max_cards")

    def guarded(llm: LLM) -> LLM:
        return wrap(llm) if wrap is not None else CheckedLLM(llm, check=attempt.check)

    result = cardeval.run(
        arm.memory_system,
        study.persona_bank(),
        script=study.persona_script(),
        max_cards=int(max_cards) if max_cards else None,
        progress=attempt.progress,
        wrap_llm=guarded,
        journal=journal,
        timeout=evaluation_timeout(arm),
        **evaluation_options(arm),
    )
    result["resumed_cards"] = [] if journal.restarted else kept
    return result
