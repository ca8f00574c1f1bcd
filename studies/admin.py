"""Django admin for studies: a study with its arms and metrics inline; participants read-mostly."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from studies.forms import ArmForm, StudyForm
from studies.models import Arm, AttentionCheck, Metric, Participant, Study

# What decides whether an arm passes its readiness checks (and whether it counts): on an open study that is not a
# pilot these stay as they are, as on the study page, where a change that leaves an arm not ready is refused
# ("close the study, make the change, run the readiness checks, then open it again").
ARM_READINESS_FIELDS = ("memory_system", "params", "llm_backend", "llm_model", "active")


def _gated(study: Study | None) -> bool:
    """Whether ``study`` is open as a real (non-pilot) study: its arms must stay ready."""
    return study is not None and study.status == Study.Status.OPEN and not study.pilot


class ArmInline(admin.TabularInline[Arm, Study]):
    model = Arm
    form = ArmForm  # the same parameter validation as the researcher page
    extra = 0

    # Django passes an inline the parent object (the study), whatever the stubs say
    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ARM_READINESS_FIELDS if _gated(obj) else ()

    def has_add_permission(self, request: HttpRequest, obj: Study | None = None) -> bool:
        return not _gated(obj) and super().has_add_permission(request, obj)


class MetricInline(admin.TabularInline[Metric, Study]):
    model = Metric
    extra = 0


class AttentionCheckInline(admin.TabularInline[AttentionCheck, Study]):
    model = AttentionCheck
    extra = 0


class StudyAdminForm(StudyForm):
    """The researcher page's rules (design frozen once workers started) with every field."""

    class Meta(StudyForm.Meta):
        fields = "__all__"
        widgets: dict[str, Any] = {}  # the admin's own (split date/time) widgets


@admin.register(Study)
class StudyAdmin(admin.ModelAdmin[Study]):
    form = StudyAdminForm
    list_display = ["name", "slug", "status", "sessions_per_episode", "episodes_per_worker", "quota", "created_at"]
    list_filter = ["status"]
    search_fields = ["name", "slug"]
    # Opening is gated on the study page (every arm ready, or "open as pilot" with the data marked as such, and
    # never a study that cannot run): the admin shows the status but does not change it, so it cannot open a
    # study that page would refuse, nor clear a pilot's mark. A new study starts as a draft.
    readonly_fields = ["created_at", "status", "pilot"]
    inlines = [ArmInline, MetricInline, AttentionCheckInline]
    filter_horizontal = ["shared_with"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    actions = ["add_default_metrics"]

    @admin.action(description="Add the five default metrics")
    def add_default_metrics(self, request: HttpRequest, queryset: Any) -> None:
        for study in queryset:
            study.add_default_metrics()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Study]:
        return super().get_queryset(request).filter(pk__in=Study.objects.visible_to(request.user).values("pk"))

    def save_model(self, request: HttpRequest, obj: Study, form: Any, change: bool) -> None:
        if obj.created_by_id is None and isinstance(request.user, User):  # the admin is staff-only
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(Arm)
class ArmAdmin(admin.ModelAdmin[Arm]):
    form = ArmForm
    list_display = ["name", "study", "memory_system", "llm_backend", "llm_model", "is_qc", "active"]
    # the filter lists the studies of the arms shown, not every researcher's study names
    list_filter = [("study", admin.RelatedOnlyFieldListFilter), "memory_system", "active"]

    def get_readonly_fields(self, request: HttpRequest, obj: Arm | None = None) -> Any:
        return ARM_READINESS_FIELDS if obj is not None and _gated(obj.study) else ()

    def has_add_permission(self, request: HttpRequest) -> bool:
        # ArmForm has no study field (its add page failed with an IntegrityError): an arm is added on its study's
        # page or inline, where the readiness gate holds for an open study.
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Arm]:
        return super().get_queryset(request).filter(study__in=Study.objects.visible_to(request.user))


@admin.register(Participant)
class ParticipantAdmin(admin.ModelAdmin[Participant]):
    list_display = [
        "id",
        "study",
        "external_id",
        "source",
        "consented_at",
        "completed_at",
        "declined_at",
        "abandoned_at",
    ]
    list_filter = [("study", admin.RelatedOnlyFieldListFilter), "source"]
    search_fields = ["external_id"]
    readonly_fields = ["created_at", "last_seen_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Participant]:
        return super().get_queryset(request).filter(study__in=Study.objects.visible_to(request.user))
