"""``manage.py export_study SLUG --what ratings|transcripts|memory|llm-calls|personas|probes --format csv|jsonl [--out PATH]``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reports.exports import FORMATS, WHAT, export_lines
from studies.models import Study


class Command(BaseCommand):
    help = (
        "Export a study's ratings, transcripts, memory snapshots or LLM calls as CSV or JSONL, "
        "starting with a README header (design, arms, pilot mark, export time, columns)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="the study's slug (see the study page's address)")
        parser.add_argument("--what", required=True, choices=WHAT)
        parser.add_argument("--format", default="csv", choices=list(FORMATS))
        parser.add_argument("--out", default="", help="file to write (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            study = Study.objects.get(slug=options["slug"])
        except Study.DoesNotExist:
            known = ", ".join(Study.objects.order_by("slug").values_list("slug", flat=True)) or "none"
            raise CommandError(f"no study with the slug {options['slug']!r} (known: {known})") from None
        lines = export_lines(study, options["what"], options["format"])
        if not options["out"]:
            for line in lines:
                self.stdout.write(line, ending="")
            return
        out = Path(options["out"])
        if not out.parent.is_dir():
            raise CommandError(f"cannot write {out}: the folder {out.parent} does not exist")
        if out.is_dir():
            raise CommandError(f"cannot write {out}: it is a directory; give a file name")
        if out.exists() and not out.is_file():
            # the .part file is renamed over the name: a device or pipe there would be replaced, not written to
            raise CommandError(f"cannot write {out}: it is not a regular file (use no --out for standard output)")
        partial = out.with_name(out.name + ".part")  # a failed export never leaves a half file under the name
        try:
            with partial.open("w", encoding="utf-8", newline="") as f:
                for line in lines:
                    f.write(line)
            partial.replace(out)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        print(f"wrote {out}", file=sys.stderr)
