"""The walls of ARCHITECTURE.md ("Walls"), read from the source: which part of `launcher` may import which.

Every import counts, at module level or inside a function (a lazy import still crosses the wall when it runs),
except those under `if TYPE_CHECKING:`. The check is transitive: `report` importing a `run` module that imports
`launcher.kube` breaks report's wall as surely as importing `launcher.kube` itself.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "launcher"

# part -> the parts (and outside libraries) it never reaches, directly or through another module
NEVER: dict[str, set[str]] = {
    "spec": {"kube", "render", "run", "metrics", "report", "doctor", "export", "entrypoint", "cli",
             "kubernetes", "jinja2"},
    "render": {"kube", "run", "metrics", "report", "doctor", "export", "entrypoint", "cli", "kubernetes"},
    "kube": {"render", "run", "metrics", "report", "doctor", "export", "entrypoint", "cli"},
    "metrics": {"spec", "kube", "render", "run", "report", "doctor", "export", "entrypoint", "cli", "kubernetes"},
    "run": {"render", "report", "doctor", "export", "entrypoint", "cli"},
    "report": {"kube", "render", "doctor", "export", "entrypoint", "cli", "kubernetes"},
    "export": {"kube", "render", "doctor", "entrypoint", "cli", "kubernetes"},
    "doctor": {"run", "report", "export", "entrypoint", "cli"},
    "entrypoint": {"kube", "render", "report", "doctor", "export", "cli", "kubernetes"},
}

MAX_MODULE_LINES = 600  # ARCHITECTURE.md ("Layout"): a longer module is split by what it holds


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in SRC.rglob("*.py")}


def imports_of(source: str) -> set[str]:
    """Every module an import statement names (and `from M import x` as both M and M.x), TYPE_CHECKING left out."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            assert node.level == 0, "relative import: the walls are read from absolute `launcher.` imports"
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)

    Visitor().visit(ast.parse(source))
    return found


@functools.cache
def direct(module: str) -> frozenset[str]:
    out = set()
    for name in imports_of(MODULES[module].read_text(encoding="utf-8")):
        if name.split(".")[0] != "launcher":
            out.add(name.split(".")[0])
        elif name in MODULES:
            out.add(name)
            # importing launcher.a.b runs launcher.a's __init__ too
            parent = name.rpartition(".")[0]
            while parent in MODULES and parent != "launcher":
                out.add(parent)
                parent = parent.rpartition(".")[0]
    return frozenset(out)


def reach(module: str) -> dict[str, list[str]]:
    """Everything `module` imports, directly or not, each with one import chain that gets there."""
    paths: dict[str, list[str]] = {module: [module]}
    todo = [module]
    while todo:
        m = todo.pop()
        for d in direct(m):
            if d not in paths:
                paths[d] = paths[m] + [d]
                if d in MODULES:
                    todo.append(d)
    return paths


def part(name: str) -> str:
    return name.split(".")[1] if name.startswith("launcher.") else name


def test_every_part_is_a_package_with_its_walls():
    parts = {part(m) for m in MODULES if m.count(".") >= 1}
    assert set(NEVER) <= parts, f"ARCHITECTURE.md's parts missing from src/launcher: {set(NEVER) - parts}"
    flat = sorted(m for m in MODULES if m.count(".") == 1 and (SRC / f"{part(m)}.py").exists())
    assert flat == ["launcher.__main__", "launcher.errors"], f"modules outside the parts' packages: {flat}"


@pytest.mark.parametrize("wall", sorted(NEVER))
def test_wall(wall):
    broken = []
    for module in sorted(m for m in MODULES if part(m) == wall):
        for target, chain in reach(module).items():
            if part(target) in NEVER[wall]:
                broken.append(" -> ".join(chain))
    assert not broken, f"{wall} reaches what it must never import:\n" + "\n".join(broken)


def test_the_reader_sees_lazy_imports_and_skips_type_checking():
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kubernetes\n"
           "def f():\n    from launcher.kube import client\n")
    assert "launcher.kube.client" in imports_of(src) and "kubernetes" not in imports_of(src)


def test_no_import_cycle_between_parts():
    edges: dict[str, set[str]] = {}
    for m in MODULES:
        for d in direct(m):
            if d in MODULES and part(d) != part(m) and part(m) in NEVER and part(d) in NEVER:
                edges.setdefault(part(m), set()).add(part(d))
    for a, targets in edges.items():
        for b in targets:
            assert a not in edges.get(b, set()), f"{a} and {b} import each other"


def test_no_module_is_over_the_line_limit():
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by what they hold): {long}"
