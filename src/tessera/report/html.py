"""One self-contained HTML report: the run's settings, the comparison tables with what every
column means, how to read ρ, the notes, and every plot with its caption, images inlined."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from tessera.report.energy import energy_html
from tessera.report.estimate_error import CAPTION as ESTIMATE_ERROR_CAPTION
from tessera.report.policies import (
    ORACLE_MARK,
    best_without_oracle,
    oracle_note,
    policy_info,
    policy_infos,
)
from tessera.report.rho import SHORT_JOB_S, rho_by_length
from tessera.report.settings import Setting, decides_in_rounds
from tessera.report.tables import (
    BEST_MARK,
    RATIO_HEADER,
    WAIT_COLUMNS,
    Column,
    best_avg_jct,
    comparison_columns,
    comparison_marks,
    fmt,
    human_duration,
    jct_ratio,
)
from tessera.sim.metrics import PENDING_NOT_RECORDED, SimResult

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{padding:4px 10px;border-bottom:1px solid #ddd}
td{text-align:right}td:first-child{text-align:left}th{background:#f3f3f3}
table.settings td{text-align:left}dl{font-size:90%}dt{font-weight:bold;float:left;
margin-right:.5em}dd{margin:0 0 .3em 0}
.best{font-weight:bold;color:#0a6}img{max-width:100%;margin:1em 0 0}code{background:#f3f3f3}
figcaption{font-size:90%;color:#555}
"""

#: What each plot shows, by the stem of its file (plots not listed get no caption).
CAPTIONS: dict[str, str] = {
    "jct_cdf": "Share of jobs finished within a given time of their submission (log scale), "
               "jobs that succeeded.",
    "utilization_queue": "Share of GPUs held by jobs, and jobs waiting, every sample period; "
                         "the time axis ends when the last job ends in any policy.",
    "cluster_power": "Cluster power (kW) over time: busy GPUs at their job's average power, "
                     "idle GPUs at idle power (docs/energy.md).",
    "ftf_rho": "Distribution of finish-time fairness ρ (log scale); left of the dashed line "
               "(ρ ≤ 1) a job finished no later than alone on its fastest flavor.",
    "estimate_error": ESTIMATE_ERROR_CAPTION,
}


def _e(text: object) -> str:
    return html.escape(str(text))


def _legend(columns: Sequence[Column], marks: Sequence[tuple[str, str]] = ()) -> str:
    items = [(c.header, c.meaning) for c in columns] + list(marks)
    return "<dl>" + "".join(f"<dt>{_e(h)}</dt><dd>{_e(m)}</dd>" for h, m in items) + "</dl>"


def _comparison(results: Sequence[SimResult]) -> str:
    best = best_avg_jct(results)
    columns = comparison_columns(results)
    head = "".join(f"<th>{_e(c.header)}</th>" for c in columns)
    rows = []
    for r in results:
        d = r.as_dict()
        ratio = jct_ratio(r, best)
        is_best = ratio == 1.0
        name = policy_info(r.policy).marked + (f" {BEST_MARK}" if is_best else "")
        cells = "".join(f"<td>{_e(fmt(d[c.key], c.kind))}</td>" for c in columns)
        rows.append(f"<tr{' class=best' if is_best else ''}><td>{_e(name)}</td>{cells}"
                    f"<td>{ratio:.2f}×</td></tr>")
    note = oracle_note(results)
    return (f"<h2>Comparison</h2><table><tr><th>policy</th>{head}<th>{_e(RATIO_HEADER)}</th>"
            f"</tr>{''.join(rows)}</table>" + (f"<p>{_e(note)}</p>" if note else "")
            + _legend(columns, comparison_marks(results)))


def _policies(results: Sequence[SimResult]) -> str:
    items = "".join(f"<li>{_e(i.line())}</li>" for i in policy_infos([r.policy for r in results]))
    return f"<h2>Policies compared</h2><ul>{items}</ul>"


def what_this_shows(results: Sequence[SimResult]) -> str:
    """The report's opening paragraph: what was compared, how to read the winner, and which
    winner a real scheduler could have."""
    if not results:
        return "No policy was run."
    r0 = results[0]
    text = (f"{len(results)} scheduling policies each ran the same {r0.summary.jobs:,} jobs of "
            f"{r0.workload} on the same cluster ({r0.cluster}) in the simulator. The comparison "
            "shows how long jobs took from submission to finish (JCT), how long they waited "
            "and why, how busy the GPUs were, and how fair the outcome was (ρ); lower JCT and "
            f"ρ are better, and {BEST_MARK} marks the lowest average JCT.")
    oracles = [r.policy for r in results if policy_info(r.policy).oracle]
    if oracles:
        honest = best_without_oracle(results)
        text += (f" {ORACLE_MARK} marks an oracle ({', '.join(oracles)}): it reads true job "
                 "durations from the trace, which no real scheduler knows, so it shows how far "
                 "perfect knowledge could go, not what to expect.")
        if honest is not None:
            text += (f" Among the policies a real scheduler can run, {honest.policy} has the "
                     f"lowest average JCT ({human_duration(honest.summary.avg_jct_s)}).")
    return text


def _waits(results: Sequence[SimResult]) -> str:
    head = "".join(f"<th>{_e(c.header)}</th>" for c in WAIT_COLUMNS)
    rows = "".join(
        f"<tr><td>{_e(policy_info(r.policy).marked)}</td>"
        + "".join(f"<td>{_e(fmt(r.as_dict()[c.key], c.kind))}</td>" for c in WAIT_COLUMNS)
        + "</tr>"
        for r in results
    )
    jobs = results[0].summary.jobs if results else 0
    gavel = (f" –: {_e(PENDING_NOT_RECORDED)}."
             if any(not r.pending_recorded for r in results) else "")
    return (
        "<h2>Time pending, by reason</h2><p><b>start wait</b> counts only the wait before a "
        "job's first run; <b>pending</b> counts every spell, also after preemptions and "
        "failures, so a preemptive policy can start every job at once (start wait 0) and still "
        f"keep jobs pending for hours. Means over all {jobs:,} jobs; the four reasons add up to "
        f"<b>pending</b>.{gavel}</p>"
        f"<table><tr><th>policy</th>{head}</tr>{rows}</table>{_legend(WAIT_COLUMNS)}"
    )


def _rho(results: Sequence[SimResult]) -> str:
    splits = rho_by_length(results)
    rows = "".join(
        f"<tr><td>{_e(s.policy)}</td><td>{fmt(s.p95_all, 'num')}</td>"
        f"<td>{fmt(s.p95_short, 'num')}</td><td>{fmt(s.p95_long, 'num')}</td></tr>"
        for s in splits
    )
    short = human_duration(SHORT_JOB_S)
    counts = (f" ({splits[0].short_jobs:,} of {splits[0].jobs:,} jobs here are short)"
              if splits else "")
    rounds = [r.policy for r in results if decides_in_rounds(r.config, r.policy)]
    cadence = (" Policies that decide in rounds (here: "
               f"{', '.join(rounds)}, every {results[0].config.scheduler.round_s:g} s) make "
               "a new job wait for the next round, which for a job of a few minutes is most of "
               "its ρ." if rounds else "")
    ftf = (" <code>finish_time_fairness</code> does not minimise this ρ: at each "
           "reallocation it minimises the worst ρ of the jobs present, measured against an "
           "equal time share of every flavor among them (Gavel, Themis), blind to the wait "
           "before the next round. Compare it on the longer jobs."
           if any(r.policy.startswith("finish_time_fairness") for r in results) else "")
    return (
        "<h2>Reading ρ</h2><p>Finish-time fairness ρ = JCT ÷ the job's <i>ideal time</i>: "
        "how long it runs alone on its fastest flavor, or on a 1/N share of the cluster when "
        "that share (N = average number of active jobs during its life) is smaller than its "
        "gang. ρ = 1: as fast as alone; ρ = 3: three times as long. Every second of waiting "
        f"counts, so a short job that waits at all gets a large ρ{counts}.{cadence}{ftf}</p>"
        f"<table><tr><th>policy</th><th>ρ p95, all jobs</th><th>ρ p95, jobs under {short} alone"
        f"</th><th>ρ p95, jobs of {short} or more</th></tr>{rows}</table>"
    )


def _settings(settings: Sequence[Setting]) -> str:
    if not settings:
        return ""
    rows = "".join(f"<tr><td>{_e(s.name)}</td><td>{_e(s.value)}</td></tr>" for s in settings)
    return f"<h2>Settings</h2><table class=settings>{rows}</table>"


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    caption = CAPTIONS.get(path.stem)
    return (f'<figure><img alt="{_e(path.stem)}" src="data:image/png;base64,{data}">'
            + (f"<figcaption>{_e(caption)}</figcaption>" if caption else "") + "</figure>")


def write_html_report(
    results: Sequence[SimResult], images: Sequence[Path], path: Path, title: str,
    context: Sequence[str] = (), settings: Sequence[Setting] = (),
) -> Path:
    """Write the report to ``path`` and return it: what the comparison shows (oracles named),
    ``settings`` (what the run used, see :func:`tessera.report.settings.run_settings`), then
    the tables, one line per policy with their legends, how to
    read ρ, the runs' notes and the ``images``; ``context`` lines go under the title."""
    ctx = "".join(f"<li>{_e(c)}</li>" for c in context)
    notes = "".join(f"<li>{_e(r.policy)}: {_e(n)}</li>" for r in results for n in r.notes)
    body = (
        f"<h2>What this shows</h2><p>{_e(what_this_shows(results))}</p>"
        + (f"<ul>{ctx}</ul>" if ctx else "") + _settings(settings) + _comparison(results)
        + _policies(results)
        + _waits(results) + energy_html(results) + _rho(results)
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
        + "".join(_figure(p) for p in images)
    )
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1>{body}</body></html>"
    )
    return path
