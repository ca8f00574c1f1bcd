from __future__ import annotations

import re

from django import forms

from prolific.models import Wave

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class WaveForm(forms.ModelForm[Wave]):
    class Meta:
        model = Wave
        fields = ["number", "prolific_study_id", "next_group_id", "next_due_at", "reminder_text", "bonus_per_episode"]
        widgets = {"next_due_at": forms.DateTimeInput(attrs={"type": "datetime-local"})}

    def _id(self, name: str, required: bool) -> str:
        value = str(self.cleaned_data.get(name) or "").strip()
        if (value or required) and not _ID.match(value):
            raise forms.ValidationError("A Prolific id is letters, digits, '-' and '_' only.")
        return value

    def clean_prolific_study_id(self) -> str:
        return self._id("prolific_study_id", True)

    def clean_next_group_id(self) -> str:
        return self._id("next_group_id", False)
