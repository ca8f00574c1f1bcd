"""Personal-data flagging (docs/privacy.md, "Personal data in messages"): with ``Study.flag_personal_data`` on, the
worker's messages of a session are scanned when the session ends (job kind ``chat.pii_scan``, lane ``long``: off
the reply path) and what looks like personal data is stored as :class:`chat.models.PersonalDataFlag` rows (the kind
and the span, never a copy of the text) for the researcher to review on the quality page. The transcript is never
changed.

The detector is Microsoft Presidio's analyzer (``presidio-analyzer``) with its pattern recognizers only: e-mail
addresses, phone numbers (Google's libphonenumber), credit-card numbers (Luhn-checked), IBANs (checksum), IP
addresses, URLs, crypto wallets, MAC addresses and the country-specific number formats it ships (US SSN, UK NHS…).
Presidio's names and places come from a spaCy NER model (``en_core_web_lg``), which is published on GitHub, not on
PyPI, so an offline site cannot install it; the analyzer runs with its no-op NLP engine instead (no model, no
download), and names, places and organisations are not flagged. Its import (spaCy's) takes a second or two, so it is
loaded once per process, in the job, never in a request.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat.models import ChatSession, Message, PersonalDataFlag
from runtime import jobs, kinds
from runtime.jobs import Attempt
from runtime.models import Job
from studies.models import Participant

log = logging.getLogger(__name__)

#: What is flagged: presidio's entity names (its pattern recognizers; dates are everyday chat, so not flagged).
ENTITIES = (
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "URL",
    "CRYPTO",
    "MAC_ADDRESS",
    "US_SSN",
    "US_PASSPORT",
    "US_DRIVER_LICENSE",
    "US_BANK_NUMBER",
    "US_ITIN",
    "UK_NHS",
)
LABELS = {
    "EMAIL_ADDRESS": "e-mail address",
    "PHONE_NUMBER": "phone number",
    "CREDIT_CARD": "credit card number",
    "IBAN_CODE": "IBAN",
    "IP_ADDRESS": "IP address",
    "URL": "web address",
    "CRYPTO": "crypto wallet",
    "MAC_ADDRESS": "MAC address",
    "US_SSN": "US social security number",
    "US_PASSPORT": "US passport number",
    "US_DRIVER_LICENSE": "US driver's licence",
    "US_BANK_NUMBER": "US bank account number",
    "US_ITIN": "US taxpayer number",
    "UK_NHS": "UK NHS number",
}
#: Below this presidio score a match is too weak to show (a bare number that merely could be a phone number).
MIN_SCORE = 0.4


@dataclass(frozen=True)
class Found:
    entity: str
    start: int
    end: int
    score: float

    @property
    def label(self) -> str:
        return LABELS.get(self.entity, self.entity.lower().replace("_", " "))


@functools.cache
def analyzer() -> Any:
    """Presidio's analyzer with every predefined pattern recognizer for English and no NLP model (see the module)."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NoOpNlpEngine

    logging.getLogger("presidio-analyzer").setLevel(logging.WARNING)  # it logs every message's analysis at INFO
    nlp = NoOpNlpEngine(models=[{"lang_code": "en", "model_name": "no_op"}])
    registry = RecognizerRegistry(supported_languages=["en"])
    registry.load_predefined_recognizers(nlp_engine=nlp, languages=["en"])
    return AnalyzerEngine(registry=registry, nlp_engine=nlp, supported_languages=["en"])


def find(text: str) -> list[Found]:
    """What in ``text`` looks like personal data, in order; overlapping matches keep the strongest."""
    if not text.strip():
        return []
    results = analyzer().analyze(text=text, language="en", entities=list(ENTITIES), score_threshold=MIN_SCORE)
    kept: list[Found] = []
    for r in sorted(results, key=lambda r: (-r.score, r.start, -(r.end - r.start))):
        if any(r.start < k.end and k.start < r.end for k in kept):
            continue  # an e-mail address's domain is a URL too: the e-mail address wins
        kept.append(Found(r.entity_type, int(r.start), int(r.end), round(float(r.score), 3)))
    return sorted(kept, key=lambda f: f.start)


def scan_session(session_id: int) -> int:
    """Scan the worker's messages of one session and store what was found (again from scratch: idempotent)."""
    session = ChatSession.objects.select_related("episode__participant__study").get(pk=session_id)
    messages = list(session.messages.filter(speaker=Message.Speaker.USER).only("pk", "text").order_by("seq"))
    found = [(m, f) for m in messages for f in find(m.text)]
    with transaction.atomic():
        PersonalDataFlag.objects.filter(message__session=session).delete()
        PersonalDataFlag.objects.bulk_create(
            PersonalDataFlag(message=m, entity=f.entity, start=f.start, end=f.end, score=f.score) for m, f in found
        )
        ChatSession.objects.filter(pk=session.pk).update(pii_scanned_at=timezone.now())
    return len(found)


def run_scan(job: Job, attempt: Attempt, handed: Any = None) -> dict[str, Any]:
    attempt.check()
    return {"flags": scan_session(int(job.target))}


SCAN = kinds.declare("chat.pii_scan", lane="long", run=run_scan, label="personal-data scan")


def submit_scan(session: ChatSession) -> Job | None:
    """Queue the scan of an ended session when its study flags personal data (not for a researcher's preview)."""
    participant = session.episode.participant
    if not participant.study.flag_personal_data or participant.source == Participant.Source.PREVIEW:
        return None
    return jobs.submit(
        SCAN, session.pk, scope=f"study:{participant.study_id}",
        label=f"personal-data scan of session {session.index} of episode {session.episode_id}",
    )  # fmt: skip


def unscanned_sessions(study_id: int) -> list[int]:
    """Ended sessions of the study's workers (not previews) that were never scanned (flagging turned on later)."""
    qs = ChatSession.objects.filter(
        episode__participant__study_id=study_id,
        status__in=[ChatSession.Status.RATING, ChatSession.Status.DONE],
        pii_scanned_at__isnull=True,
    ).exclude(episode__participant__source=Participant.Source.PREVIEW)
    return list(qs.order_by("pk").values_list("pk", flat=True))


@dataclass
class FlagRow:
    flag: PersonalDataFlag
    worker: str
    episode: int
    session: int
    before: str
    found: str
    after: str

    @property
    def label(self) -> str:
        return LABELS.get(self.flag.entity, self.flag.entity)


def study_flags(study_id: int, limit: int = 200) -> list[FlagRow]:
    """The study's flags for the quality page, newest first, each with a little of the message around it."""
    flags = (
        PersonalDataFlag.objects.filter(message__session__episode__participant__study_id=study_id)
        .exclude(message__session__episode__participant__source=Participant.Source.PREVIEW)
        .select_related("message__session__episode__participant")
        .order_by("-message__created_at", "start")[:limit]
    )
    rows = []
    for f in flags:
        text, session = f.message.text, f.message.session
        rows.append(FlagRow(f, session.episode.participant.pseudonym, session.episode_id, session.index,
                            text[max(0, f.start - 40):f.start], text[f.start:f.end], text[f.end:f.end + 40]))  # fmt: skip
    return rows
