from __future__ import annotations

from django.contrib import admin

from reports.models import ImportedDataset


@admin.register(ImportedDataset)
class ImportedDatasetAdmin(admin.ModelAdmin[ImportedDataset]):
    list_display = ["name", "study", "n_ratings", "source_filename", "uploaded_by", "created_at"]
    list_filter = ["study"]
    readonly_fields = [
        "metrics",
        "reverse_metrics",
        "has_session",
        "qc_arm",
        "qc_metrics",
        "mapping",
        "n_ratings",
        "source_filename",
        "uploaded_by",
        "created_at",
    ]
