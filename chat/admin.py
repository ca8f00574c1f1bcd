"""Django admin for what happened in the chat study. Everything workers produced is read-only here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from chat.models import ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
from studies.models import Study


class ReadOnlyMixin:
    """Transcripts, ratings, snapshots and LLM calls are evidence: viewable, never edited or added by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StudyScoped:
    """Rows of the studies the admin user may see only (``Study.objects.visible_to``): transcripts,
    ratings and memory traces of another researcher's study are not listed, and their pages are 404."""

    study_path = "session__episode__arm__study"

    def get_queryset(self, request: HttpRequest) -> Any:
        visible = Study.objects.visible_to(request.user)
        return super().get_queryset(request).filter(**{f"{self.study_path}__in": visible})  # type: ignore[misc]


class EvidenceInline(ReadOnlyMixin, admin.TabularInline[Any, Any]):
    """An inline of evidence rows: every listed field read-only, no blank rows."""

    extra = 0

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(f) for f in self.fields or ()]


class ChatSessionInline(admin.TabularInline[ChatSession, Episode]):
    model = ChatSession
    extra = 0
    fields = readonly_fields = ("index", "status", "simulated_start", "started_at", "ended_at", "rated_at")
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(EvidenceInline):
    model = Message
    fields = ["seq", "speaker", "text", "status", "client_id", "created_at"]


class RatingInline(EvidenceInline):
    model = Rating
    fields = ["metric", "value", "created_at"]


class MemorySnapshotInline(EvidenceInline):
    model = MemorySnapshot
    template = "admin/edit_inline/stacked.html"  # state and trace are long JSON
    fields = ["status", "state", "trace", "error", "attempts", "created_at", "finished_at", "decisions"]


class LLMCallInline(EvidenceInline):
    model = LLMCallRecord
    fields = ["purpose", "model", "latency_ms", "prompt_tokens", "completion_tokens", "error", "created_at"]
    show_change_link = True


@admin.register(Episode)
class EpisodeAdmin(StudyScoped, admin.ModelAdmin[Episode]):
    study_path = "arm__study"
    list_display = ["id", "participant", "arm", "index", "status", "created_at", "completed_at"]
    list_filter = [
        "status",
        ("arm__study", admin.RelatedOnlyFieldListFilter),
        ("arm", admin.RelatedOnlyFieldListFilter),
    ]
    # The state and its version are written only by chat.state's compare-and-set, which caches parsed
    # states by (episode, state_version): a version set here, or a full save writing back what this form
    # read a moment before a reply's update, would give one version two contents.
    readonly_fields = ["participant", "arm", "index", "memory_state", "state_version", "created_at"]
    inlines = [ChatSessionInline]

    def save_model(self, request: HttpRequest, obj: Episode, form: Any, change: bool) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        kept = {"memory_state", "state_version"}
        obj.save(update_fields=[f.name for f in obj._meta.concrete_fields if not f.primary_key and f.name not in kept])


@admin.register(ChatSession)
class ChatSessionAdmin(StudyScoped, admin.ModelAdmin[ChatSession]):
    study_path = "episode__arm__study"
    list_display = ["id", "episode", "index", "status", "silent", "simulated_start", "ended_at", "rated_at"]
    list_filter = ["status", "silent", ("episode__arm__study", admin.RelatedOnlyFieldListFilter)]
    # A session moves only through the chat workflows (chat.sessions, chat.ratings): a status set here would
    # make a session rateable that never met its minimum of answered turns, or skip its memory update.
    readonly_fields = [
        "episode", "index", "status", "simulated_start", "gap_days", "started_at", "ended_at", "ended_by", "silent",
        "rated_at",
    ]  # fmt: skip
    inlines = [MessageInline, RatingInline, MemorySnapshotInline, LLMCallInline]


@admin.register(Message)
class MessageAdmin(StudyScoped, ReadOnlyMixin, admin.ModelAdmin[Message]):
    list_display = ["id", "session", "seq", "speaker", "status", "created_at"]
    list_filter = ["speaker", "status"]
    search_fields = ["text"]


@admin.register(Rating)
class RatingAdmin(StudyScoped, ReadOnlyMixin, admin.ModelAdmin[Rating]):
    list_display = ["id", "session", "metric", "value", "created_at"]
    list_filter = [("metric__study", admin.RelatedOnlyFieldListFilter), "metric__key"]


@admin.register(MemorySnapshot)
class MemorySnapshotAdmin(StudyScoped, ReadOnlyMixin, admin.ModelAdmin[MemorySnapshot]):
    list_display = ["id", "session", "status", "attempts", "finished_at"]
    list_filter = ["status"]


@admin.register(LLMCallRecord)
class LLMCallRecordAdmin(StudyScoped, ReadOnlyMixin, admin.ModelAdmin[LLMCallRecord]):
    list_display = ["id", "session", "purpose", "model", "latency_ms", "prompt_tokens", "completion_tokens"]
    list_filter = ["purpose", "model"]
