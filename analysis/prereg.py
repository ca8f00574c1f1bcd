"""Pre-registration: a document fixed before launch (design, arms, metrics, exclusion rules, analysis settings,
and optionally the power analysis) with the SHA-256 of its content, and the check a report makes against it.

The hash is taken over the document without its ``sha256`` key, serialised canonically (sorted keys, no
whitespace, UTF-8), so anyone can recompute it::

    body = {k: v for k, v in doc.items() if k != "sha256"}
    hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()

A report given a pre-registration (``analyze(..., preregistration=doc)``, ``--prereg FILE``) says in its
``preregistration`` section whether the hash matches the content (the file was not edited after registration)
and lists every analysis setting, arm or design figure that departs from it; a setting the registration does
not fix counts as a departure. The registration's ``alpha`` and ``primary`` comparisons are applied unless the
analysis sets its own (then the check lists the difference); its ``probes.primary`` rates (a study with persona
cards) are the persona-card probe rates made primary (:func:`probe_primary`, read by the probe analysis).
``python -m analysis prereg`` writes one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.spec import CONFIDENCE, OVERALL, AnalysisSpec, Comparison, RatingsError

if TYPE_CHECKING:
    from analysis.report import Prepared

FORMAT = "memeval-preregistration/1"
# settings compared as sets: their order carries no meaning
_UNORDERED = frozenset({"metrics", "reverse", "qc_metrics", "exclude", "exclude_rows"})

__all__ = ["FORMAT", "analysis_settings", "build_preregistration", "check_preregistration", "digest",
           "primary_list", "probe_primary", "read_preregistration"]  # fmt: skip


def digest(doc: Mapping[str, Any]) -> str:
    """SHA-256 of the document's content (everything but ``sha256``), canonical JSON."""
    body = {k: v for k, v in doc.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def primary_list(spec: AnalysisSpec) -> list[dict[str, Any]]:
    """The primary comparisons ``spec`` uses, written out: the default (every metric and the overall score,
    every pair of arms, over all sessions) as one entry per score, so that a registration states it."""
    primary, _ = spec.effective_primary
    if primary is None:
        primary = tuple(Comparison(m) for m in (OVERALL, *spec.metrics))
    return [c.as_dict() for c in primary]


def analysis_settings(spec: AnalysisSpec) -> dict[str, Any]:
    """The analysis choices of ``spec`` that a pre-registration fixes (not the column names of a file)."""
    return {
        "metrics": list(spec.metrics),
        "reverse": list(spec.reverse),
        "qc_arm": spec.qc_arm,
        "qc_metrics": list(spec.effective_qc_metrics),
        "test": spec.test,
        "family": spec.family,
        "primary": primary_list(spec),
        "confidence": CONFIDENCE,
        "alpha": spec.effective_alpha,
        "exclude": list(spec.exclude),
        "exclude_rows": list(spec.exclude_rows),
        "reference_arm": spec.reference_arm,
    }


def _same_primary(registered: Any, used: Any) -> bool:
    def key(items: Any) -> set[tuple[Any, ...]]:
        out = set()
        for c in items or []:
            comparison = Comparison.of(c)
            out.add((comparison.metric, comparison.a, comparison.b, str(comparison.session)))
        return out

    try:
        return key(registered) == key(used)
    except (RatingsError, TypeError):
        return False


def build_preregistration(
    *,
    title: str,
    design: Mapping[str, Any],
    arms: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    exclusion_rules: Mapping[str, Any],
    analysis: Mapping[str, Any],
    planning: Mapping[str, Any] | None = None,
    created: str | None = None,
    probes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A pre-registration document with its hash. ``analysis`` is usually :func:`analysis_settings` of the spec
    the final report will use; ``arms`` are dicts with at least ``name`` (and ``is_qc``). ``probes`` (a study
    with persona cards) is ``{"primary": [rate, ...]}``: the probe rates (``analysis.probes.METRICS``) made
    primary outcomes; the document has a ``probes`` key only when given."""
    if probes is not None:
        from analysis.probes import METRICS as PROBE_METRICS

        rates = list(probes.get("primary") or [])
        unknown = [r for r in rates if r not in PROBE_METRICS]
        if unknown or len(set(rates)) != len(rates):
            raise RatingsError(f"primary probe rates {rates}: each once, among {', '.join(PROBE_METRICS)}")
    body: dict[str, Any] = {
        "format": FORMAT,
        "title": title,
        "created": created or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "design": dict(design),
        "arms": [dict(a) for a in arms],
        "metrics": [dict(m) for m in metrics],
        "exclusion_rules": dict(exclusion_rules),
        "analysis": dict(analysis),
        "planning": dict(planning) if planning is not None else None,
    }
    if probes is not None:
        body["probes"] = {**probes, "primary": rates}
    body = json.loads(json.dumps(body, allow_nan=False))  # plain JSON types only, so the hash is reproducible
    return {**body, "sha256": digest(body)}


def probe_primary(doc: Mapping[str, Any] | None) -> list[str]:
    """The persona-card probe rates a pre-registration made primary (``probes.primary``; none: [])."""
    section = (doc or {}).get("probes") or {}
    rates = section.get("primary") if isinstance(section, Mapping) else None
    return [str(r) for r in rates] if isinstance(rates, list) else []


def read_preregistration(path: str | Path) -> dict[str, Any]:
    """Load a pre-registration file; a clear :class:`RatingsError` when it is not one."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RatingsError(f"no such pre-registration file: {path}") from exc
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise RatingsError(f"{path} cannot be read as a pre-registration: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise RatingsError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("analysis"), dict):
        raise RatingsError(f"{path} is not a memeval pre-registration (format {FORMAT!r} with an 'analysis' section)")
    if not isinstance(doc.get("sha256"), str):
        raise RatingsError(f"{path} has no sha256: it was not produced by a registration")
    return doc


def check_preregistration(doc: Mapping[str, Any], spec: AnalysisSpec, prep: Prepared) -> dict[str, Any]:
    """The report's ``preregistration`` section: hash, whether everything matches, and each departure."""
    hash_ok = doc.get("sha256") == digest(doc)
    actual = analysis_settings(spec)
    registered_settings = doc.get("analysis") or {}
    differences: list[str] = []
    for key in [*actual, *(k for k in registered_settings if k not in actual)]:
        used = actual.get(key)
        if key not in registered_settings:
            # a setting the registration does not fix is not pre-registered, whatever its value
            differences.append(f"{key}: not in the registration (used {used!r})")
            continue
        registered = registered_settings[key]
        if key not in actual:
            same = registered is None
        elif key in _UNORDERED:
            same = sorted(map(str, registered or [])) == sorted(map(str, used or []))
        elif key == "primary":
            same = _same_primary(registered, used)
        elif isinstance(registered, (int, float)) and isinstance(used, (int, float)):
            same = abs(float(registered) - float(used)) < 1e-12
        else:
            same = registered == used
        if not same:
            differences.append(f"{key}: registered {registered!r}, used {used!r}")
    registered_arms = {str(a.get("name")) for a in doc.get("arms") or [] if not a.get("is_qc")}
    unregistered = [a for a in prep.arms if registered_arms and a not in registered_arms]
    if unregistered:
        differences.append(f"arms not in the registration: {unregistered}")
    sessions = (doc.get("design") or {}).get("sessions_per_episode")
    if spec.session is not None and isinstance(sessions, int) and len(prep.data):
        from analysis.data import SESSION

        observed = prep.data[SESSION]
        if observed.dtype.kind in "iu" and int(observed.max()) > sessions:
            differences.append(f"sessions_per_episode: registered {sessions}, the data have {int(observed.max())}")
    warnings = []
    if not hash_ok:
        warnings.append("the pre-registration's sha256 does not match its content: it was edited after registration")
    if differences:
        warnings.append("the analysis departs from the pre-registration: " + "; ".join(differences))
    return {
        "sha256": doc.get("sha256"),
        "title": doc.get("title"),
        "created": doc.get("created"),
        "hash_ok": hash_ok,
        "matches": hash_ok and not differences,
        "differences": differences,
        "warnings": warnings,
    }
