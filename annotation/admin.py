from django.contrib import admin

from annotation.models import Assignment, Draft, Item, Label, Queue


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


@admin.register(Item)
class ItemAdmin(admin.ModelAdmin[Item]):
    list_display = ["id", "queue", "unit", "status", "done_count", "in_flight", "required", "gold_label", "gold_method"]
    list_filter = ["queue", "status", "gold_method"]
    search_fields = ["external_id", "unit"]


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin[Assignment]):
    list_display = ["id", "queue", "item", "annotator", "status", "created_at", "expires_at", "submitted_at"]
    list_filter = ["queue", "status"]


@admin.register(Label)
class LabelAdmin(admin.ModelAdmin[Label]):
    list_display = ["id", "item", "annotator", "op", "revision", "changed", "created_at"]
    list_filter = ["item__queue", "op"]


admin.site.register(Draft)
