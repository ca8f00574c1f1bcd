"""Django admin for what happened in the chat study. Everything workers produced is read-only here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from chat.models import ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating


class ReadOnlyMixin:
    """Transcripts, ratings, snapshots and LLM calls are evidence: viewable, never edited or added by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class EvidenceInline(ReadOnlyMixin):
    """An inline of evidence rows: every listed field read-only, no blank rows."""

    extra = 0
    fields: list[str] = []

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return list(self.fields)


class ChatSessionInline(admin.TabularInline):
    model = ChatSession
    extra = 0
    fields = ["index", "status", "simulated_start", "started_at", "ended_at", "rated_at"]
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(EvidenceInline, admin.TabularInline):
    model = Message
    fields = ["seq", "speaker", "text", "status", "client_id", "attempts", "created_at"]


class RatingInline(EvidenceInline, admin.TabularInline):
    model = Rating
    fields = ["metric", "value", "created_at"]


class MemorySnapshotInline(EvidenceInline, admin.StackedInline):
    model = MemorySnapshot
    fields = ["status", "state", "trace", "error", "attempts", "created_at", "finished_at"]


class LLMCallInline(EvidenceInline, admin.TabularInline):
    model = LLMCallRecord
    fields = ["purpose", "model", "latency_ms", "prompt_tokens", "completion_tokens", "error", "created_at"]
    show_change_link = True


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    list_display = ["id", "participant", "arm", "index", "status", "created_at", "completed_at"]
    list_filter = ["status", "arm__study", "arm"]
    readonly_fields = ["participant", "arm", "index", "memory_state", "created_at"]
    inlines = [ChatSessionInline]


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin):
    list_display = ["id", "episode", "index", "status", "simulated_start", "ended_at", "rated_at"]
    list_filter = ["status", "episode__arm__study"]
    readonly_fields = ["episode", "index", "simulated_start", "started_at", "ended_at", "rated_at"]
    inlines = [MessageInline, RatingInline, MemorySnapshotInline, LLMCallInline]


@admin.register(Message)
class MessageAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "session", "seq", "speaker", "status", "created_at"]
    list_filter = ["speaker", "status"]
    search_fields = ["text"]


@admin.register(Rating)
class RatingAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "session", "metric", "value", "created_at"]
    list_filter = ["metric__study", "metric__key"]


@admin.register(MemorySnapshot)
class MemorySnapshotAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "session", "status", "attempts", "finished_at"]
    list_filter = ["status"]


@admin.register(LLMCallRecord)
class LLMCallRecordAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "session", "purpose", "model", "latency_ms", "prompt_tokens", "completion_tokens"]
    list_filter = ["purpose", "model"]
