"""``python -m analysis pairwise`` and ``python -m analysis plan-pairwise``: their options and the report command.

Light on imports at module level: the parser of ``python -m analysis`` is built for every command, and a cold
``report`` must stay fast (docs/analysis.md, "A cold command-line report").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from analysis.spec import RatingsError, write_out

FORMATS = ("json", "md", "latex", "html")


def _pair(text: str) -> tuple[str, str]:
    parts = [t.strip() for t in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise argparse.ArgumentTypeError("give two column names: COLUMN_A,COLUMN_B")
    return parts[0], parts[1]


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m analysis pairwise``."""
    p.add_argument("votes", help="votes CSV: one row per vote")
    p.add_argument("--judge", default="judge", help="column identifying the judge (default judge)")
    p.add_argument("--arm-a", default="arm_a", help="column with the arm shown first: left, or 'A' (default arm_a)")
    p.add_argument("--arm-b", default="arm_b", help="column with the arm shown second (default arm_b)")
    p.add_argument("--winner", default="winner", help="column with the winner: a, b, tie or both_bad (default winner)")
    p.add_argument("--question", default="question", help="column with the question asked, if any (default question)")
    p.add_argument("--primary-question", help="the question of the top-level leaderboard (default: the first)")
    p.add_argument("--length", type=_pair, default=("len_a", "len_b"), metavar="COL_A,COL_B",
                   help="style control: the length of what each side said (default len_a,len_b, when present)")  # fmt: skip
    p.add_argument("--callbacks", type=_pair, default=("callbacks_a", "callbacks_b"), metavar="COL_A,COL_B",
                   help="style control: each side's callbacks to earlier sessions (default callbacks_a,callbacks_b)")  # fmt: skip
    p.add_argument("--no-style", action="store_true", help="no style control even when the columns are present")
    p.add_argument("--qc-arm", help="the QC arm: its votes (check pairs) are left out")
    p.add_argument("--exclude", type=_list, default=[], metavar="COLUMN[,COLUMN]",
                   help="boolean columns: remove every judge flagged true in any row (e.g. failed_checks)")  # fmt: skip
    p.add_argument("--exclude-rows", type=_list, default=[], metavar="COLUMN[,COLUMN]",
                   help="boolean columns: remove only the flagged votes (e.g. check)")  # fmt: skip
    p.add_argument("--sliders", type=Path, metavar="REPORT.json",
                   help="a JSON report of `python -m analysis report` on the same arms: Kendall's tau with its ordering")  # fmt: skip
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (judges resampled; default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=FORMATS, default="json")
    p.add_argument("--out", type=Path, help="write here instead of stdout")


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m analysis plan-pairwise``."""
    p.add_argument("--arms", type=int, default=4, help="arms compared (the QC arm of the check pairs not counted)")
    p.add_argument("--judges", type=int, default=20, help="the smallest number of judges tried")
    p.add_argument("--votes-per-judge", type=int, default=10, help="pairs each judge votes on")
    p.add_argument("--win-rate", type=float, default=0.6,
                   help="the smallest effect of interest: how often the best arm wins a decided vote against each other arm")  # fmt: skip
    p.add_argument("--judge-sd", type=float, default=0.5, help="SD of a judge's own taste per arm (log-odds)")
    p.add_argument("--tie-rate", type=float, default=0.1, help="share of votes that are ties or 'both bad'")
    p.add_argument("--position", type=float, default=0.0, help="log-odds advantage of the side shown first")
    p.add_argument("--careless", type=float, default=0.0, help="share of judges who vote at random")
    p.add_argument("--power", type=float, default=0.8, help="target power")
    p.add_argument("--studies", type=int, default=200, help="simulated studies per size")
    p.add_argument("--max-judges", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--format", choices=("text", "json"), default="text")


def slider_means(path: Path) -> dict[str, float]:
    """Each arm's overall score from a JSON report of ``python -m analysis report``."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RatingsError(f"no such file: {path}") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RatingsError(f"{path} is not a JSON report of `python -m analysis report`: {exc}") from exc
    arms = report.get("arms") if isinstance(report, dict) else None
    if not isinstance(arms, dict):
        raise RatingsError(f"{path} is not a JSON report of `python -m analysis report` (no 'arms')")
    return slider_scores(arms)


def slider_scores(arms: dict[str, Any]) -> dict[str, float]:
    """Each arm's overall score from a ratings report's ``arms``: the mean z-score when the design has one,
    else the mean raw score (only the order matters for Kendall's tau)."""
    out = {}
    for arm, row in arms.items():
        if not isinstance(row, dict):
            continue
        value = row.get("overall_z") if row.get("overall_z") is not None else row.get("overall_raw")
        if isinstance(value, int | float):
            out[str(arm)] = float(value)
    return out


def main(args: argparse.Namespace) -> int:
    from analysis import pairwise_writers
    from analysis.data import read_csv
    from analysis.pairwise import VoteColumns, pairwise_report

    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        raise RatingsError(f"--out {args.out}: give a file name in an existing folder")
    columns = VoteColumns(
        judge=args.judge,
        arm_a=args.arm_a,
        arm_b=args.arm_b,
        winner=args.winner,
        question=args.question,
        length=None if args.no_style else args.length,
        callbacks=None if args.no_style else args.callbacks,
        exclude=tuple(args.exclude),
        exclude_rows=tuple(args.exclude_rows),
    )
    sliders = slider_means(args.sliders) if args.sliders else None
    result: dict[str, Any] = pairwise_report(
        read_csv(args.votes), columns, replicates=args.bootstrap, seed=args.seed, sliders=sliders,
        primary_question=args.primary_question, qc_arm=args.qc_arm,
    )  # fmt: skip
    if args.format == "json":
        text = json.dumps(result, indent=1, allow_nan=False) + "\n"
    elif args.format == "md":
        text = pairwise_writers.to_markdown(result)
    elif args.format == "latex":
        text = pairwise_writers.to_latex(result)
    else:
        text = pairwise_writers.to_html(
            result,
            title=f"Pairwise judgements: {Path(args.votes).name}",
            plot=pairwise_writers.leaderboard_plot(result),
        )
    write_out(args.out, text)
    return 0
