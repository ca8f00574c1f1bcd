from __future__ import annotations

from typing import Any

from django import forms

from annotation.models import PAIR_LABELS, Queue
from annotation.sources import ImportError_, parse_import

MAX_UPLOAD_BYTES = 20 * 1024 * 1024


class PairLabelForm(forms.Form):
    op = forms.ChoiceField(
        choices=[(x, x) for x in PAIR_LABELS],
        error_messages={
            "required": "Choose an operation (keys 1-4) or FUSION.",
            "invalid_choice": "Unknown operation %(value)s: choose PASS, REPLACE, APPEND, DELETE or FUSION.",
        },
    )
    fused_text = forms.CharField(required=False, strip=True)


class SummaryEditForm(forms.Form):
    text = forms.CharField(required=False, strip=False, widget=forms.Textarea)


class AdjudicationForm(forms.Form):
    label = forms.ChoiceField(choices=[(x, x) for x in (*PAIR_LABELS, "DISCARD")])
    fused_text = forms.CharField(required=False, strip=True)


class QueueForm(forms.ModelForm[Queue]):
    source_file = forms.FileField(
        required=False,
        help_text="CSV or JSONL (see the columns in docs/annotation.md). Leave empty to use the study's data.",
    )
    lease_minutes = forms.IntegerField(
        min_value=1, max_value=24 * 60, initial=20, help_text="An untouched item returns to the pool after this."
    )

    class Meta:
        model = Queue
        fields = [
            "name",
            "kind",
            "study",
            "instructions",
            "labels_per_item",
            "gold_min_votes",
            "summary_mode",
            "stage_groups",
            "max_edit_chars",
        ]
        widgets = {"instructions": forms.Textarea(attrs={"rows": 3}), "stage_groups": forms.TextInput()}
        help_texts = {
            "stage_groups": 'Chained summaries only: a JSON list of group names per stage, e.g. ["", "seniors"].'
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a judge sample (scores) is drawn from a study on its Automatic judges page, stratified by arm
        kind = self.fields["kind"]
        kind.choices = [c for c in kind.choices if c[0] != Queue.Kind.SCORES]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        n, votes = data.get("labels_per_item"), data.get("gold_min_votes")
        if n and votes and votes > n:
            self.add_error("gold_min_votes", "A label cannot need more votes than the labels per item.")
        groups = data.get("stage_groups") or []
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            self.add_error("stage_groups", 'Give a JSON list of group names (use "" for any annotator).')
        else:
            data["stage_groups"] = groups  # an empty box means "any annotator at every stage"
        upload = data.get("source_file")
        if not upload and not data.get("study"):
            raise forms.ValidationError("Choose a study to take items from, or upload a CSV / JSONL file.")
        if upload and data.get("kind"):
            data["specs"] = parse_upload(self, upload, data["kind"], "source_file")
        return data

    def save(self, commit: bool = True) -> Queue:
        queue = super().save(commit=False)
        queue.lease_seconds = self.cleaned_data["lease_minutes"] * 60
        if commit:
            queue.save()
        return queue


class ImportForm(forms.Form):
    source_file = forms.FileField()

    def __init__(self, *args: Any, queue: Queue, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = queue

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("source_file"):
            data["specs"] = parse_upload(self, data["source_file"], self.queue.kind, "source_file")
        return data


def parse_upload(form: forms.BaseForm, upload: Any, kind: str, field: str) -> list[dict[str, Any]] | None:
    if upload.size > MAX_UPLOAD_BYTES:
        form.add_error(field, f"The file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB.")
        return None
    try:
        return parse_import(upload.read(), kind=kind, filename=upload.name)
    except UnicodeDecodeError:
        form.add_error(field, "The file is not UTF-8 text.")
    except ImportError_ as exc:
        form.add_error(field, f"Nothing was imported: {exc}.")
    return None
