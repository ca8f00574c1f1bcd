"""The blinding-breach scan of a study: every bot turn of every session through analysis.blinding.

The study's arm names and memory-system keys are what the scanner looks for besides vendor names,
memory-tool words, JSON and prompt fragments. A session with a breach is non-blind: the scan sets
``ChatSession.non_blind``, so the study's analysis (dashboard, exports, the human-automatic table) leaves its
ratings out by default as a row filter and counts it per arm, and the judges page lists it with the turn's text.
The scan is idempotent (a breach is stored once per message, kind and term) and cheap (regular expressions).
"""

from __future__ import annotations

from collections import Counter

from django.db import transaction

from analysis.blinding import Scanner
from chat.models import ChatSession, Message
from judges.models import BlindingBreach
from memory.registry import MEMORY_SYSTEMS
from studies.models import Study


def arm_names(study: Study) -> list[str]:
    names: set[str] = set()
    for arm in study.arms.all():
        names.add(arm.name)
        names.add(arm.memory_system)
    # the distinctive names of every registered system (a worker may know them), not their labels
    # ("Without memory", "Memory update" are ordinary words in a chat)
    names |= {k for k in MEMORY_SYSTEMS if k not in ("none", "qc", "tim")}
    return sorted(names | set(SYSTEM_NAMES))


SYSTEM_NAMES = ("memgpt", "letta", "a-mem", "ld-agent", "think-in-memory", "llm-rsum", "mem0")


def scan_study(study: Study) -> int:
    """Scan every bot turn of the study; returns the number of breaches stored now (new ones)."""
    scanner = Scanner(arm_names(study))
    messages = Message.objects.filter(session__episode__participant__study=study, speaker="bot").exclude(text="")
    new = []
    for message_id, session_id, text in messages.values_list("id", "session_id", "text").iterator():
        for breach in scanner.scan(text):
            new.append(
                BlindingBreach(
                    session_id=session_id, message_id=message_id, kind=breach.kind, term=breach.term,
                    excerpt=breach.excerpt,
                )
            )  # fmt: skip
    breaches = BlindingBreach.objects.filter(session__episode__participant__study=study)
    with transaction.atomic():
        before = breaches.count()
        BlindingBreach.objects.bulk_create(new, ignore_conflicts=True)
        found = breaches.count() - before
        # the flag the analysis filters on: exactly the sessions with a stored breach
        flagged = breaches.values("session_id")
        sessions = ChatSession.objects.filter(episode__participant__study=study)
        sessions.filter(pk__in=flagged, non_blind=False).update(non_blind=True)
        sessions.filter(non_blind=True).exclude(pk__in=flagged).update(non_blind=False)
    return found


def non_blind_sessions(study: Study) -> set[int]:
    """The study's sessions marked non-blind by the last scan."""
    return set(
        ChatSession.objects.filter(episode__participant__study=study, non_blind=True).values_list("pk", flat=True)
    )


def non_blind_per_arm(study: Study) -> dict[str, int]:
    """Non-blind sessions per arm (arms without one left out)."""
    rows = ChatSession.objects.filter(episode__participant__study=study, non_blind=True).values_list(
        "episode__arm__name", flat=True
    )
    return dict(sorted(Counter(rows).items()))
