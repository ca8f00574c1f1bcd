"""Command-line interface.

* ``python -m analysis report RATINGS.csv --worker COL --unit COL --arm COL ...``: the contract
  (docs/analysis.md): wide or long CSV in, one report out (json, md, latex, html or csv) on stdout or in
  ``--out``. Exit status 0 on success, 2 on unusable input (message on stderr).
* ``python -m analysis calibrate ...``: simulate studies of a design and print each test's family-wise
  false-positive rate, CI coverage and power (:mod:`analysis.calibration`).
* ``python -m analysis plan ...``: workers needed for a target power (:mod:`analysis.planning`).
* ``python -m analysis pairwise VOTES.csv ...``: pairwise judgements (ACUTE-Eval, live side by side): win rates,
  a Bradley-Terry leaderboard, position bias, style control (:mod:`analysis.pairwise_cli`).
* ``python -m analysis plan-pairwise ...``: judges needed for a pairwise design (:mod:`analysis.pairwise_power`).
* ``python -m analysis prereg --title ... --metrics ... [--out FILE]``: write a pre-registration (the analysis
  settings, primary comparisons and alpha, and the probe rates made primary, with their sha256) for a later
  ``report --prereg FILE`` or ``probes --prereg FILE``; ``prereg --verify FILE`` checks a registration's hash.

matplotlib is imported only when a plot is drawn (``--format html``), statsmodels' formula API only for the
mixed model, so that a cold ``report`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.spec import ALPHA, DUPLICATE_POLICIES, FAMILIES, TESTS, RatingsError, write_out
from analysis.writers import CSV_TABLES

FORMATS = ("json", "md", "latex", "html", "csv")


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analysis", description="memeval statistical analysis")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="analyse a ratings CSV (wide: one column per metric; or long)")
    rep.add_argument("ratings", help="ratings CSV file")
    rep.add_argument("--worker", required=True, help="column identifying the worker (rater)")
    rep.add_argument("--unit", required=True, help="column identifying the rated unit (episode, HIT)")
    rep.add_argument("--arm", required=True, help="column naming the system/arm")
    rep.add_argument("--session", help="column with the session index (optional)")
    rep.add_argument("--metrics", required=True, type=_list, help="comma-separated metric names")
    rep.add_argument("--reverse", type=_list, default=[], help="metrics to score as 100 - x")
    rep.add_argument("--qc-arm", help="the degraded quality-control arm")
    rep.add_argument("--qc-metrics", type=_list, default=[], help="metrics for the QC test (default: all)")
    rep.add_argument(
        "--test",
        choices=TESTS,
        default="cluster-t",
        help="pairwise test (default cluster-t: worker-clustered t-test; mwu-greater reproduces Ji et al. 2022)",
    )
    rep.add_argument(
        "--family",
        choices=FAMILIES,
        default="metric",
        help="what one Holm correction covers: one metric (default), all metrics together, or every test",
    )
    rep.add_argument(
        "--exclude",
        type=_list,
        default=[],
        metavar="COLUMN[,COLUMN]",
        help="boolean columns: remove every worker flagged true in any of their rows",
    )
    rep.add_argument(
        "--exclude-rows",
        type=_list,
        default=[],
        metavar="COLUMN[,COLUMN]",
        help="boolean columns: remove only the rows flagged true (e.g. unfinished episodes)",
    )
    rep.add_argument(
        "--include-non-blind",
        action="store_true",
        help="keep the sessions flagged in a 'non_blind' column (memeval's blinding scan); by default they are "
        "removed as a row filter and counted per arm",
    )
    rep.add_argument(
        "--duplicates",
        choices=DUPLICATE_POLICIES,
        default="refuse",
        help="rows that are exact copies of another row: refuse the file (default), drop the copies, or keep them "
        "as distinct conversations (rows that share their keys but differ are always kept, and counted)",
    )
    rep.add_argument(
        "--primary",
        type=_list,
        metavar="METRIC[:ARM_A:ARM_B][@SESSION],...",
        help="the primary (confirmatory) comparisons, Holm-corrected as one family; every other test is exploratory "
        "(default: the pre-registration's, else every metric and 'overall', every pair of arms, over all sessions)",
    )
    rep.add_argument(
        "--alpha",
        type=float,
        help="significance level of the arm comparisons (default: the pre-registration's, else 0.05)",
    )
    rep.add_argument(
        "--covariates",
        type=_list,
        default=[],
        metavar="COLUMN[,COLUMN]",
        help="numeric columns (e.g. latency_shown_s): reported per arm and put into a mixed model beside the arm",
    )
    rep.add_argument("--prereg", type=Path, help="a pre-registration JSON file to check the analysis against")
    rep.add_argument("--format", choices=FORMATS, default="json")
    rep.add_argument("--out", type=Path, help="write here instead of stdout")
    rep.add_argument("--metric-col", help="long format: column with the metric name (default 'metric')")
    rep.add_argument("--value-col", help="long format: column with the score (default 'score')")
    rep.add_argument(
        "--csv-table",
        choices=(*CSV_TABLES, "ratings"),
        default="summary",
        help="which table --format csv writes (ratings = every rating with its z-score)",
    )
    rep.add_argument(
        "--mixedlm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fit the mixed model (default: only when every worker rated one arm)",
    )
    rep.add_argument("--reference-arm", help="reference level of the mixed model (default: first arm)")

    reg = sub.add_parser(
        "prereg",
        help="write a pre-registration (JSON with its sha256) for a later `report --prereg`, or --verify one",
    )
    reg.add_argument("--verify", type=Path, metavar="PREREG.json", help="check a registration's hash and stop")
    reg.add_argument("--title", help="the study's title")
    reg.add_argument("--metrics", type=_list, help="comma-separated metric names")
    reg.add_argument("--reverse", type=_list, default=[], help="metrics scored as 100 - x")
    reg.add_argument("--arms", type=_list, default=[], help="the arms to be compared (the QC arm apart)")
    reg.add_argument("--qc-arm", help="the degraded quality-control arm")
    reg.add_argument("--qc-metrics", type=_list, default=[], help="metrics for the QC test (default: all)")
    reg.add_argument("--test", choices=TESTS, default="cluster-t")
    reg.add_argument("--family", choices=FAMILIES, default="metric", help="Holm family of the exploratory tests")
    reg.add_argument("--primary", type=_list, metavar="METRIC[:ARM_A:ARM_B][@SESSION],...",
                     help="the primary comparisons (default: every metric and 'overall', every pair, all sessions)")  # fmt: skip
    reg.add_argument("--alpha", type=float, default=None, help="significance level (default 0.05)")
    reg.add_argument("--probe-primary", type=_list, default=[], metavar="RATE,...",
                     help="persona-card probe rates made primary outcomes (recall, stale_rate, deletion_honoured, "
                     "dependent_consistent)")  # fmt: skip
    reg.add_argument("--exclude", type=_list, default=[], help="worker exclusion columns")
    reg.add_argument("--exclude-rows", type=_list, default=[], help="row exclusion columns")
    reg.add_argument("--reference-arm", help="reference level of the mixed model")
    reg.add_argument("--sessions", type=int, help="sessions per episode")
    reg.add_argument("--episodes-per-worker", type=int, help="episodes (arms) per worker")
    reg.add_argument("--notes", default="", help="free-text exclusion rules and other commitments")
    reg.add_argument("--out", type=Path, help="write here instead of stdout (refuses to overwrite a file)")

    jud = sub.add_parser(
        "judge",
        help="admission test of an automatic judge: a long CSV of item, rater, score, arm (the judge is one rater)",
    )
    jud.add_argument(
        "csv", type=Path, help="one row per score: columns item, rater, score, arm (and metric, if several)"
    )
    jud.add_argument("--judge", required=True, help="the rater name of the judge's rows")
    jud.add_argument(
        "--epsilon", type=float, default=0.15, help="alt-test allowance (0.2 experts, 0.15 skilled, 0.1 crowd)"
    )
    jud.add_argument("--q", type=float, default=0.05, help="Benjamini-Yekutieli false discovery rate")
    jud.add_argument("--min-items", type=int, default=50, help="items the sample needs")
    jud.add_argument("--min-annotators", type=int, default=3, help="annotators each item needs")
    jud.add_argument("--bootstrap", type=int, default=2000, help="bootstrap replicates of Kendall's tau")
    jud.add_argument("--seed", type=int, default=0)

    pro = sub.add_parser(
        "probes", help="what the bot remembered: analyse persona-card probes (memeval's probes export, CSV or JSONL)"
    )
    pro.add_argument("probes", type=Path, help="the probes file (manage.py export_study SLUG --what probes)")
    pro.add_argument("--test", choices=TESTS, default="cluster-t", help="the test comparing arms (the sliders')")
    pro.add_argument("--ratings", type=Path, help="the ratings export, for recall against the rating (optional)")
    pro.add_argument("--rating-metric", default="memorability", help="the rating set against recall")
    pro.add_argument("--primary", type=_list, default=[], help="rates the pre-registration made primary")
    pro.add_argument("--prereg", type=Path, metavar="PREREG.json",
                     help="a pre-registration: its probes.primary rates and its alpha (instead of --primary)")  # fmt: skip
    pro.add_argument("--offline", action="append", default=[], metavar="ARM=RESULT.json",
                     help="an offline card evaluation of live arm ARM (`memory eval ... --dataset cards --format json "
                     "--out RESULT.json`), set beside the live probes; repeat per arm")  # fmt: skip
    pro.add_argument("--format", choices=("json", "md"), default="json")
    pro.add_argument("--out", type=Path, help="write here instead of stdout")
    _design_arguments(
        sub.add_parser(
            "calibrate",
            help="simulate studies of a design: family-wise false-positive rate, CI coverage and power per test",
        ),
        calibrate=True,
    )
    _design_arguments(
        sub.add_parser("plan", help="workers needed for a target power at a smallest effect size, by simulation"),
        calibrate=False,
    )
    from analysis import pairwise_cli

    pairwise_cli.add_arguments(
        sub.add_parser("pairwise", help="analyse a votes CSV: win rates, Bradley-Terry leaderboard, style control")
    )
    pairwise_cli.add_plan_arguments(
        sub.add_parser("plan-pairwise", help="judges needed for a pairwise design's target power, by simulation")
    )
    return parser


def _design_arguments(p: argparse.ArgumentParser, *, calibrate: bool) -> None:
    """The simulated design and variance components (defaults: docs/analysis.md, "Calibration")."""
    p.add_argument("--design", choices=("within", "nested", "mixed"), default="within", help="arm assignment")
    p.add_argument(
        "--workers",
        type=int,
        default=60,
        help="workers per study" + (" (plan: the smallest tried)" if not calibrate else ""),
    )
    p.add_argument("--arms", type=int, default=4, help="real arms (the QC arm comes on top)")
    p.add_argument("--episodes-per-worker", type=int, default=2)
    p.add_argument("--sessions", type=int, default=5, help="sessions per episode")
    p.add_argument("--metrics", type=int, default=5, help="metrics rated per session")
    p.add_argument("--qc", action=argparse.BooleanOptionalAction, default=True, help="one QC session per worker")
    p.add_argument("--careless", type=float, default=0.05, help="share of careless workers (random sliders)")
    p.add_argument("--worker-sd", type=float, help="SD of the workers' leniency (slider points)")
    p.add_argument("--scale-sd", type=float, help="SD of the log of the workers' range use")
    p.add_argument("--episode-sd", type=float, help="SD of an episode's own level (points)")
    p.add_argument("--session-sd", type=float, help="SD of a session's own level (points)")
    p.add_argument("--residual-sd", type=float, help="SD of a single rating (points)")
    p.add_argument("--pilot", type=Path, help="estimate the variance components from a pilot ratings CSV instead")
    p.add_argument("--pilot-columns", type=_list, metavar="WORKER,UNIT,ARM,SESSION",
                   help="the pilot CSV's key columns (default worker,episode,arm,session)")  # fmt: skip
    p.add_argument("--pilot-metrics", type=_list, help="the pilot CSV's metric columns (default: all numeric)")
    p.add_argument("--pilot-qc-arm", help="the pilot's QC arm (its failed workers are left out of the estimate)")
    p.add_argument("--pilot-qc-metrics", type=_list, default=[], help="the pilot's QC metrics (default: all)")
    p.add_argument("--effect", type=float, default=0.3,
                   help="true difference between the first arm and the others, in latent SD units"
                   + ("" if calibrate else " (the smallest effect of interest)"))  # fmt: skip
    p.add_argument("--studies", type=int, default=1000 if calibrate else 100, help="simulated studies per setting")
    p.add_argument("--tests", type=_list, default=list(TESTS) if calibrate else ["cluster-t"],
                   help=f"tests to evaluate (of {', '.join(TESTS)})")  # fmt: skip
    p.add_argument("--family", choices=FAMILIES, default="metric")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--format", choices=("text", "json"), default="text")
    if calibrate:
        p.add_argument("--mixedlm", action=argparse.BooleanOptionalAction, default=None,
                       help="also calibrate the mixed model (default: for nested designs, where it is the main analysis)")  # fmt: skip
        p.add_argument("--sessions-tests", action=argparse.BooleanOptionalAction, default=True,
                       help="also run the per-session tests (for the any-mark-anywhere rate)")  # fmt: skip
    else:
        p.add_argument("--power", type=float, default=0.8, help="target power")
        p.add_argument(
            "--components-only", action="store_true", help="print the variance components (e.g. of --pilot) and stop"
        )
        p.add_argument("--max-workers", type=int, default=400, help="the largest study tried")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "calibrate":
            from analysis.simcli import calibrate_main

            return calibrate_main(args)
        if args.command == "plan":
            from analysis.simcli import plan_main

            return plan_main(args)
        if args.command == "pairwise":
            from analysis.pairwise_cli import main as pairwise_main

            return pairwise_main(args)
        if args.command == "plan-pairwise":
            from analysis.pairwise_power import main as plan_pairwise_main

            return plan_pairwise_main(args)
        if args.command == "prereg":
            return _prereg(args)
        if args.command == "judge":
            return _judge(args)
        if args.command == "probes":
            return _probes(args)
        return _report(args)
    except RatingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        if args.command == "report":
            raise
        # a design or setting the simulation cannot use (e.g. more episodes per worker than arms)
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _judge(args: argparse.Namespace) -> int:
    """Print the admission JSON (per metric when the CSV has a metric column); exit 0 admitted, 1 not."""
    import json

    import pandas as pd

    from analysis.judging import admission

    if not args.csv.is_file():
        raise RatingsError(f"{args.csv}: no such file")
    frame = pd.read_csv(args.csv)
    missing = [c for c in ("item", "rater", "score", "arm") if c not in frame.columns]
    if missing:
        raise RatingsError(f"{args.csv} has no column {', '.join(missing)} (needs item, rater, score, arm)")
    frame["rater"] = frame["rater"].astype(str)
    frame["item"] = frame["item"].astype(str)
    if args.judge not in set(frame["rater"]):
        raise RatingsError(f"no row has rater {args.judge!r}")
    options: dict[str, Any] = {
        "judge": args.judge, "epsilon": args.epsilon, "q": args.q, "min_items": args.min_items,
        "min_annotators": args.min_annotators, "n_boot": args.bootstrap, "seed": args.seed,
    }  # fmt: skip
    if "metric" in frame.columns:
        out: dict[str, Any] = {
            str(m): admission(group.drop(columns="metric"), **options) for m, group in frame.groupby("metric")
        }
        admitted = all(r["admitted"] for r in out.values())
        out = {"admitted": admitted, "metrics": out}
    else:
        out = admission(frame, **options)
        admitted = out["admitted"]
    print(json.dumps(out, indent=1))
    return 0 if admitted else 1


def _report(args: argparse.Namespace) -> int:
    from analysis import writers
    from analysis.data import read_csv
    from analysis.report import run
    from analysis.spec import AnalysisSpec

    if args.out is not None:
        # refused before the analysis runs, not after minutes of it
        if args.out.is_dir():
            raise RatingsError(f"--out {args.out} is a directory; give a file name")
        if not args.out.parent.is_dir():
            raise RatingsError(f"--out {args.out}: the folder {args.out.parent} does not exist")
    prereg: dict[str, Any] | None = None
    if args.prereg:
        from analysis.prereg import read_preregistration

        prereg = read_preregistration(args.prereg)
    spec = AnalysisSpec(
        worker=args.worker,
        unit=args.unit,
        arm=args.arm,
        metrics=tuple(args.metrics),
        session=args.session,
        reverse=tuple(args.reverse),
        qc_arm=args.qc_arm,
        qc_metrics=tuple(args.qc_metrics),
        test=args.test,
        family=args.family,
        metric_col=args.metric_col,
        value_col=args.value_col,
        mixedlm=args.mixedlm,
        reference_arm=args.reference_arm,
        exclude=tuple(args.exclude),
        exclude_rows=tuple(args.exclude_rows),
        preregistration=prereg,
        duplicates=args.duplicates,
        primary=tuple(args.primary) if args.primary else None,
        alpha=args.alpha,
        covariates=tuple(args.covariates),
        include_non_blind=args.include_non_blind,
    )
    analysis = run(read_csv(args.ratings), spec)
    result = analysis.result
    if args.format == "json":
        text = json.dumps(result, indent=1, allow_nan=False) + "\n"
    elif args.format == "md":
        text = writers.to_markdown(result)
    elif args.format == "latex":
        text = writers.to_latex(result)
    elif args.format == "html":
        text = writers.to_html(result, title=f"Analysis of {Path(args.ratings).name}")
    else:
        text = writers.to_csv(analysis.ratings if args.csv_table == "ratings" else result, table=args.csv_table)
    write_out(args.out, text)
    return 0


def _probes(args: argparse.Namespace) -> int:
    import pandas as pd

    from analysis.probes import METRICS, analyze_probes, read_probe_table, to_markdown

    primary, alpha = list(args.primary), ALPHA
    if args.prereg:
        from analysis.prereg import probe_primary, read_preregistration

        if args.primary:
            raise RatingsError("give --primary or --prereg, not both")
        doc = read_preregistration(args.prereg)
        primary = probe_primary(doc)
        alpha = float((doc.get("analysis") or {}).get("alpha") or ALPHA)
    unknown = [m for m in primary if m not in METRICS]
    if unknown:
        raise RatingsError(f"--primary: unknown rate(s) {', '.join(unknown)} (one of {', '.join(METRICS)})")
    ratings = None
    if args.ratings:
        table = read_probe_table(args.ratings)
        if not {"metric", "value", "session"} <= set(table.columns) or "unit" not in table.columns:
            raise RatingsError(f"{args.ratings}: a ratings export has episode, session, metric and value columns")
        rows = table[table["metric"] == args.rating_metric]
        ratings = pd.DataFrame({"unit": rows["unit"].astype(str), "session": pd.to_numeric(rows["session"]),
                                args.rating_metric: pd.to_numeric(rows["value"])})  # fmt: skip
    frame = read_probe_table(args.probes)
    if "unit" in frame.columns:
        frame["unit"] = frame["unit"].astype(str)
    offline = _offline_results(args.offline)
    result = analyze_probes(frame, test=args.test, ratings=ratings, rating_metric=args.rating_metric,
                            primary=primary, alpha=alpha, offline=offline)  # fmt: skip
    text = json.dumps(result, indent=1, allow_nan=False) + "\n" if args.format == "json" else to_markdown(result)
    write_out(args.out, text)
    return 0


def _offline_results(given: Sequence[str]) -> list[dict[str, Any]] | None:
    """The probes of ``--offline ARM=RESULT.json`` files (memory eval's JSON report of a cards run) as rows."""
    from analysis.probes import offline_rows

    if not given:
        return None
    rows: list[dict[str, Any]] = []
    for spec in given:
        arm, sep, path = spec.partition("=")
        if not sep or not arm or not path:
            raise RatingsError(f"--offline {spec!r}: write ARM=RESULT.json (the live arm's name, then the file)")
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RatingsError(f"--offline {path} cannot be read as JSON: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("dataset") != "cards" or not isinstance(doc.get("items"), list):
            raise RatingsError(f"--offline {path} is not a cards run (memory eval ARM --dataset cards --format json)")
        try:
            rows += offline_rows(doc["items"], arm)
        except (KeyError, TypeError) as exc:
            raise RatingsError(f"--offline {path}: a probe lacks {exc}") from exc
    return rows


def _prereg(args: argparse.Namespace) -> int:
    from analysis.prereg import analysis_settings, build_preregistration, digest, read_preregistration
    from analysis.spec import AnalysisSpec

    if args.verify is not None:
        doc = read_preregistration(args.verify)
        ok = doc["sha256"] == digest(doc)
        print(
            f"{args.verify}: sha256 {doc['sha256']} "
            + ("matches its content" if ok else f"does NOT match its content ({digest(doc)}): it was edited")
        )
        return 0 if ok else 1
    if not args.title or not args.metrics:
        raise RatingsError("a registration needs --title and --metrics (or --verify FILE)")
    if args.out is not None and args.out.exists():
        raise RatingsError(f"--out {args.out} exists: a registration is written once, never overwritten")
    spec = AnalysisSpec(
        worker="worker",
        unit="unit",
        arm="arm",
        metrics=tuple(args.metrics),
        reverse=tuple(args.reverse),
        qc_arm=args.qc_arm,
        qc_metrics=tuple(args.qc_metrics),
        test=args.test,
        family=args.family,
        exclude=tuple(args.exclude),
        exclude_rows=tuple(args.exclude_rows),
        reference_arm=args.reference_arm,
        primary=tuple(args.primary) if args.primary else None,
        alpha=args.alpha,
    )
    arm_names = set(args.arms)
    for c in spec.primary or ():
        if arm_names and c.a is not None and not {c.a, c.b} <= arm_names:
            raise RatingsError(f"primary comparison {c.label()} names an arm not in --arms {sorted(arm_names)}")
    design = {
        k: v
        for k, v in (("sessions_per_episode", args.sessions), ("episodes_per_worker", args.episodes_per_worker))
        if v is not None
    }
    doc = build_preregistration(
        title=args.title,
        design=design,
        arms=[{"name": a, "is_qc": False} for a in args.arms]
        + ([{"name": args.qc_arm, "is_qc": True}] if args.qc_arm else []),
        metrics=[{"key": m, "reversed": m in spec.reverse} for m in spec.metrics],
        exclusion_rules={
            "quality_control": {
                "arm": spec.qc_arm,
                "metrics": list(spec.effective_qc_metrics),
                "rule": "a worker passes when a one-sided Mann-Whitney U test finds the QC arm rated lower than the "
                "other arms at p < 0.05; workers who fail are excluded",
            }
            if spec.qc_arm
            else None,
            "filters": list(spec.exclude),
            "row_filters": list(spec.exclude_rows),
            "notes": args.notes,
        },
        analysis=analysis_settings(spec),
        probes={"primary": args.probe_primary} if args.probe_primary else None,
    )
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        with args.out.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise RatingsError(f"cannot write --out {args.out}: {exc.strerror or exc}") from exc
    print(f"registered {args.out}: sha256 {doc['sha256']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
