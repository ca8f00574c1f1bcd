"""What a run of ``python -m memory eval`` has finished (:class:`Journal`), and how a run stops early
(:class:`EvaluationStopped`) or refuses its input (:class:`DatasetError`): shared by the benchmark runs
(memory/evaluation.py, which re-exports them) and the persona-card runs (memory/cardeval.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memory.llm import LLMError


class DatasetError(ValueError):
    """A dataset file that cannot be read; the message names the file and the problem."""


class EvaluationStopped(LLMError):
    """The run stopped before its end: an LLM error that the retries did not cure, or an interrupt.
    ``journal`` holds every finished session and question (a run given it resumes); ``done`` and
    ``total`` count steps (sessions + questions)."""

    def __init__(self, message: str, *, journal: Journal, done: int, total: int) -> None:
        super().__init__(message)
        self.journal, self.done, self.total = journal, done, total


class Journal:
    """What a run has finished, one JSON record per line, written as it happens when given a path.

    Records: a ``header`` (the run's settings; a resumed run must match them), one ``session`` per
    replayed session (the arm's state after it, timings, LLM calls) and one ``question`` per scored
    question. A run given a journal with records skips what they cover: whole dialogues whose questions
    are all scored, and the sessions before the last recorded one (restoring its state)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.records: list[dict[str, Any]] = []

    @classmethod
    def load(cls, path: str | Path) -> Journal:
        journal = cls(path)
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise DatasetError(f"cannot read the results file {path}: {exc}") from exc
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                journal.records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if n == len(lines):  # the last line of a run killed mid-write: dropped, redone
                    break
                raise DatasetError(f"{path}:{n}: not a results record ({exc})") from exc
        return journal

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                f.flush()

    def save(self, path: str | Path) -> None:
        """Write every record to ``path`` (a run that had no file keeps its work here when it stops)."""
        Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.records), "utf-8")
        self.path = Path(path)

    @property
    def header(self) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("kind") == "header"), None)

    def start(self, settings: dict[str, Any]) -> None:
        """Begin a run with ``settings``: a new journal gets a header; one with records must match it."""
        header = self.header
        if header is None:
            self.add({"kind": "header", "version": 1, "settings": settings})
            return
        before = header.get("settings", {})
        differ = sorted(k for k in {*before, *settings} if before.get(k) != settings.get(k))
        if differ:
            shown = ", ".join(f"{k}: {before.get(k)!r} then, {settings.get(k)!r} now" for k in differ)
            raise DatasetError(f"the results file {self.path} is from a run with other settings ({shown})")

    def of(self, kind: str, dialogue: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind") == kind and r.get("dialogue") == dialogue]
