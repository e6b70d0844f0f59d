"""A self-contained HTML report: tables as HTML, figures embedded as base64 PNG.

The file has no external references (no CSS or script URLs, no image links), so it can be
mailed or attached to an issue as is. Tables reuse :func:`.terminal.tables` by exporting each
rich table to plain rows, so terminal and HTML never disagree on what is shown; the
"published vs measured" section is written out in full, one row per figure, with the reason for
every figure the stored data cannot reproduce.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from tessera.analyze.published import Outcome
from tessera.analyze.terminal import fmt, tables

if TYPE_CHECKING:
    from rich.table import Table

    from tessera.analyze.report import Analysis

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
.reproduced { color: #1a7f37; } .differs { color: #9a6700; } .not-reproducible { color: #777; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #555; font-size: 0.9em; }
"""


def _cell_text(cell: object) -> str:
    plain = getattr(cell, "plain", None)
    return str(plain) if plain is not None else str(cell)


def _rich_table_html(table: Table) -> str:
    """Render a rich table's header and cells as an HTML table (markup stripped)."""
    head = "".join(f"<th>{html.escape(str(c.header))}</th>" for c in table.columns)
    columns = [[Text.from_markup(str(v)).plain for v in c.cells] for c in table.columns]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(col[i])}</td>" for col in columns) + "</tr>"
        for i in range(table.row_count)
    )
    title = html.escape(_cell_text(table.title or ""))
    return f"<table><caption>{title}</caption><tr>{head}</tr>{rows}</table>"


def _comparison_html(a: Analysis) -> str:
    if not a.comparisons:
        return "<p>No published figures are recorded for this trace format.</p>"
    counts = a.outcome_counts()
    rows = []
    for c in a.comparisons:
        f = c.figure
        css = c.outcome.value.replace(" ", "-")
        rows.append(
            "<tr>"
            f"<td>{html.escape(f.quantity)}</td>"
            f"<td>{html.escape(fmt(f.value))} {html.escape(f.unit)}</td>"
            f"<td>{html.escape(fmt(c.measured))}</td>"
            f"<td class='{css}'>{html.escape(c.describe())}</td>"
            f"<td>{f.evidence.value}</td><td>{html.escape(f.source)}</td>"
            "</tr>"
        )
    summary = ", ".join(f"{n} {o.value}" for o in Outcome if (n := counts[o.value]))
    return (
        f"<p>{summary}. Evidence: V = verified quote or authors' artifact; T = transcribed by "
        "third parties; C = computed from the stored files by their curator.</p>"
        "<table><tr><th>figure</th><th>published</th><th>measured</th><th>verdict</th>"
        f"<th>evidence</th><th>source</th></tr>{''.join(rows)}</table>"
    )


def render_html(a: Analysis, images: Sequence[Path]) -> str:
    """The full report as one HTML string, with ``images`` embedded inline."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>tessera analyze: {html.escape(a.trace_name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Trace analysis: {html.escape(a.trace_name)}</h1>",
        f"<p>Format <code>{html.escape(a.trace_format)}</code>; files: ",
        ", ".join(f"<code>{html.escape(p)}</code>" for p in a.paths),
        f". Analysed in {a.analysis_s:.2f} s.</p>",
        *(f"<p class='note'>Note: {html.escape(n)}</p>" for n in a.notes),
        "<h2>Published vs measured</h2>",
        _comparison_html(a),
        "<h2>Statistics</h2>",
        *(
            _rich_table_html(t)
            for t in tables(a)
            if not str(t.title).startswith("published vs measured")
        ),
    ]
    if images:
        parts.append("<h2>Figures</h2>")
        for path in images:
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            parts.append(
                f"<figure><img alt='{html.escape(path.stem)}' "
                f"src='data:image/png;base64,{data}'><figcaption>{html.escape(path.stem)}"
                "</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(a: Analysis, images: Sequence[Path], path: Path) -> Path:
    """Write :func:`render_html` to ``path`` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(a, images), encoding="utf-8")
    return path
