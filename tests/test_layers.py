"""Imports point down only: every ``tessera`` module imports its own package or lower layers.

The layers, lowest first (DESIGN.md, "Layers (imports point down only)", plus where the
packages it does not name sit):

====  ==========================================  ============================================
rank  packages                                    why here
====  ==========================================  ============================================
0     ``tessera`` (root ``__init__``), ``errors``,  foundations: the version, the exception
      ``registry``, ``data``, ``web``                types, the plugin registry; ``data`` and
                                                  ``web`` hold bundled files, no logic
1     ``model``                                   typed domain objects
2     ``perf``                                    every number about speed, memory, comm
3     ``workload``                                trace readers/generators (ask ``perf``)
4     ``sched``, ``plan``, ``share``              decisions: pure functions of a snapshot
5     ``sim``, ``live``, ``train``                drivers: clocks, event loops, executors
                                                  (``train`` runs processes, like ``live``)
6     ``report``, ``analyze``, ``lessons``        what a driver's results become: tables and
                                                  plots (``report`` formats ``sim`` results),
                                                  trace analysis, studies that run ``sim``
7     ``cli``, ``__main__`` (``python -m        the command line assembles everything
      tessera``)
====  ==========================================  ============================================

A module may import its own package, any package of a lower rank, and another package of the
same rank, as long as packages of one rank do not import each other in a cycle (``sched``
uses ``plan`` for data-parallel splits, so ``plan`` may not use ``sched``). Every import
counts: module level, inside functions (lazy imports), and under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "tessera"

LAYERS: dict[str, int] = {
    "": 0, "errors": 0, "registry": 0, "data": 0, "web": 0, "progress_report": 0,
    "model": 1,
    "perf": 2,
    "workload": 3,
    "sched": 4, "plan": 4, "share": 4,
    "sim": 5, "live": 5, "train": 5,
    "report": 6, "analyze": 6, "lessons": 6,
    "cli": 7, "__main__": 7,
}


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def _package(dotted: str) -> str:
    """``tessera.sched.core.decide`` -> ``sched``; ``tessera`` -> ``""``."""
    parts = dotted.split(".")
    assert parts[0] == "tessera", dotted
    return parts[1] if len(parts) > 1 else ""


def _module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, dotted module)`` of every ``tessera`` import in ``path``, wherever it is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    here = _module_name(path)
    package = here if is_pkg else here[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            out.append((node.lineno, name))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in out if name.split(".")[0] == "tessera"]


@functools.cache
def _edges() -> tuple[tuple[str, str, str], ...]:
    """``(importing package, imported package, "file:line module")`` across packages."""
    edges = []
    for path in _modules():
        src = _package(".".join(_module_name(path)))
        for line, name in _imports(path):
            dst = _package(name)
            if dst != src:
                edges.append((src, dst, f"{path.relative_to(SRC)}:{line} imports {name}"))
    return tuple(edges)


def test_every_package_has_a_layer() -> None:
    found = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    found |= {p.stem for p in PKG.glob("*.py") if p.name != "__init__.py"}
    missing = sorted(found - LAYERS.keys())
    assert not missing, f"give these packages a layer in LAYERS (and the docstring): {missing}"


def test_imports_point_down() -> None:
    bad = [f"{where} ({src}={LAYERS[src]} -> {dst}={LAYERS[dst]})"
           for src, dst, where in _edges() if LAYERS[dst] > LAYERS[src]]
    assert not bad, "imports of a higher layer:\n" + "\n".join(bad)


def test_no_cycles_between_packages_of_one_layer() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for src, dst, at in _edges():
        if LAYERS[dst] == LAYERS[src]:
            graph[src].add(dst)
            where.setdefault((src, dst), at)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = [f"{where[(a, b)]} while {b} reaches {a}"
              for a in sorted(graph) for b in sorted(graph[a]) if reaches(b, a, {b})]
    assert not cycles, "same-layer packages import each other:\n" + "\n".join(cycles)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from tessera.sim import engine\n", ["tessera.sim"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tessera.cli.live\n",
         ["tessera.cli.live"]),
        ("def f():\n    from ..sim.metrics import SimResult\n", ["tessera.sim.metrics"]),
        ("from . import mig\n", ["tessera.share"]),
        ("import importlib\nimportlib.import_module('tessera.cli')\n", ["tessera.cli"]),
        ("import numpy\nfrom os import path\n", []),
    ],
    ids=["absolute", "type-checking", "relative-in-function", "relative-sibling", "importlib",
         "third-party"],
)
def test_the_scanner_sees_every_kind_of_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: list[str]
) -> None:
    """The checker itself: imports in every position are found (a file in ``share``)."""
    fake_src = tmp_path / "src"
    module = fake_src / "tessera" / "share" / "probe.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "SRC", fake_src)
    assert [name for _, name in _imports(module)] == expected


# --- Circles between files -------------------------------------------------------------------
#
# Within a package, imports may go any way the package likes -- except round: a circle of files
# (a imports b, b imports ... a) means none of them can be read, tested or loaded alone, and it
# is usually closed by an import inside a function that hides it. Every import counts here too
# (module level, in functions, under ``if TYPE_CHECKING:``): a circle is a strongly connected
# component of more than one file in the graph of ``tessera`` modules. There are none: a new one
# fails the test -- move the shared piece down into a module both sides import instead.


def _module_edges(src: Path) -> dict[str, set[str]]:
    """Module -> the ``tessera`` modules it imports (``from pkg import mod`` counts as ``mod``)."""
    paths = {".".join(_module_name(p)): p for p in sorted((src / "tessera").rglob("*.py"))}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in paths}
    for mod, path in paths.items():
        names = [name for _, name in _imports(path)]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):  # ``from pkg import mod``: the module itself
                base = _imports_from_base(path, node)
                names += [f"{base}.{a.name}" for a in node.names]
        for name in names:
            target = resolve(name)
            if target is not None and target != mod:
                edges[mod].add(target)
    return edges


def _imports_from_base(path: Path, node: ast.ImportFrom) -> str:
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here[:-1]
    if not node.level:
        return node.module or ""
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _circles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_circles_between_files() -> None:
    circles = sorted(sorted(c) for c in _circles(_module_edges(SRC)))
    assert not circles, ("import circles between files (move the shared piece into a module "
                         "both import; no imports inside functions):\n"
                         + "\n".join(map(str, circles)))


def test_the_circle_finder_sees_a_circle_closed_inside_a_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker itself: a circle closed by a lazy import, through ``from pkg import mod``."""
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    pkg = tmp_path / "tessera" / "plan"
    pkg.mkdir(parents=True)
    (tmp_path / "tessera" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from tessera.plan import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    import tessera.plan.a\n")
    (pkg / "d.py").write_text("import tessera.plan.a\n")
    assert _circles(_module_edges(tmp_path)) == {
        frozenset({"tessera.plan.a", "tessera.plan.b", "tessera.plan.c"})}
