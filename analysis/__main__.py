"""Command-line interface: ``python -m analysis report RATINGS.csv --worker COL --unit COL --arm COL ...``.

The contract (docs/analysis.md): wide or long CSV in, one report out (json, md, latex, html or csv) on stdout
or in ``--out``. Exit status 0 on success, 2 on unusable input (message on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis import writers
from analysis.data import RatingsError, read_csv
from analysis.report import run
from analysis.stats import TESTS

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
    rep.add_argument("--test", choices=TESTS, default="mwu-greater")
    rep.add_argument("--format", choices=FORMATS, default="json")
    rep.add_argument("--out", type=Path, help="write here instead of stdout")
    rep.add_argument("--metric-col", help="long format: column with the metric name (default 'metric')")
    rep.add_argument("--value-col", help="long format: column with the score (default 'score')")
    rep.add_argument(
        "--csv-table",
        choices=(*writers.CSV_TABLES, "ratings"),
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.value_col and not args.metric_col:
            args.metric_col = "metric"
        if args.metric_col and not args.value_col:
            args.value_col = "score"
        analysis = run(
            read_csv(args.ratings),
            worker=args.worker,
            unit=args.unit,
            arm=args.arm,
            metrics=args.metrics,
            session=args.session,
            reverse=args.reverse,
            qc_arm=args.qc_arm,
            qc_metrics=args.qc_metrics,
            test=args.test,
            metric_col=args.metric_col,
            value_col=args.value_col,
            mixedlm=args.mixedlm,
            reference_arm=args.reference_arm,
        )
    except RatingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
