"""What one training step of a table's job type computes: FLOPs, bytes moved, kernels.

The counts are bundled (``data/job_work.json``), made once by ``tools/count_job_work.py`` from
the real architectures built in PyTorch on the ``meta`` device (see that script for how each is
counted and which shapes were chosen); PyTorch is not needed to read them. They feed the
kernels prior (:mod:`tessera.perf.kernel_prior`): a job's time per step on a flavor no table
covers, from what it computes rather than from one peak number per flavor.

>>> work = table_work(["ResNet-50 (batch size 64)"])
>>> round(work["ResNet-50 (batch size 64)"].flops / 1e12, 2)   # TFLOP per step
1.56
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from tessera.errors import SpecError


@dataclass(frozen=True, slots=True)
class JobWork:
    """One training step of a job type (forward, loss, backward, optimizer), FP32.

    Attributes:
        flops: floating-point operations (matrix products and convolutions, both passes).
        bytes: an estimate of the bytes moved through device memory (every operation's inputs
            and outputs once, plus the optimizer's traffic).
        kernels: operations run, a proxy for per-kernel launch overhead.
        params: parameters of the model.
    """

    flops: float
    bytes: float
    kernels: float
    params: float


@cache
def _bundled() -> dict[str, JobWork]:
    text = resources.files("tessera.data").joinpath("job_work.json").read_text()
    out: dict[str, JobWork] = {}
    for by_type in json.loads(text)["tables"].values():
        for job_type, w in by_type.items():
            out[job_type] = JobWork(w["flops"], w["bytes"], w["kernels"], w["params"])
    return out


def table_work(job_types: Iterable[str]) -> dict[str, JobWork]:
    """The bundled counts of ``job_types`` (names as Gavel's and Sia's tables spell them).

    Raises:
        SpecError: a job type was never counted (only Gavel's and Sia's bundled tables are).
    """
    known = _bundled()
    wanted = list(job_types)
    missing = [t for t in wanted if t not in known]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SpecError(f"no counted work for job type {missing[0]!r}{more}: the kernels "
                        "prior knows Gavel's and Sia's job types only; "
                        "tools/count_job_work.py counts new ones")
    return {t: known[t] for t in wanted}
