"""A service spec: what a client submits to ``POST /api/services`` (or ``tessera service
submit``), validated at the edge.

Example (JSON or YAML)::

    name: ranker                   # lower-case letters, digits, '-'; unique in the service
    model: resnet50                # a model of the profile table (bert, resnet50, vgg16 ...)
    slo_ms: 100                    # each request answered within this, at p99
    rate_rps: 400                  # expected requests per second (change it with `rate`)
    command: [python, serve.py]    # what each replica runs
    queue: team-a                  # optional: the token's own queue by default
    min_replicas: 1                # optional: at least this many replica processes
    env: {MODEL_DIR: /models}      # optional

Which GPU each replica uses is the service's to say: ``env`` may not set
``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES``, an MPS variable (``CUDA_MPS_*``) or a
``TESSERA_*`` variable; such a spec is refused (422), so a tenant cannot steer its replicas onto
a slice another tenant's service holds. Unknown keys are errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tessera.errors import SpecError
from tessera.live.executors.base import DEVICE_VARS

#: Most replica processes one service may ask for as its minimum.
MAX_MIN_REPLICAS = 64


class ServiceRequest(BaseModel):
    """The body of ``POST /api/services`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")
    model: str = Field(min_length=1, max_length=100)
    slo_ms: float = Field(gt=0, le=3_600_000)
    rate_rps: float = Field(gt=0, le=10_000_000)
    command: list[str] = Field(min_length=1, max_length=256)
    queue: str | None = Field(None, max_length=100)
    min_replicas: int = Field(1, ge=1, le=MAX_MIN_REPLICAS)
    env: dict[str, str] = Field(default_factory=dict, max_length=128)

    @field_validator("env")
    @classmethod
    def _no_device_vars(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if key in DEVICE_VARS or key.startswith(("CUDA_MPS_", "TESSERA_")):
                raise ValueError(f"env may not set {key}: the service chooses each replica's "
                                 "GPU slice and MPS share")
        return env


class RateRequest(BaseModel):
    """The body of ``POST /api/services/<name>/rate``."""

    model_config = ConfigDict(extra="forbid")
    rate_rps: float = Field(gt=0, le=10_000_000)


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """A validated service, as stored (``queue`` resolved to the queue it runs in)."""

    name: str
    model: str
    slo_ms: float
    rate_rps: float
    command: tuple[str, ...]
    queue: str
    min_replicas: int = 1
    env: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "model": self.model, "slo_ms": self.slo_ms,
                           "rate_rps": self.rate_rps, "command": list(self.command),
                           "queue": self.queue, "min_replicas": self.min_replicas,
                           "env": dict(self.env)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ServiceSpec:
        d = json.loads(text)
        return cls(d["name"], d["model"], float(d["slo_ms"]), float(d["rate_rps"]),
                   tuple(d["command"]), d["queue"], int(d["min_replicas"]),
                   tuple(sorted(d["env"].items())))

    def with_rate(self, rate_rps: float) -> ServiceSpec:
        return ServiceSpec(self.name, self.model, self.slo_ms, rate_rps, self.command,
                           self.queue, self.min_replicas, self.env)


def parse_service(raw: Any, queue: str) -> ServiceSpec:
    """Validate a request body; ``queue`` is the queue it goes to when it names none.

    Raises:
        SpecError: one line naming each bad field.
    """
    try:
        m = ServiceRequest.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
                             for err in e.errors())
        raise SpecError(f"bad service: {problems}") from None
    return ServiceSpec(m.name, m.model, m.slo_ms, m.rate_rps, tuple(m.command),
                       m.queue or queue, m.min_replicas, tuple(sorted(m.env.items())))
