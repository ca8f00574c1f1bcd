"""The repository stands alone (issue 20, item 17): no code, test or bench reads a path of one machine.

A clone anywhere must pass, so nothing may name a folder of the machine it was written on (``/work/...``,
``/home/...``) or reach out of the repository to the team's ``shared/`` folder beside it: every file a test
reads is in the repository, with its licence (``tests/data/``, ``memory/data/``). System locations that every
machine of the project has (``/usr/bin/chromium``, ``/usr/lib/postgresql``, ``/tmp`` for ``mktemp``, the paths
inside the Docker image) are not data and are allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".html", ".js", ".css", ".json"}
CODE_NAMES = {"Makefile", "Dockerfile", "conftest.py"}
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", "artifacts", "staticfiles"}

# a home or workspace folder of one machine, as a path (not a URL path such as "/studies/")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|root|Users|mnt)/[\w.-]")
# the team's shared/ folder beside the repository, reached by a relative path or by joined path parts
OUTSIDE_REPOSITORY = re.compile(r"""(?:\.\./)+shared/|["']shared["']\s*/\s*["']data["']""")


def offending_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line naming a machine's folder or the shared/ folder outside the repository."""
    return [
        (i, line.strip())
        for i, line in enumerate(text.splitlines(), 1)
        if MACHINE_PATH.search(line) or OUTSIDE_REPOSITORY.search(line)
    ]


def code_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        if any(part in SKIP_DIRS for part in path.relative_to(ROOT).parts):
            continue
        if path.is_file() and (path.suffix in CODE_SUFFIXES or path.name in CODE_NAMES):
            files.append(path)
    return sorted(files)


def test_the_detector_finds_the_paths_it_is_for_and_leaves_system_and_url_paths_alone() -> None:
    root = "/"  # the examples are assembled, so that this file holds no absolute path of its own
    bad = [
        f'JI = Path("{root}work/shared/data/ji2022-dialogue-eval/ratings_free_run1.csv")',
        f'    GVD = Path("{root}work/shared/data/memorybank-gvd/memory_bank_en.json")',
        f"default=str(DEFAULT if DEFAULT.exists() else '{root}home/alice/data/x.json')",
        'GVD = Path(__file__).resolve().parents[3] / "shared" / "data" / "memorybank-gvd"',
        "python bench/x.py --gvd ../shared/data/memorybank-gvd/memory_bank_en.json",
        f"open('{root}Users/bob/ratings.csv')",
    ]
    good = [
        'chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)',
        'PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n1)")',
        'client.get("/studies/test-study/analysis/")',
        "TMP=$(mktemp -d /tmp/memeval-services.XXXXXX)",
        "derived from shared/data/ji2022-dialogue-eval (provenance, not a read)",
        'DATA = Path(__file__).resolve().parent / "tests" / "data"',
        "url = 'https://example.org/home/page'",
    ]
    assert [n for n, _ in offending_lines("\n".join(bad))] == list(range(1, len(bad) + 1))
    assert offending_lines("\n".join(good)) == []


def test_no_code_test_or_bench_reads_a_path_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line}"
        for path in code_files()
        if path != here
        for n, line in offending_lines(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == [], (
        "paths of one machine, or of the shared/ folder beside the repository (use the repository's own copy: "
        "the root conftest's ji_run1_csv, memory/data/gvd, ...):\n" + "\n".join(found)
    )


def test_the_shared_test_data_is_in_the_repository_with_its_licence(ji_run1_csv: Path) -> None:
    assert ji_run1_csv.is_file() and ji_run1_csv.is_relative_to(ROOT)
    folder = ji_run1_csv.parent
    assert "MIT License" in (folder / "LICENSE.Dialogue-Eval").read_text()
    readme = (folder / "README.md").read_text()
    assert "github.com/TianboJi/Dialogue-Eval" in readme and "33af02448092ad180c1c4c68e454324e170f56a6" in readme
    assert ji_run1_csv.read_text().count("\n") == 1825  # header + 1,824 rated conversations
