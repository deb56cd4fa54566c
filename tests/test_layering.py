"""The package's imports flow one way (DESIGN.md: cli -> orchestrators -> rules/passes/executor
-> model), with no loop, read from the source with `ast`: every import counts, including those
inside functions and under TYPE_CHECKING, because a loop in types is still a loop to a reader."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpulint"

# Floors, lowest first. A module may import its own floor or lower ones, never a higher one.
FLOORS: list[tuple[str, ...]] = [
    ("gpulint.text", "gpulint.atomic", "gpulint.cache", "gpulint.fanout", "gpulint.model"),
    ("gpulint.compare", "gpulint.reference", "gpulint.passes", "gpulint.rules", "gpulint.executor"),
    # orchestrators: they compose the libraries below for one command each; the settings they
    # share, and the renderers of their results
    (
        "gpulint.settings",
        "gpulint.check",
        "gpulint.fix",
        "gpulint.partitioned",
        "gpulint.engines",
        "gpulint.verify",
        "gpulint.bench",
        "gpulint.matrix",
        "gpulint.sample",
        "gpulint.output",
        "gpulint.summary",
        "gpulint.report",
    ),
    ("gpulint.cli", "gpulint.__main__", "gpulint.explorer"),  # entry points (Model Explorer loads explorer)
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """The gpulint modules `path` imports (a `from X import y` counts y when it is a module)."""
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != me}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def floor(module: str) -> int:
    for i, prefixes in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is on no floor: add it to FLOORS in {__file__}")


def test_every_module_has_a_floor() -> None:
    for module in graph():
        if module != "gpulint":
            floor(module)


def test_no_import_climbs_a_floor() -> None:
    climbs = [
        f"{m} (floor {floor(m)}) imports {d} (floor {floor(d)})"
        for m, deps in graph().items()
        if m != "gpulint"
        for d in deps
        if d != "gpulint" and floor(d) > floor(m)
    ]
    assert not climbs, "\n".join(climbs)


def test_nothing_imports_the_cli() -> None:
    users = [m for m, deps in graph().items() if any(floor(d) == 3 for d in deps if d != "gpulint") and floor(m) < 3]
    assert not users


def test_no_import_loop() -> None:
    g = graph()
    loops: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(g.get(m, ())):
            # a package's __init__ re-exporting its own modules is not a loop a reader follows
            if d == m.rpartition(".")[0] and m.startswith(d + "."):
                continue
            if state.get(d) == 1:
                loops.append([*path[path.index(d) :], d] if d in path else [m, d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not loops, "\n".join(" -> ".join(loop) for loop in loops)


def test_the_layering_test_sees_imports() -> None:
    """Guard against a test that passes because it reads nothing."""
    g = graph()
    assert "gpulint.model.ir" in g["gpulint.check"] or any(d.startswith("gpulint.rules") for d in g["gpulint.check"])
    assert len(g) > 30
