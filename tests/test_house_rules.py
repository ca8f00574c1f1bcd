"""The house rules that a reader of the code relies on, enforced (docs/architecture.md, "House rules"):

* no import circle anywhere in production code, imports inside functions included (an import under
  ``if TYPE_CHECKING:`` is not run, so it is not an edge);
* no production module over 800 lines (split by feature: shared/conventions.md);
* test modules share helpers through ``conftest.py``, never by importing another test module;
* no timed assertion: a test asserts what happened, never how long it took (a speed target lives in a
  benchmark, ``bench/``); an ``assert`` that compares a clock reading, or a name computed from one in
  the same function, fails the rule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "evalsite",
    "infra",
    "runtime",
    "studies",
    "chat",
    "pairwise",
    "annotation",
    "reports",
    "memory",
    "analysis",
)
MAX_LINES = 800


def production_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "tests" in parts or "migrations" in parts:
                continue
            yield path


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every module name an import statement of ``tree`` may load, at any depth (functions included)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            for alias in node.names:
                yield f"{base}.{alias.name}"
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in production_files()}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for imported in imported_names(tree, name, path.name == "__init__.py"):
            if imported in files and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_imports_inside_functions_and_skips_type_checking_ones() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import chat.replies\n"
        "def f():\n    from chat import turns\n    import chat.models as m\n"
    )
    names = set(imported_names(ast.parse(source), "chat.sessions", False))
    assert {"chat.turns", "chat.models"} <= names and "chat.replies" not in names
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_production_module_takes_part_in_an_import_circle() -> None:
    assert cycles(import_graph()) == []


def test_no_production_module_is_longer_than_800_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n for p in production_files() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by feature (shared/conventions.md): {long}"


def test_test_modules_share_helpers_through_conftest_not_by_importing_each_other() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("test_*.py")):
        if ".venv" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and ".test_" in f".{node.module}":
                offenders.append(f"{path.relative_to(ROOT)} imports {node.module}")
            elif isinstance(node, ast.Import):
                offenders += [
                    f"{path.relative_to(ROOT)} imports {a.name}" for a in node.names if ".test_" in f".{a.name}"
                ]
    assert offenders == []


CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}


def _reads_a_clock(node: ast.AST, timed: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else "time"
            if name in CLOCKS and owner in ("time", "loop"):
                return True
        elif isinstance(sub, ast.Name) and sub.id in timed:
            return True
    return False


def timed_assertions(tree: ast.AST) -> list[int]:
    """Lines of ``assert``s that compare a clock reading, directly or through a name assigned from one
    (``started = time.monotonic()`` ... ``assert time.monotonic() - started < 3``)."""
    lines = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        timed: set[str] = set()
        for _ in range(2):  # a name computed from a timed name is timed too
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and _reads_a_clock(node.value, timed):
                    timed |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(func):
            if isinstance(node, ast.Assert):
                compares = [c for c in ast.walk(node.test) if isinstance(c, ast.Compare)]
                if any(_reads_a_clock(c, timed) for c in compares):
                    lines.append(node.lineno)
    return sorted(set(lines))


def test_the_timed_assertion_rule_sees_a_clock_directly_and_through_names() -> None:
    source = """
def test_a():
    started = time.monotonic()
    elapsed = time.monotonic() - started
    assert elapsed < 3
def test_b():
    t0 = time.perf_counter()
    assert time.perf_counter() - t0 < 2.0
def test_c():
    started = time.monotonic()
    assert reply.complete and count == 2
"""
    assert timed_assertions(ast.parse(source)) == [5, 8]


def test_no_test_asserts_how_long_something_took() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("test_*.py")):
        if ".venv" in path.parts:
            continue
        offenders += [f"{path.relative_to(ROOT)}:{n}" for n in timed_assertions(ast.parse(path.read_text()))]
    assert offenders == [], "assert what happened; time it in bench/"
