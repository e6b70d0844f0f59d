"""An import inside a function (outside ``cli/``) says why it is not at module level.

An in-function import hides a module's dependencies from its reader and from
``tests/test_layers.py``'s picture of the import graph at a glance; it is worth it only when
importing at module level would cost something measured (torch, Ray, FastAPI, cvxpy,
matplotlib, the planner at every ``tessera`` start: ``python -X importtime``) or pull a layer
the module must not load. So each one carries a comment with ``lazy`` and the reason, on its
line or in its block of consecutive import and comment lines.

``cli/`` is exempt: its commands import their areas lazily by design, so ``tessera --help``
stays fast (``tessera/cli/__init__.py``). Nothing else is: the Ray executor's package imports
Ray (the optional ``live`` extra) only when a Ray executor is built, and says so at each import.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "tessera"
EXEMPT_PREFIXES = ("cli/",)


def _function_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, True)
            elif isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                found.append(child)
            else:
                visit(child, in_function)

    visit(tree, False)
    return found


def _block(lines: list[str], index: int) -> list[str]:
    """The run of consecutive import/comment lines around ``lines[index]``."""
    def part(line: str) -> bool:
        text = line.strip()
        return text.startswith(("import ", "from ", "#"))

    lo = hi = index
    while lo > 0 and part(lines[lo - 1]):
        lo -= 1
    while hi + 1 < len(lines) and part(lines[hi + 1]):
        hi += 1
    return lines[lo:hi + 1]


def unexplained() -> list[str]:
    """``path:line`` of every in-function import (outside the exempt files) with no reason."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith(EXEMPT_PREFIXES):
            continue
        text = path.read_text()
        lines = text.splitlines()
        for node in _function_imports(ast.parse(text)):
            if not any("lazy" in line for line in _block(lines, node.lineno - 1)):
                out.append(f"{rel}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return out


def test_every_in_function_import_says_why_it_is_lazy() -> None:
    missing = unexplained()
    assert not missing, "in-function imports without a `lazy: reason` comment " \
        "(move them to module level, or say what importing there would cost):\n" + \
        "\n".join(missing)
