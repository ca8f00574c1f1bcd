"""The command lines of the simulations (``python -m analysis calibrate`` and ``plan``): the design and variance
components from the options (estimated from ``--pilot`` when given), then :mod:`analysis.calibration` or
:mod:`analysis.planning`, which import nothing of this module (the planner runs the calibration's
simulations, and the pilot's estimate is the planner's)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from analysis.calibration import calibrate
from analysis.data import read_csv
from analysis.planning import estimate_components, pilot_spec, workers_needed
from analysis.spec import Test
from analysis.synthetic import StudyDesign, VarianceComponents


def design_from_args(args: argparse.Namespace) -> StudyDesign:
    return StudyDesign(
        workers=args.workers,
        arms=args.arms,
        episodes_per_worker=args.episodes_per_worker,
        sessions=args.sessions,
        metrics=args.metrics,
        kind=args.design,
        qc=args.qc,
    )


def components_from_args(args: argparse.Namespace) -> tuple[VarianceComponents, list[str]]:
    """The variance components: estimated from ``--pilot`` or the defaults, each overridable by its option."""
    notes: list[str] = []
    base = VarianceComponents(careless_rate=args.careless)
    if args.pilot:
        frame = read_csv(args.pilot)
        spec = pilot_spec(frame, args.pilot_columns, args.pilot_metrics, args.pilot_qc_arm, args.pilot_qc_metrics)
        est = estimate_components(frame, spec)
        base, notes = est.components, est.notes
    overrides = {
        name: getattr(args, name)
        for name in ("worker_sd", "scale_sd", "episode_sd", "session_sd", "residual_sd")
        if getattr(args, name) is not None
    }
    return VarianceComponents(**{**asdict(base), **overrides}), notes


def calibrate_main(args: argparse.Namespace) -> int:
    """``python -m analysis calibrate``."""
    design = design_from_args(args)
    components, notes = components_from_args(args)
    result = calibrate(
        design,
        components,
        effect=args.effect,
        studies=args.studies,
        tests=args.tests,
        family=args.family,
        sessions=args.sessions_tests,
        mixedlm=args.mixedlm,
        seed=args.seed,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    if args.format == "json":
        sys.stdout.write(json.dumps({**result.as_dict(), "notes": notes}, indent=1) + "\n")
    else:
        sys.stdout.write("\n".join([*(f"note: {n}" for n in notes), result.text()]) + "\n")
    return 0


def plan_main(args: argparse.Namespace) -> int:
    """``python -m analysis plan``."""
    design = design_from_args(args)
    components, notes = components_from_args(args)
    if args.components_only:
        values = {**asdict(components), "latent_sd": components.latent_sd}
        if args.format == "json":
            sys.stdout.write(json.dumps({"components": values, "notes": notes}, indent=1) + "\n")
        else:
            lines = [*(f"note: {n}" for n in notes), *(f"{k:>14}: {v:.3f}" for k, v in values.items())]
            sys.stdout.write("\n".join(lines) + "\n")
        return 0
    test: Test = args.tests[0]
    plan = workers_needed(
        design,
        components,
        args.effect,
        target=args.power,
        studies=args.studies,
        test=test,
        family=args.family,
        max_workers=args.max_workers,
        seed=args.seed,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    plan.notes[:0] = notes
    if args.format == "json":
        sys.stdout.write(json.dumps(plan.as_dict(), indent=1) + "\n")
        return 0
    c = components
    lines = [*(f"note: {n}" for n in plan.notes)]
    lines.append(
        f"smallest effect {plan.effect:g} latent SD = {plan.effect * c.latent_sd:.1f} points; target power "
        f"{plan.target:g}; test {plan.test}, Holm family {plan.family}"
    )
    lines += [f"{p.workers:>6} workers: power {p.power:.3f} [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}]" for p in plan.curve]
    lines.append(
        f"workers needed: {plan.workers if plan.workers is not None else 'more than ' + str(args.max_workers)}"
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
