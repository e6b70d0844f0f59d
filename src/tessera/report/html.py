"""One self-contained HTML report: the comparison table and every plot, images inlined."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path

from tessera.report.tables import _COLUMNS, WAIT_COLUMNS, _fmt
from tessera.sim.metrics import SimResult

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{padding:4px 10px;border-bottom:1px solid #ddd}
td{text-align:right}td:first-child{text-align:left}th{background:#f3f3f3}
.best{font-weight:bold;color:#0a6}img{max-width:100%;margin:1em 0}code{background:#f3f3f3}
"""


def write_html_report(
    results: Sequence[SimResult], images: Sequence[Path], path: Path, title: str,
    context: Sequence[str] = (),
) -> Path:
    """Write the report to ``path`` and return it."""
    best = min((r.summary.avg_jct_s for r in results if math.isfinite(r.summary.avg_jct_s)),
               default=math.nan)
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _k, _f in _COLUMNS)
    rows = []
    for r in results:
        d = r.as_dict()
        cls = ' class="best"' if r.summary.avg_jct_s == best else ""
        cells = "".join(f"<td>{html.escape(_fmt(d[k], f))}</td>" for _h, k, f in _COLUMNS)
        rows.append(f"<tr{cls}><td>{html.escape(r.policy)}</td>{cells}</tr>")
    whead = "".join(f"<th>{html.escape(h)}</th>" for h, _k, _f in WAIT_COLUMNS)
    wrows = "".join(
        f"<tr><td>{html.escape(r.policy)}</td>"
        + "".join(f"<td>{html.escape(_fmt(r.as_dict()[k], f))}</td>" for _h, k, f in WAIT_COLUMNS)
        + "</tr>"
        for r in results
    )
    waits = (
        "<h2>Queueing delay by reason</h2><p>Mean per job and total job-hours waiting: "
        "<b>quota</b> (fair-share delay: the tenant queue is at its quota), <b>capacity</b> "
        "(others hold the GPUs), <b>fragmentation</b> (enough GPUs are free, but not with the "
        "locality the gang needs).</p>"
        f"<table><tr><th>policy</th>{whead}</tr>{wrows}</table>"
    )
    imgs = "".join(
        f'<img alt="{html.escape(p.stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}">'
        for p in images
    )
    ctx = "".join(f"<li>{html.escape(c)}</li>" for c in context)
    notes = "".join(f"<li>{html.escape(r.policy)}: {html.escape(n)}</li>"
                    for r in results for n in r.notes)
    if notes:
        waits += f"<h2>Notes</h2><ul>{notes}</ul>"
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1><ul>{ctx}</ul>"
        f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>{waits}{imgs}</body></html>"
    )
    return path
