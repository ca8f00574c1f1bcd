"""The blinding-breach scan of a study: every bot turn of every session through analysis.blinding.

The study's arm names and memory-system keys are what the scanner looks for besides vendor names,
memory-tool words, JSON and prompt fragments. A session with a breach is non-blind: the human-automatic
table leaves it out by default and counts it per arm, and the judges page lists it with the turn's text.
The scan is idempotent (a breach is stored once per message, kind and term) and cheap (regular expressions).
"""

from __future__ import annotations

from collections import Counter

from analysis.blinding import Scanner
from chat.models import Message
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
    before = BlindingBreach.objects.filter(session__episode__participant__study=study).count()
    BlindingBreach.objects.bulk_create(new, ignore_conflicts=True)
    return BlindingBreach.objects.filter(session__episode__participant__study=study).count() - before


def non_blind_sessions(study: Study) -> set[int]:
    return set(
        BlindingBreach.objects.filter(session__episode__participant__study=study).values_list("session_id", flat=True)
    )


def non_blind_per_arm(study: Study) -> dict[str, int]:
    rows = (
        BlindingBreach.objects.filter(session__episode__participant__study=study)
        .order_by()
        .values_list("session_id", "session__episode__arm__name")
        .distinct()
    )
    return dict(Counter(arm for _sid, arm in rows))
