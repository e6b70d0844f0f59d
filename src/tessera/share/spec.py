"""The services file: YAML validated at the edge, then turned into frozen domain objects.

Example::

    gpu: A100-80GB                 # optional; the CLI's --gpu wins
    batching:                      # optional
      latency_fraction: 0.5        # a batch must run within this share of the SLO
      max_procs: 3                 # MPS processes per MIG instance
      max_utilization: 0.9         # capacity headroom for bursts
    services:
      - name: search-ranker
        model: resnet50            # a model of the profile table
        rate_rps: 800
        slo_ms: 100

Unknown keys are errors (``extra="forbid"``), so a typo such as ``slo: 100`` fails loudly
instead of silently planning without an SLO.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tessera.errors import SpecError
from tessera.share.profiles import BatchingRule, Service


class _ServiceModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    rate_rps: float = Field(gt=0)
    slo_ms: float = Field(gt=0)


class _BatchingModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    latency_fraction: float = Field(0.5, gt=0, le=1)
    max_procs: int = Field(3, ge=1, le=48)
    interpolate_batches: bool = False
    max_utilization: float = Field(0.9, gt=0, le=1)


class _FileModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: str | None = None
    batching: _BatchingModel | None = None
    services: list[_ServiceModel] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class ServicesSpec:
    """A validated services file."""

    gpu: str | None
    rule: BatchingRule
    services: tuple[Service, ...]


def parse_services(text: str, source: str = "<services>") -> ServicesSpec:
    """Parse and validate services YAML; errors name the file and the bad field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{source}: not valid YAML: {e}") from e
    try:
        m = _FileModel.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in e.errors()
        )
        raise SpecError(f"{source}: {problems}") from None
    b = m.batching
    rule = (
        BatchingRule()
        if b is None
        else BatchingRule(b.latency_fraction, b.max_procs, b.interpolate_batches, b.max_utilization)
    )
    services = tuple(Service(s.name, s.model, s.rate_rps, s.slo_ms) for s in m.services)
    names = [s.name for s in services]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"{source}: duplicate service names: {', '.join(dup)}")
    return ServicesSpec(m.gpu, rule, services)


def load_services(path: Path) -> ServicesSpec:
    if not path.is_file():
        raise SpecError(f"services file not found: {path}")
    return parse_services(path.read_text(), str(path))
