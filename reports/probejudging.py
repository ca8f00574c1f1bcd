"""Which persona-card probe answers an automatic judge scored, for the study's probe tables.

A free-text card fact (a plan in a phrase of its own) is not scored by the card's key phrases in the report: it
counts only with the verdict of an automatic judge admitted on the study's own probe answers, shown with its
admission figures; without one its probes are listed as "not admitted" and kept out of recall. The judges app
(which sits above reports) registers the provider of those verdicts in its AppConfig (judges/probes.py): a
:class:`ProbeJudging` whose ``judging(study)`` gives the chosen judge's verdicts and figures (None: no judge
scored a probe) and whose ``version(study)`` changes with them (the dashboard's cache key).
"""

from __future__ import annotations

from typing import Any, Protocol


class ProbeJudging(Protocol):
    def judging(self, study: Any) -> dict[str, Any] | None:
        """``{"judge", "model", "prompt", "prompt_sha256", "admitted", "admission", "reasons", "verdicts"}``:
        ``verdicts`` maps a ProbeResult id to the judge's label (None: unreadable)."""
        ...

    def version(self, study: Any) -> str: ...


_PROVIDERS: list[ProbeJudging] = []


def register(provider: ProbeJudging) -> None:
    if provider not in _PROVIDERS:
        _PROVIDERS.append(provider)


def judging(study: Any) -> dict[str, Any] | None:
    for provider in _PROVIDERS:
        found = provider.judging(study)
        if found is not None:
            return found
    return None


def version(study: Any) -> str:
    return ",".join(p.version(study) for p in _PROVIDERS)


def judged_scores(row: dict[str, Any], label: bool | None, stale_mentioned: bool) -> None:
    """A free-text probe's scores (``row``: ``kind``, ``recalled``, ``stale``, ``correct``, ``stage``,
    ``scored_by``) from the admitted judge's ``label``; None (no admitted judge's verdict) empties them and
    marks the probe "not admitted", so every rate leaves it out."""
    if label is None:
        row.update(recalled=None, stale=None, correct=None, stage=None, scored_by="not admitted")
        return
    stale = (stale_mentioned and not label) if row["kind"] == "updated" else None
    row.update(recalled=label, stale=stale, correct=bool(label and not stale), scored_by="judge")
    if row["correct"]:
        row["stage"] = None
