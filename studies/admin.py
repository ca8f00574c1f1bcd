"""Django admin for studies: a study with its arms and metrics inline; participants read-mostly."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.auth.models import User
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from studies.cardbank import CardBank
from studies.forms import ArmForm, StudyForm
from studies.models import Arm, AttentionCheck, Metric, Participant, Study

# What decides whether an arm passes its readiness checks (and whether it counts): on an open study that is not a
# pilot these stay as they are, as on the study page, where a change that leaves an arm not ready is refused
# ("close the study, make the change, run the readiness checks, then open it again").
ARM_READINESS_FIELDS = ("memory_system", "params", "llm_backend", "llm_model", "active")


def _gated(study: Study | None) -> bool:
    """Whether ``study`` is open as a real (non-pilot) study: its arms must stay ready."""
    return study is not None and study.is_open_for_real


# Deleting an arm of an open study changes the design under the workers (an arm without episodes yet is still
# drawn for the next one), and deleting every arm leaves a study that cannot run: as on the study page, close it
# first. Deleting the study itself deletes its arms, so it is refused the same way.
OPEN_ARM_DELETE_REFUSED = (
    "Not deleted: the study of {names} is open (not a pilot). Close the study first, or untick “active” to stop "
    "drawing an arm."
)
OPEN_STUDY_DELETE_REFUSED = "Not deleted: {names} is open (not a pilot). Close the study first."


def _refuse(request: HttpRequest, template: str, objects: list[Any]) -> None:
    names = ", ".join(f"“{o}”" for o in objects)
    messages.error(request, template.format(names=names))


class ArmInline(admin.TabularInline[Arm, Study]):
    model = Arm
    form = ArmForm  # the same parameter validation as the researcher page
    extra = 0

    # Django passes an inline the parent object (the study), whatever the stubs say
    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ARM_READINESS_FIELDS if _gated(obj) else ()

    def has_add_permission(self, request: HttpRequest, obj: Study | None = None) -> bool:
        return not _gated(obj) and super().has_add_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # obj: the study, as above
        return not _gated(obj) and super().has_delete_permission(request, obj)


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
    # Who owns a study and who it is shared with (editors, viewers) are the creator's (or a superuser's) to change, as on the study
    # page: a researcher it is shared with could otherwise make themselves its creator and lock the owner out.
    OWNERSHIP_FIELDS = ["created_by", "shared_with", "viewers"]
    inlines = [ArmInline, MetricInline, AttentionCheckInline]
    filter_horizontal = ["shared_with"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    actions = ["add_default_metrics", "delete_selected"]

    @admin.action(permissions=["delete"], description="Delete selected studies")
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Study]) -> HttpResponse | None:
        """Django's bulk delete, unless a selected study is open (not a pilot): then nothing is deleted."""
        if refused := [s for s in queryset if _gated(s)]:
            _refuse(request, OPEN_STUDY_DELETE_REFUSED, refused)
            return None
        return django_delete_selected(self, request, queryset)

    def has_delete_permission(self, request: HttpRequest, obj: Study | None = None) -> bool:
        return not _gated(obj) and super().has_delete_permission(request, obj)

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        study = self.get_object(request, object_id)
        if study is not None and _gated(study):
            _refuse(request, OPEN_STUDY_DELETE_REFUSED, [study])
            return HttpResponseRedirect(reverse("admin:studies_study_change", args=[study.pk]))
        return super().delete_view(request, object_id, extra_context)

    @admin.action(description="Add the five default metrics")
    def add_default_metrics(self, request: HttpRequest, queryset: Any) -> None:
        for study in queryset:
            study.add_default_metrics()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Study]:
        return super().get_queryset(request).filter(pk__in=Study.objects.visible_to(request.user).values("pk"))

    def get_readonly_fields(self, request: HttpRequest, obj: Study | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        owner = obj.can_share(request.user) if obj is not None else bool(getattr(request.user, "is_superuser", False))
        return fields if owner else [*fields, *self.OWNERSHIP_FIELDS]

    def save_model(self, request: HttpRequest, obj: Study, form: Any, change: bool) -> None:
        if obj.created_by_id is None and isinstance(request.user, User):  # the admin is staff-only
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "card_bank":  # the banks this researcher may use, as on the study page
            kwargs["queryset"] = CardBank.objects.visible_to(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(CardBank)
class CardBankAdmin(admin.ModelAdmin[CardBank]):
    """Imported card banks, read-only: a study that used one keeps the cards its workers played (import a
    new file on the study's edit page instead of editing one)."""

    list_display = ["name", "version", "source", "created_by", "created_at"]
    readonly_fields = [
        "name",
        "version",
        "provenance",
        "licence",
        "source",
        "sha256",
        "data",
        "created_by",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[CardBank]:
        return super().get_queryset(request).filter(pk__in=CardBank.objects.visible_to(request.user).values("pk"))


@admin.register(Arm)
class ArmAdmin(admin.ModelAdmin[Arm]):
    form = ArmForm
    list_display = ["name", "study", "memory_system", "llm_backend", "llm_model", "is_qc", "active"]
    # the filter lists the studies of the arms shown, not every researcher's study names
    list_filter = [("study", admin.RelatedOnlyFieldListFilter), "memory_system", "active"]

    def get_readonly_fields(self, request: HttpRequest, obj: Arm | None = None) -> Any:
        return ARM_READINESS_FIELDS if obj is not None and _gated(obj.study) else ()

    actions = ["delete_selected"]

    @admin.action(permissions=["delete"], description="Delete selected arms")
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Arm]) -> HttpResponse | None:
        """Django's bulk delete, unless a selected arm belongs to an open study: then nothing is deleted."""
        if refused := [a for a in queryset.select_related("study") if _gated(a.study)]:
            _refuse(request, OPEN_ARM_DELETE_REFUSED, refused)
            return None
        return django_delete_selected(self, request, queryset)

    def has_delete_permission(self, request: HttpRequest, obj: Arm | None = None) -> bool:
        return not (obj is not None and _gated(obj.study)) and super().has_delete_permission(request, obj)

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        arm = self.get_object(request, object_id)
        if arm is not None and _gated(arm.study):
            _refuse(request, OPEN_ARM_DELETE_REFUSED, [arm])
            return HttpResponseRedirect(reverse("admin:studies_arm_change", args=[arm.pk]))
        return super().delete_view(request, object_id, extra_context)

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
        "pseudonym",
        "source",
        "consented_at",
        "completed_at",
        "declined_at",
        "abandoned_at",
    ]
    list_filter = [("study", admin.RelatedOnlyFieldListFilter), "source"]
    search_fields = ["pseudonym"]
    readonly_fields = ["pseudonym", "created_at", "last_seen_at", "pseudonymised_at"]
    # The raw IDs are the study owner's, on request (the quality page); the admin shows them to nobody.
    exclude = ["external_id", "prolific_study_id", "prolific_session_id", "resume_code"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Participant]:
        return super().get_queryset(request).filter(study__in=Study.objects.visible_to(request.user))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a participant is made by the study link or an invite, never by hand

    def has_delete_permission(self, request: HttpRequest, obj: Participant | None = None) -> bool:
        # a worker is deleted with its audit record and the annotation items made from it: the quality page's
        # "Delete…" (the owner's) or manage.py delete_participant (chat.privacy)
        return False
