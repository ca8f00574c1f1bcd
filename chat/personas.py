"""The persona card a worker plays in an episode (studies with persona cards; memory/cards.py is the model).

A card is drawn when the episode is made (:func:`draw`) and kept whole on the episode (``Episode.persona``:
the card, the slots it uses, the bank's description and the study's event script), so the episode reads the
same whatever happens to the bank or the study's script later. :func:`plan` plays the script on it again
(deterministic, no LLM); :func:`session_card` is what the chat page shows beside the chat in one session.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from chat.models import ChatSession, Episode
from memory import cards
from studies.models import Participant, Study

FORMAT = "memeval-episode-persona/1"


def _slot_json(slot: cards.Slot) -> dict[str, Any]:
    data = asdict(slot)
    data.pop("key")
    return data


def draw(study: Study, participant: Participant, index: int) -> dict[str, Any]:
    """The persona of a new episode (``{}`` when the study does not use persona cards): a card drawn
    reproducibly from the study's bank by (study, participant, episode index), avoiding the worker's earlier
    cards while others remain. Raises :class:`memory.cards.CardError` if the bank or script is unusable."""
    if not study.persona_cards:
        return {}
    bank, script = study.persona_bank(), study.persona_script()
    earlier = [str((e.persona or {}).get("card", {}).get("id", "")) for e in participant.episodes.all()]
    card = cards.draw_card(bank, (study.pk, participant.pk, index), exclude=earlier)
    cards.plan_episode(bank, card, script)  # raises now, not in the middle of the episode
    used = set(card.facts)
    used |= {s.depends_on for k, s in bank.slots.items() if k in used and s.depends_on}
    return {
        "format": FORMAT,
        "bank": bank.describe(),
        "bank_id": study.card_bank_id,
        "slots": {k: _slot_json(s) for k, s in bank.slots.items() if k in used},
        "card": card.as_dict(),
        "script": script.as_dict(),
    }


def bank_of(persona: dict[str, Any]) -> cards.Bank:
    """The one-card bank an episode's persona was drawn from (its slots and its card)."""
    described = persona.get("bank", {})
    data = {
        "format": cards.BANK_FORMAT,
        "name": described.get("name", "bank"),
        "version": described.get("version", ""),
        "provenance": described.get("provenance", ""),
        "licence": described.get("licence", ""),
        "slots": persona["slots"],
        "cards": [persona["card"]],
    }
    return cards.parse_bank(data, source=described.get("source", ""), sha256=described.get("sha256", ""))


def plan(episode: Episode) -> cards.EpisodePlan | None:
    """The episode's card played through its script (None for an episode without a persona)."""
    persona = episode.persona or {}
    if not persona.get("card"):
        return None
    bank = bank_of(persona)
    return cards.plan_episode(bank, bank.cards[0], cards.parse_script(persona["script"]))


def session_card(session: ChatSession) -> dict[str, Any] | None:
    """What the chat page shows in ``session``: the card as it stands (changes marked) and the tasks."""
    p = plan(session.episode)
    if p is None or session.index > len(p.sessions):
        return None
    sp = p.sessions[session.index - 1]
    return {
        "lines": sp.card,
        "tasks": sp.tasks,
        "changes": sp.changes,
        "first": session.index == 1,
        "probes": [t for t in sp.tasks if t.op == "probe"],
    }
