"""Django admin for annotation queues. Like the queue pages, it shows a researcher only the queues they may
see (``Queue.objects.visible_to``) and what hangs off them: items, assignments, labels and drafts copy
transcripts out of a study."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import ForeignKey
from django.forms import ModelChoiceField
from django.http import HttpRequest

from annotation.models import Assignment, Draft, Item, Label, Queue
from studies.models import Study


class QueueScoped:
    """Rows of the queues the admin user may see only; other rows are not listed and their pages are 404.
    The queue filter lists only those queues too (their names say whose study they come from)."""

    queue_path = "queue"

    def get_queryset(self, request: HttpRequest) -> Any:
        visible = Queue.objects.visible_to(request.user)
        return super().get_queryset(request).filter(**{f"{self.queue_path}__in": visible})  # type: ignore[misc]

    def formfield_for_foreignkey(self, db_field: ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any) -> Any:
        visible = Queue.objects.visible_to(request.user)
        choices = {
            "queue": visible,
            "item": Item.objects.filter(queue__in=visible),
            "assignment": Assignment.objects.filter(queue__in=visible),
        }
        if db_field.name in choices:
            kwargs["queryset"] = choices[db_field.name]
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]


QUEUE_FILTER = ("queue", admin.RelatedOnlyFieldListFilter)


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin[Queue]):
    list_display = [
        "name",
        "kind",
        "study",
        "labels_per_item",
        "gold_min_votes",
        "summary_mode",
        "active",
        "created_at",
    ]
    list_filter = ["kind", "active"]

    def get_queryset(self, request: HttpRequest) -> Any:
        return Queue.objects.visible_to(request.user)

    def get_form(self, request: HttpRequest, obj: Queue | None = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        if "study" in form.base_fields:  # a queue copies transcripts out of its study: only a visible one
            field = form.base_fields["study"]
            assert isinstance(field, ModelChoiceField)
            field.queryset = Study.objects.visible_to(request.user)
        return form


@admin.register(Item)
class ItemAdmin(QueueScoped, admin.ModelAdmin[Item]):
    list_display = ["id", "queue", "unit", "status", "done_count", "in_flight", "required", "gold_label", "gold_method"]
    list_filter = [QUEUE_FILTER, "status", "gold_method"]
    search_fields = ["external_id", "unit"]


@admin.register(Assignment)
class AssignmentAdmin(QueueScoped, admin.ModelAdmin[Assignment]):
    list_display = ["id", "queue", "item", "annotator", "status", "created_at", "expires_at", "submitted_at"]
    list_filter = [QUEUE_FILTER, "status"]


@admin.register(Label)
class LabelAdmin(QueueScoped, admin.ModelAdmin[Label]):
    queue_path = "item__queue"
    list_display = ["id", "item", "annotator", "op", "revision", "changed", "created_at"]
    list_filter = [("item__queue", admin.RelatedOnlyFieldListFilter), "op"]


@admin.register(Draft)
class DraftAdmin(QueueScoped, admin.ModelAdmin[Draft]):
    queue_path = "assignment__queue"
