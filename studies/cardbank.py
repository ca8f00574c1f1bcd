"""Persona card banks a researcher imported (docs/memory-systems.md, "Persona cards and probes"). A model of the
studies app, in a module of its own; studies/models.py imports it."""

from __future__ import annotations

import json
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import models

from memory import cards

__all__ = ["CardBank", "CardBankQuerySet"]


class CardBankQuerySet(models.QuerySet["CardBank"]):
    def visible_to(self, user: Any) -> CardBankQuerySet:
        """The banks a researcher may use: those they imported, and those of the studies they can see."""
        if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
            return self.none()
        if user.is_superuser:
            return self
        study = apps.get_model("studies", "Study")  # studies/models.py imports this module: no import back
        used = study.objects.visible_to(user).filter(card_bank__isnull=False).values("card_bank")
        return self.filter(models.Q(created_by=user) | models.Q(pk__in=used))


class CardBank(models.Model):
    """A persona card bank a researcher imported (``memory.cards`` format; the bank that ships with memeval
    needs no import). Kept as it was imported: a study that used it keeps the cards its workers played."""

    name = models.CharField(max_length=200)
    version = models.CharField(max_length=40, blank=True)
    provenance = models.TextField(blank=True)
    licence = models.TextField(blank=True)
    source = models.CharField(max_length=200, blank=True, help_text="The imported file's name.")
    sha256 = models.CharField(max_length=64)
    data = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = CardBankQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({len(self.data.get('cards', []))} cards, {self.source or 'imported'})"

    def bank(self) -> cards.Bank:
        return cards.parse_bank(self.data, source=self.source, sha256=self.sha256)

    @classmethod
    def from_upload(cls, raw: bytes, name: str, user: Any) -> CardBank:
        """Validate and store an uploaded bank; raises :class:`memory.cards.CardError` naming the problem."""
        bank = cards.bank_from_bytes(raw, source=name)
        return cls.objects.create(
            name=bank.name[:200], version=bank.version[:40], provenance=bank.provenance, licence=bank.licence,
            source=name[:200], sha256=bank.sha256, data=json.loads(raw.decode("utf-8")),
            created_by=user if getattr(user, "pk", None) else None,
        )  # fmt: skip
