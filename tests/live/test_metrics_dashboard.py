"""The example Grafana dashboard (``examples/grafana/tessera-dashboard.json``) queries only
metrics the service exports, and shows what the issue asks for."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.live.metrics import ServiceMetrics
from tessera.live.service import LiveService

DASHBOARD = Path(__file__).parents[2] / "examples" / "grafana" / "tessera-dashboard.json"
#: PromQL's words the dashboard may use besides metric names.
PROMQL = {"sum", "by", "without", "rate", "increase", "histogram_quantile", "max", "min",
          "avg", "count", "topk", "clamp_min", "label_values"}
#: The sample names each metric type exports (a counter ``x`` is scraped as ``x_total``).
SUFFIXES = {"counter": ("_total",), "gauge": ("",),
            "histogram": ("_bucket", "_count", "_sum")}


def _exported(svc: LiveService) -> set[str]:
    """Every sample name the service's metrics can export, whether or not it has values."""
    names: set[str] = set()
    for family in ServiceMetrics(svc).registry.collect():
        names.update(family.name + s for s in SUFFIXES[family.type])
    return names


def _queries(node: Any) -> Iterator[str]:
    """Every ``expr`` in the dashboard, and the template variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _queries(item)


def _names_in(expr: str) -> set[str]:
    """The identifiers of a PromQL expression outside label matchers, groupings, ranges and
    strings: functions, keywords and metric names."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(by|without)\s*\([^)]*\)", "", bare)
    bare = re.sub(r"label_values\(([^,)]+),[^)]*\)", r"label_values(\1)", bare)  # its label
    return set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare)) - {"e"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def test_every_query_names_only_exported_metrics(service: LiveService,
                                                 dashboard: dict[str, Any]) -> None:
    exported = _exported(service)
    queries = list(_queries(dashboard))
    assert len(queries) >= 10
    for expr in queries:
        names = _names_in(expr)
        metrics = names - PROMQL
        assert metrics, f"no metric in {expr!r}"
        assert metrics <= exported, f"{expr!r} names {sorted(metrics - exported)}, not exported"


def test_the_dashboard_has_the_panels_asked_for(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels}
    assert "by (reason) (tessera_jobs_pending" in exprs["Pending jobs by reason"]
    quota = exprs["Quota vs used GPUs per queue and flavor"]
    assert "tessera_queue_used_gpus" in quota and "tessera_queue_nominal_gpus" in quota
    latency = exprs["Decision latency p50 / p99"]
    assert "histogram_quantile(0.5," in latency and "histogram_quantile(0.99," in latency
    assert "tessera_preemptions_total" in exprs["Preemptions by reason"]
    for p in panels:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"], p["title"]
        assert set(p["gridPos"]) == {"x", "y", "w", "h"}


def test_the_check_catches_a_metric_that_is_not_exported(service: LiveService) -> None:
    assert _names_in('sum by (queue) (tessera_jobs_waiting{queue=~"$queue"})') - PROMQL == {
        "tessera_jobs_waiting"}
    assert "tessera_jobs_waiting" not in _exported(service)
    assert "tessera_preemptions_total" in _exported(service)
