"""Persona cards: fictional people whose facts a worker (or the scripted user) brings into the chat.

A **card bank** (``memory/data/cards/bank.json``, or any file in the same format) defines *slots* (city,
job, pet, ...: a label, the probe question, how the user says it) and *cards* (one fictional person:
a value for each slot, with aliases that count as the same answer, and optionally the value the slot
takes when it is updated). A per-study **event script** says, per session, which facts are brought up
(``mention``), changed (``update``: "I've moved to Lisbon"), revealed for the first time (``add``),
asked to be forgotten (``forget``; it also removes the facts that depend on it, e.g. the pet's name
with the pet) and checked in the chat (``probe``).

:func:`plan_episode` applies a script to a card: what the card shows in each session and what changed
since the last one, the worker's tasks (with the sentence the scripted user says), and after each
session the state of every fact told so far, from which :func:`probes_after` makes the probes
(:mod:`memory.probes` scores them). Everything here is plain data and Django-free.

Bank format (``"format": "memeval-cards/1"``)::

    {"format": "memeval-cards/1", "name": "...", "version": "1", "provenance": "...", "licence": "...",
     "slots": {"city": {"label": "City", "question": "Which city do I live in?", "say": "I live in {value}.",
                        "update_say": "I've moved to {value}!", "forget_say": "...", "card": "You live in {value}.",
                        "depends_on": null, "free_text": false}, ...},
     "cards": [{"id": "c01", "facts": {"city": {"value": "Porto", "aliases": ["Oporto"],
                                                "update": {"value": "Lisbon", "aliases": ["Lisboa"]}},
                                       "sibling": {"value": "Adaeze", "vars": {"relation": "sister"}}, ...}}]}

Templates (``question``, ``say``, ``update_say``, ``forget_say``, ``card``) may use ``{value}``,
``{a_value}`` (with "a"/"an"), ``{label}``, the fact's ``vars`` and the current value of any other
fact of the card by its slot (``{pet}``). Script format (``"format": "memeval-card-script/1"``)::

    {"format": "memeval-card-script/1", "sessions": 3,
     "events": [{"session": 1, "op": "mention", "slot": "city"}, {"session": 2, "op": "update", "slot": "city"},
                {"session": 2, "op": "add", "slot": "plan"}, {"session": 3, "op": "forget", "slot": "pet"},
                {"session": 3, "op": "probe", "slot": "city"}]}
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

CARDS_DIR = Path(__file__).resolve().parent / "data" / "cards"
BANK_FORMAT = "memeval-cards/1"
SCRIPT_FORMAT = "memeval-card-script/1"
OPS = ("mention", "update", "add", "forget", "probe")
Op = Literal["mention", "update", "add", "forget", "probe"]
Kind = Literal["current", "updated", "forgotten"]

DEFAULT_FORGET = "Could you please forget what I told you about my {label_lower}? I'd rather you didn't keep it."
DEFAULT_UPDATE = "Something changed since we last talked: my {label_lower} is {value} now."
MAX_CARDS = 500
MAX_BANK_BYTES = 2_000_000


class CardError(ValueError):
    """A card bank or event script that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Value:
    """A fact's value and the other spellings that count as the same answer."""

    value: str
    aliases: tuple[str, ...] = ()

    @property
    def forms(self) -> tuple[str, ...]:
        return (self.value, *self.aliases)

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "aliases": list(self.aliases)}


@dataclass(frozen=True)
class Slot:
    key: str
    label: str
    question: str
    say: str
    card: str
    update_say: str = DEFAULT_UPDATE
    forget_say: str = DEFAULT_FORGET
    depends_on: str | None = None
    free_text: bool = False


@dataclass(frozen=True)
class Fact:
    slot: str
    value: Value
    update: Value | None = None
    vars: Mapping[str, str] = field(default_factory=dict)
    question: str | None = None  # overrides the slot's
    say: str | None = None
    update_say: str | None = None


@dataclass(frozen=True)
class Card:
    id: str
    facts: Mapping[str, Fact]
    title: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "facts": {}}
        if self.title:
            out["title"] = self.title
        for key, f in self.facts.items():
            d: dict[str, Any] = f.value.as_dict()
            if f.update is not None:
                d["update"] = f.update.as_dict()
            for name in ("question", "say", "update_say"):
                if getattr(f, name):
                    d[name] = getattr(f, name)
            if f.vars:
                d["vars"] = dict(f.vars)
            out["facts"][key] = d
        return out


@dataclass
class Bank:
    name: str
    version: str
    provenance: str
    licence: str
    slots: dict[str, Slot]
    cards: list[Card]
    sha256: str = ""
    source: str = ""

    def card(self, card_id: str) -> Card:
        for c in self.cards:
            if c.id == card_id:
                return c
        raise CardError(f"no card {card_id!r} in the bank {self.name!r}")

    def describe(self) -> dict[str, Any]:
        """What a report says about the bank it used."""
        return {
            "name": self.name,
            "version": self.version,
            "provenance": self.provenance,
            "licence": self.licence,
            "cards": len(self.cards),
            "sha256": self.sha256,
            "source": self.source,
        }


@dataclass(frozen=True)
class Event:
    session: int
    op: Op
    slot: str

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "op": self.op, "slot": self.slot}


@dataclass
class Script:
    sessions: int
    events: list[Event]

    def as_dict(self) -> dict[str, Any]:
        return {"format": SCRIPT_FORMAT, "sessions": self.sessions, "events": [e.as_dict() for e in self.events]}

    def of_session(self, k: int) -> list[Event]:
        return [e for e in self.events if e.session == k]

    def counts(self) -> dict[str, int]:
        return {op: sum(1 for e in self.events if e.op == op) for op in OPS}


# ------------------------------------------------------------------------------------------- parsing


def normalize(text: str) -> list[str]:
    """The words of ``text`` for matching: accents removed, case folded, split at anything not a letter
    or digit ("Gdańsk" -> ["gdansk"], "thirty-four" -> ["thirty", "four"], "Maya's" -> ["maya", "s"])."""
    decomposed = unicodedata.normalize("NFKD", str(text))
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return "".join(c if c.isalnum() else " " for c in plain).split()


def _found(words: Sequence[str], form: Sequence[str]) -> bool:
    n = len(form)
    if not n or n > len(words):
        return False
    last = form[-1]
    for i in range(len(words) - n + 1):
        if list(words[i : i + n - 1]) == list(form[:-1]) and words[i + n - 1] in (last, last + "s", last + "es"):
            return True
    return False


def mentions(text: str | Sequence[str], value: Value) -> bool:
    """Whether ``text`` (or its normalised words) mentions ``value`` or one of its aliases."""
    words = normalize(text) if isinstance(text, str) else text
    return any(_found(words, normalize(form)) for form in value.forms)


def mentions_any(text: str | Sequence[str], values: Iterable[Value]) -> bool:
    words = normalize(text) if isinstance(text, str) else text
    return any(mentions(words, v) for v in values)


def _text(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True, limit: int = 500) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise CardError(f"{where}: '{key}' must be a non-empty text")
    if len(value) > limit:
        raise CardError(f"{where}: '{key}' is longer than {limit} characters")
    return value.strip()


def _value(obj: Any, where: str) -> Value:
    if not isinstance(obj, Mapping):
        raise CardError(f"{where}: expected an object with 'value' (and optional 'aliases')")
    value = _text(obj, "value", where, limit=200)
    aliases = obj.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise CardError(f"{where}: 'aliases' must be a list of non-empty texts")
    for form in [value, *aliases]:
        if not normalize(form):
            raise CardError(f"{where}: {form!r} has no letters or digits to match")
    return Value(value, tuple(a.strip() for a in aliases))


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def parse_bank(data: Any, *, source: str = "", sha256: str = "") -> Bank:
    """A bank from its JSON (see the module's docstring). Raises :class:`CardError` naming the problem."""
    if not isinstance(data, Mapping):
        raise CardError("a card bank is a JSON object")
    if data.get("format") != BANK_FORMAT:
        raise CardError(f"not a card bank: 'format' must be {BANK_FORMAT!r}, not {data.get('format')!r}")
    raw_slots = data.get("slots")
    if not isinstance(raw_slots, Mapping) or not raw_slots:
        raise CardError("the bank needs 'slots': an object of slot definitions")
    slots: dict[str, Slot] = {}
    for key, s in raw_slots.items():
        where = f"slot {key!r}"
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", str(key)):
            raise CardError(f"{where}: a slot key is lower-case letters, digits and _ (at most 40)")
        if not isinstance(s, Mapping):
            raise CardError(f"{where}: expected an object")
        slot = Slot(
            key=key,
            label=_text(s, "label", where, limit=60),
            question=_text(s, "question", where),
            say=_text(s, "say", where),
            card=_text(s, "card", where),
            update_say=_text(s, "update_say", where, required=False) or DEFAULT_UPDATE,
            forget_say=_text(s, "forget_say", where, required=False) or DEFAULT_FORGET,
            depends_on=s.get("depends_on") or None,
            free_text=bool(s.get("free_text", False)),
        )
        slots[key] = slot
    for slot in slots.values():
        if slot.depends_on is not None and slot.depends_on not in slots:
            raise CardError(f"slot {slot.key!r}: depends_on {slot.depends_on!r} is not a slot")
        if slot.depends_on == slot.key:
            raise CardError(f"slot {slot.key!r} depends on itself")
    raw_cards = data.get("cards")
    if not isinstance(raw_cards, list) or not raw_cards:
        raise CardError("the bank needs 'cards': a non-empty list")
    if len(raw_cards) > MAX_CARDS:
        raise CardError(f"a bank holds at most {MAX_CARDS} cards, this one {len(raw_cards)}")
    cards: list[Card] = []
    seen: set[str] = set()
    for n, c in enumerate(raw_cards):
        where = f"card {n + 1}"
        if not isinstance(c, Mapping):
            raise CardError(f"{where}: expected an object")
        cid = _text(c, "id", where, limit=40)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", cid):
            raise CardError(f"{where}: id {cid!r} may hold only letters, digits, '.', '_' and '-'")
        if cid in seen:
            raise CardError(f"{where}: id {cid!r} is used twice")
        seen.add(cid)
        where = f"card {cid!r}"
        raw_facts = c.get("facts")
        if not isinstance(raw_facts, Mapping) or not raw_facts:
            raise CardError(f"{where}: 'facts' must be a non-empty object")
        facts: dict[str, Fact] = {}
        for key, f in raw_facts.items():
            fw = f"{where}, fact {key!r}"
            if key not in slots:
                raise CardError(f"{fw}: no slot {key!r} in the bank's slots")
            if not isinstance(f, Mapping):
                raise CardError(f"{fw}: expected an object")
            vars_ = f.get("vars") or {}
            if not isinstance(vars_, Mapping) or not all(isinstance(v, str) for v in vars_.values()):
                raise CardError(f"{fw}: 'vars' must map names to texts")
            facts[key] = Fact(
                slot=key,
                value=_value(f, fw),
                update=_value(f["update"], f"{fw}, update") if f.get("update") is not None else None,
                vars=dict(vars_),
                question=_text(f, "question", fw, required=False) or None,
                say=_text(f, "say", fw, required=False) or None,
                update_say=_text(f, "update_say", fw, required=False) or None,
            )
        card = Card(cid, facts, title=_text(c, "title", where, required=False, limit=120))
        for key, fact in facts.items():
            dep = slots[key].depends_on
            if dep is not None and dep not in facts:
                raise CardError(f"{where}: fact {key!r} depends on {dep!r}, which the card does not have")
            for name in _fields(fact.question or slots[key].question):
                if name in ("value", "a_value"):
                    raise CardError(
                        f"{where}, fact {key!r}: a question cannot use {{{name}}} (it would give the answer)"
                    )
            for template in _templates(slots[key], fact):
                for name in _fields(template):
                    if name not in _context_names(card, fact):
                        raise CardError(f"{where}, fact {key!r}: the text {template!r} uses {{{name}}}, which it lacks")
        for key, fact in facts.items():
            question = render(fact.question or slots[key].question, card, slots[key], "", _current_values(card, {}))
            if mentions(question, fact.value) or (fact.update is not None and mentions(question, fact.update)):
                raise CardError(f"{where}, fact {key!r}: the question {question!r} gives away its own answer")
        cards.append(card)
    return Bank(
        name=str(data.get("name") or "card bank"),
        version=str(data.get("version") or ""),
        provenance=str(data.get("provenance") or ""),
        licence=str(data.get("licence") or ""),
        slots=slots,
        cards=cards,
        sha256=sha256,
        source=source,
    )


def _templates(slot: Slot, fact: Fact) -> list[str]:
    out = [fact.question or slot.question, fact.say or slot.say, slot.card, slot.forget_say]
    if fact.update is not None:
        out.append(fact.update_say or slot.update_say)
    return out


def _context_names(card: Card, fact: Fact) -> set[str]:
    return {"value", "a_value", "label", "label_lower", *fact.vars, *card.facts}


def load_bank(path: str | Path | None = None) -> Bank:
    """The bank at ``path`` (default: the one that ships, ``memory/data/cards/bank.json``)."""
    file = Path(path) if path else CARDS_DIR / "bank.json"
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise CardError(f"cannot read the card bank {file}: {exc}") from exc
    return bank_from_bytes(raw, source=file.name)


def bank_from_bytes(raw: bytes, *, source: str = "") -> Bank:
    """A bank from the bytes of its JSON file (an upload, a file)."""
    if len(raw) > MAX_BANK_BYTES:
        raise CardError(f"a card bank file is at most {MAX_BANK_BYTES // 1_000_000} MB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CardError(f"{source or 'the card bank'} is not JSON: {exc}") from exc
    return parse_bank(data, source=source, sha256=hashlib.sha256(raw).hexdigest())


def parse_script(data: Any) -> Script:
    """An event script from its JSON. Checks its own consistency; :func:`check_script` checks it against a bank."""
    if not isinstance(data, Mapping):
        raise CardError("an event script is a JSON object")
    if data.get("format", SCRIPT_FORMAT) != SCRIPT_FORMAT:
        raise CardError(f"not an event script: 'format' must be {SCRIPT_FORMAT!r}")
    sessions = data.get("sessions")
    if not isinstance(sessions, int) or isinstance(sessions, bool) or not 1 <= sessions <= 20:
        raise CardError("'sessions' must be a whole number from 1 to 20")
    raw = data.get("events")
    if not isinstance(raw, list):
        raise CardError("'events' must be a list")
    events: list[Event] = []
    for n, e in enumerate(raw, 1):
        where = f"event {n}"
        if not isinstance(e, Mapping):
            raise CardError(f"{where}: expected an object with session, op and slot")
        k, op, slot = e.get("session"), e.get("op"), e.get("slot")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= sessions:
            raise CardError(f"{where}: 'session' must be a session from 1 to {sessions}")
        if op not in OPS:
            raise CardError(f"{where}: 'op' must be one of {', '.join(OPS)}, not {op!r}")
        if not isinstance(slot, str) or not slot:
            raise CardError(f"{where}: 'slot' must name a slot")
        events.append(Event(k, op, slot))
    script = Script(sessions, sorted(events, key=lambda e: e.session))
    problems = _script_problems(script)
    if problems:
        raise CardError("; ".join(problems))
    return script


def _script_problems(script: Script) -> list[str]:
    """Order problems of a script: a fact is brought up once (mention or add), updated, forgotten or
    probed only after that, never after it was forgotten (a forgotten fact can still be probed)."""
    problems: list[str] = []
    told: dict[str, int] = {}
    forgotten: dict[str, int] = {}
    changed: dict[str, int] = {}
    for e in script.events:
        where = f"session {e.session}, {e.op} {e.slot}"
        if e.op in ("mention", "add"):
            if e.slot in told:
                problems.append(f"{where}: {e.slot!r} is already brought up in session {told[e.slot]}")
            told[e.slot] = e.session
        elif e.slot not in told:
            problems.append(f"{where}: {e.slot!r} must be mentioned (or added) in an earlier session first")
        elif told[e.slot] >= e.session:
            problems.append(f"{where}: a fact is changed or probed only in a session after the one it is brought up in")
        elif e.op in ("update", "forget") and e.slot in forgotten:
            problems.append(f"{where}: {e.slot!r} was forgotten in session {forgotten[e.slot]}")
        elif e.op == "probe" and changed.get(e.slot, 0) >= e.session:
            problems.append(f"{where}: a fact is probed only in a session after the one it changed in")
        if e.op == "forget":
            forgotten[e.slot] = e.session
        if e.op in ("update", "forget"):
            changed[e.slot] = e.session
    return problems


def check_script(script: Script, bank: Bank) -> list[str]:
    """What in ``script`` a bank cannot play: unknown slots, an update of a fact that some card cannot
    update, a dependent fact brought up before its parent. Empty when every card can play it."""
    problems: list[str] = []
    told: set[str] = set()
    for e in script.events:
        where = f"session {e.session}, {e.op} {e.slot}"
        if e.slot not in bank.slots:
            problems.append(f"{where}: the bank has no slot {e.slot!r}")
            continue
        missing = [c.id for c in bank.cards if e.slot not in c.facts]
        if missing:
            problems.append(f"{where}: cards {', '.join(missing[:5])} have no {e.slot!r}")
        if e.op == "update":
            fixed = [c.id for c in bank.cards if e.slot in c.facts and c.facts[e.slot].update is None]
            if fixed:
                problems.append(f"{where}: cards {', '.join(fixed[:5])} give no updated value for {e.slot!r}")
        dep = bank.slots[e.slot].depends_on
        if e.op == "probe" and dep is not None:
            parent_change = [x for x in script.events if x.slot == dep and x.op in ("update", "forget")]
            if any(x.session == e.session for x in parent_change):
                problems.append(f"{where}: {e.slot!r} depends on {dep!r}, which changes in the same session")
        if e.op in ("mention", "add"):
            if dep is not None and dep not in told:
                problems.append(f"{where}: {e.slot!r} depends on {dep!r}, which is not brought up before or with it")
            told.add(e.slot)
    return problems


def load_script(path: str | Path | None = None) -> Script:
    """The script at ``path`` (default: ``memory/data/cards/script.json``, the one the demo uses)."""
    file = Path(path) if path else CARDS_DIR / "script.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CardError(f"cannot read the event script {file}: {exc}") from exc
    return parse_script(data)


# ------------------------------------------------------------------------------------------- playing


def _article(value: str) -> str:
    return ("an " if value[:1].lower() in "aeiou" else "a ") + value


def render(template: str, card: Card, slot: Slot, value: str, current: Mapping[str, str]) -> str:
    """A template of ``slot`` filled for ``card`` with ``value`` and the card's current facts."""
    fact = card.facts[slot.key]
    context = {**current, **fact.vars, "value": value, "a_value": _article(value), "label": slot.label,
               "label_lower": slot.label.lower()}  # fmt: skip
    return template.format(**context)


@dataclass
class FactState:
    """One fact as it stands after a session: its values (the first told, then each update), whether and when
    it was forgotten (``forgotten_by``: the slot whose forget removed it, itself or its parent)."""

    slot: str
    told: int
    values: list[Value]
    changed: int | None = None  # the session of the last update
    forgotten: int | None = None
    forgotten_by: str | None = None

    @property
    def current(self) -> Value | None:
        return None if self.forgotten is not None else self.values[-1]

    @property
    def kind(self) -> Kind:
        if self.forgotten is not None:
            return "forgotten"
        return "updated" if len(self.values) > 1 else "current"

    def copy(self) -> FactState:
        return FactState(self.slot, self.told, list(self.values), self.changed, self.forgotten, self.forgotten_by)


@dataclass
class Task:
    """What the worker is asked to do in a session: bring up a fact, tell a change, ask to forget, or check
    the bot (``probe``). ``say`` is the scripted user's sentence; ``text`` what the worker reads."""

    op: Op
    slot: str
    label: str
    text: str
    say: str
    value: str = ""
    old: str = ""
    question: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v != ""}


@dataclass
class CardLine:
    slot: str
    label: str
    value: str
    text: str
    status: str  # "" (as before), "new", "changed", "forgotten"
    old: str = ""


@dataclass
class SessionPlan:
    index: int
    card: list[CardLine]
    tasks: list[Task]
    facts: dict[str, FactState]  # after the session

    @property
    def changes(self) -> list[CardLine]:
        return [line for line in self.card if line.status]


@dataclass
class EpisodePlan:
    card: Card
    script: Script
    sessions: list[SessionPlan]
    bank: Bank


def plan_episode(bank: Bank, card: Card, script: Script) -> EpisodePlan:
    """Play ``script`` on ``card``: per session, the card as shown, the tasks and the facts after it."""
    problems = check_script(script, Bank(bank.name, bank.version, "", "", bank.slots, [card]))
    if problems:
        raise CardError(f"card {card.id!r} cannot play the script: " + "; ".join(problems))
    added = {e.slot: e.session for e in script.events if e.op == "add"}
    facts: dict[str, FactState] = {}
    sessions: list[SessionPlan] = []
    shown: dict[str, str] = {}  # what the card showed in the previous session
    for k in range(1, script.sessions + 1):
        tasks: list[Task] = []
        before = {s: f.copy() for s, f in facts.items()}
        for e in script.of_session(k):
            slot, fact = bank.slots[e.slot], card.facts[e.slot]
            current = _current_values(card, facts)
            if e.op in ("mention", "add"):
                v = fact.value
                facts[e.slot] = FactState(e.slot, k, [v])
                say = render(fact.say or slot.say, card, slot, v.value, current)
                tasks.append(
                    Task(e.op, e.slot, slot.label, say_as_card(card, slot, v.value, current), say, value=v.value)
                )
            elif e.op == "update":
                assert fact.update is not None  # check_script
                state = facts[e.slot]
                old = state.values[-1].value
                state.values.append(fact.update)
                state.changed = k
                say = render(fact.update_say or slot.update_say, card, slot, fact.update.value, current)
                shown_now = say_as_card(card, slot, fact.update.value, {**current, e.slot: fact.update.value})
                tasks.append(Task("update", e.slot, slot.label, f"{shown_now} (before: {old})", say,
                                  value=fact.update.value, old=old))  # fmt: skip
            elif e.op == "forget":
                say = render(slot.forget_say, card, slot, facts[e.slot].values[-1].value, current)
                for s in [e.slot, *_dependents(bank, e.slot)]:
                    if s in facts and facts[s].forgotten is None:
                        facts[s].forgotten, facts[s].forgotten_by = k, e.slot
                tasks.append(Task("forget", e.slot, slot.label,
                                  f"Ask the chatbot to forget what you told it about your {slot.label.lower()}.", say))  # fmt: skip
            else:  # probe
                question = render(fact.question or slot.question, card, slot, "", current)
                tasks.append(Task("probe", e.slot, slot.label, f"Ask the chatbot: \u201c{question}\u201d",
                                  question, question=question))  # fmt: skip
        lines = _card_lines(bank, card, facts, before, added, k, shown)
        shown = {line.slot: line.value for line in lines}
        sessions.append(SessionPlan(k, lines, tasks, {s: f.copy() for s, f in facts.items()}))
    return EpisodePlan(card, script, sessions, bank)


def say_as_card(card: Card, slot: Slot, value: str, current: Mapping[str, str]) -> str:
    return render(slot.card, card, slot, value, current)


def _current_values(card: Card, facts: Mapping[str, FactState]) -> dict[str, str]:
    out = {s: f.value.value for s, f in card.facts.items()}
    for s, state in facts.items():
        out[s] = state.values[-1].value
    return out


def _dependents(bank: Bank, slot: str) -> list[str]:
    out: list[str] = []
    for s in bank.slots.values():
        if s.depends_on == slot:
            out += [s.key, *_dependents(bank, s.key)]
    return out


def _card_lines(
    bank: Bank,
    card: Card,
    facts: Mapping[str, FactState],
    before: Mapping[str, FactState],
    added: Mapping[str, int],
    k: int,
    shown: Mapping[str, str],
) -> list[CardLine]:
    """The card in session k: every fact of the card except those added later; a fact updated in this
    session shows its new value ("changed"), one added now is "new", a forgotten one stays on the card
    (it is still the persona's) marked "forgotten" from the session it was asked to be forgotten."""
    current = _current_values(card, facts)
    lines: list[CardLine] = []
    for key in card.facts:
        if key in added and added[key] > k:
            continue
        slot = bank.slots[key]
        value = current[key]
        status, old = "", ""
        state = facts.get(key)
        if state is not None and state.forgotten == k:
            status = "forgotten"
        elif key in added and added[key] == k:
            status = "new"
        elif state is not None and state.changed == k:
            status, old = "changed", before[key].values[-1].value if key in before else ""
        elif shown and key in shown and shown[key] != value:
            status, old = "changed", shown[key]  # e.g. a dependent text that names a changed fact
        lines.append(CardLine(key, slot.label, value, say_as_card(card, slot, value, current), status, old))
    return lines


@dataclass(frozen=True)
class Probe:
    """One question about one fact, at one point of the episode, and what a right answer is.

    ``kind``: ``current`` (never changed), ``updated`` (``gold`` is the new value, ``stale`` the old ones)
    or ``forgotten`` (the right answer does not give any of ``deleted``; no store of the arm may hold them).
    ``dependent``: the fact depends on another one (the pet's name on the pet) that changed or was forgotten,
    so it tests that dependent facts follow. ``told``: the session the current value was said in (its update's
    session for an updated fact)."""

    card: str
    slot: str
    question: str
    kind: Kind
    gold: Value | None
    stale: tuple[Value, ...] = ()
    deleted: tuple[Value, ...] = ()
    told: int = 1
    free_text: bool = False
    dependent: bool = False
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.card}:{self.slot}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "card": self.card,
            "slot": self.slot,
            "label": self.label,
            "question": self.question,
            "kind": self.kind,
            "gold": self.gold.as_dict() if self.gold else None,
            "stale_values": [v.as_dict() for v in self.stale],
            "deleted_values": [v.as_dict() for v in self.deleted],
            "told": self.told,
            "free_text": self.free_text,
            "dependent": self.dependent,
        }


def probe_of(plan: EpisodePlan, k: int, slot_key: str) -> Probe:
    """The probe of one fact after session ``k`` (or during it, for a probe task of session ``k``)."""
    bank, card = plan.bank, plan.card
    state = plan.sessions[k - 1].facts[slot_key]
    slot, fact = bank.slots[slot_key], card.facts[slot_key]
    current = _current_values(card, plan.sessions[k - 1].facts)
    question = render(fact.question or slot.question, card, slot, "", current)
    parent = slot.depends_on
    dependent = bool(
        parent
        and parent in plan.sessions[k - 1].facts
        and (plan.sessions[k - 1].facts[parent].kind != "current" or state.forgotten_by == parent)
    )
    if state.forgotten is not None:
        return Probe(card.id, slot_key, question, "forgotten", None, deleted=tuple(state.values), told=state.told,
                     free_text=slot.free_text, dependent=dependent, label=slot.label)  # fmt: skip
    return Probe(
        card.id,
        slot_key,
        question,
        state.kind,
        state.values[-1],
        stale=tuple(v for v in state.values[:-1] if v != state.values[-1]),
        told=state.changed or state.told,
        free_text=slot.free_text,
        dependent=dependent,
        label=slot.label,
    )


def probes_after(plan: EpisodePlan, k: int) -> list[Probe]:
    """A probe of every fact told up to session ``k`` (forgotten ones too), in the card's order."""
    facts = plan.sessions[k - 1].facts
    return [probe_of(plan, k, s) for s in plan.card.facts if s in facts]


def draw_card(bank: Bank, seed: Iterable[Any], *, exclude: Sequence[str] = ()) -> Card:
    """A card drawn for an episode, reproducibly from ``seed`` (e.g. study, participant, episode); cards in
    ``exclude`` (the worker's earlier cards) are avoided while others remain."""
    pool = [c for c in bank.cards if c.id not in set(exclude)] or list(bank.cards)
    rng = random.Random("/".join(str(s) for s in seed))
    return pool[rng.randrange(len(pool))]
