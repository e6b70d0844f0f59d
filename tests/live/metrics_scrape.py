"""Reading ``/metrics`` back in tests: Prometheus' own parser, samples by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class Scrape:
    """One scrape, parsed with ``prometheus_client``'s parser."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: list[Sample] = [s for f in self.families.values() for s in f.samples]

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the one sample ``name`` with exactly ``labels``; ``None`` if absent."""
        found = [s.value for s in self.samples if s.name == name and s.labels == labels]
        assert len(found) <= 1, f"{name}{labels}: {found}"
        return found[0] if found else None

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples ``name`` whose labels include ``labels``."""
        return sum(s.value for s in self.samples if s.name == name
                   and all(s.labels.get(k) == v for k, v in labels.items()))

    def series(self, name: str) -> list[dict[str, str]]:
        return [s.labels for s in self.samples if s.name == name]

    @property
    def names(self) -> set[str]:
        """Every sample name (``_total``, ``_bucket`` ... included)."""
        return {s.name for s in self.samples}
