"""Zeus's measured power and training traces, read as typed rows, and a measured power model.

Zeus (NSDI'23, You, Chung and Chowdhury) measured six (dataset, network) workloads on four GPU
types, and published two tables (bundled in ``tessera/data/zeus``, Apache-2.0):

* **power** -- per (workload, batch size, optimizer, power limit): the time of one epoch and the
  average board power while it ran. Deterministic: measured once per setting.
* **train** -- per (workload, batch size, seed): the number of epochs until the validation
  metric first reached each target. Stochastic: at least four seeds per batch size.

Time to accuracy is ``epochs × time_per_epoch`` and energy to accuracy ``epochs ×
time_per_epoch × average_power``. The power limit changes the speed but not the number of
epochs; the batch size changes both. :mod:`tessera.perf.zeus_opt` builds Zeus's optimisers on
these rows; :class:`ZeusPowerModel` answers the :class:`~tessera.perf.power.PowerModel`
protocol with them (``measured=True``, ``source="zeus:<gpu>"``).

>>> t = ZeusTable.load("v100")
>>> w = workload("imagenet")
>>> t.power_row(w, 256, 250).time_per_epoch_s < t.power_row(w, 256, 100).time_per_epoch_s
True
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from importlib import resources

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerEstimate, PowerLimitRange, PowerModel

#: Zeus's GPU names, each with the catalog flavors (short names) it stands for. The A40 has
#: no catalog flavor: its table is readable by name (``ZeusTable.load("a40")``) only.
ZEUS_GPUS: dict[str, tuple[str, ...]] = {
    "v100": ("V100-16GB", "V100-32GB"),
    "a40": (),
    "p100": ("P100",),
    "rtx6000": ("RTX-6000",),
}


@dataclass(frozen=True, slots=True)
class ZeusWorkload:
    """One recurring job of Zeus's traces, with the defaults Zeus's own experiments use.

    Attributes:
        dataset, network, optimizer: the trace's keys (``imagenet``, ``resnet50``, ``adadelta``).
        target_metric: the validation metric the job trains to (accuracy, or WER for speech).
        max_epochs: a run that has not reached the target after this many epochs has failed.
        default_batch: the user's batch size b0 (capped by the GPU's largest measured batch).
        aliases: other names accepted on input (Tessera's model names).
    """

    dataset: str
    network: str
    optimizer: str
    target_metric: float
    max_epochs: int
    default_batch: int
    aliases: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``dataset/network`` -- the name tables and the CLI print."""
        return f"{self.dataset}/{self.network}"


#: Zeus's six workloads with the targets, epoch caps and b0 of its recurring-job experiments
#: (``examples/research_reproducibility/zeus_nsdi23/run_alibaba.py``).
WORKLOADS: tuple[ZeusWorkload, ...] = (
    ZeusWorkload("cifar100", "shufflenetv2", "adadelta", 0.6, 100, 1024, ("shufflenet",)),
    ZeusWorkload("imagenet", "resnet50", "adadelta", 0.65, 100, 256, ("resnet-50",)),
    ZeusWorkload("squad", "bert_base_uncased", "adamw", 84.0, 6, 32, ("bert",)),
    ZeusWorkload("librispeech", "deepspeech2", "adamw", 40.0, 16, 256, ()),
    ZeusWorkload("movielens-1m", "ncf", "adam", 0.41, 100, 1024, ("movielens", "recommendation")),
    ZeusWorkload("sentiment140", "bert_base_uncased", "adamw", 0.84, 10, 128, ()),
)


def workload(name: str) -> ZeusWorkload:
    """The Zeus workload a name means: its key, dataset, network or an alias (any case).

    Raises:
        SpecError: naming the known workloads, when nothing matches.
    """
    k = name.strip().lower()
    for w in WORKLOADS:
        if k in (w.key, w.dataset, w.network, *w.aliases):
            return w
    known = ", ".join(w.key for w in WORKLOADS)
    raise SpecError(f"unknown Zeus workload {name!r}; known: {known}")


@dataclass(frozen=True, slots=True)
class PowerRow:
    """One measured setting of Zeus's power table (one epoch at one power limit)."""

    dataset: str
    network: str
    batch_size: int
    optimizer: str
    power_limit_w: int
    time_per_epoch_s: float
    avg_power_w: float

    @property
    def energy_per_epoch_j(self) -> float:
        """Energy of one epoch in joules: time × average power."""
        return self.time_per_epoch_s * self.avg_power_w


@dataclass(frozen=True, slots=True)
class TrainRow:
    """One seed's epochs to one target metric, from Zeus's training table.

    ``target_epoch`` is ``None`` when that seed never reached the target (``nan`` in the file).
    """

    dataset: str
    network: str
    batch_size: int
    optimizer: str
    learning_rate: float
    run: int
    target_metric: float
    target_epoch: int | None


def _read_csv(name: str) -> list[dict[str, str]]:
    text = resources.files("tessera.data").joinpath("zeus", name).read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


@functools.cache
def train_rows() -> tuple[TrainRow, ...]:
    """Every row of ``summary_train.csv`` (3,759), typed."""
    return tuple(
        TrainRow(r["dataset"], r["network"], int(r["batch_size"]), r["optimizer"],
                 float(r["learning_rate"]), int(r["run"]), float(r["target_metric"]),
                 None if r["target_epoch"] == "nan" else int(float(r["target_epoch"])))
        for r in _read_csv("summary_train.csv"))


class ZeusTable:
    """One GPU's power table joined with the training table, indexed for the optimisers.

    Build it with :meth:`load` (cached per GPU). All look-ups are dictionary reads, so the
    exhaustive search over a whole table takes milliseconds.
    """

    def __init__(self, gpu: str, power: tuple[PowerRow, ...], train: tuple[TrainRow, ...]):
        self.gpu = gpu
        self.rows = power
        self._power: dict[tuple[str, str, str, int, int], PowerRow] = {
            (r.dataset, r.network, r.optimizer, r.batch_size, r.power_limit_w): r for r in power}
        self._epochs: dict[tuple[str, str, str, float, int], list[int | None]] = {}
        for t in train:
            key = (t.dataset, t.network, t.optimizer, t.target_metric, t.batch_size)
            self._epochs.setdefault(key, []).append(t.target_epoch)
        self._limits: dict[tuple[str, str, str, int], list[int]] = {}
        for r in power:
            self._limits.setdefault((r.dataset, r.network, r.optimizer, r.batch_size),
                                    []).append(r.power_limit_w)
        #: The highest power limit measured on this GPU: Zeus's ``max_power`` in its cost.
        self.max_limit_w: int = max(r.power_limit_w for r in power)
        self.min_limit_w: int = min(r.power_limit_w for r in power)
        #: The lowest average power measured on this GPU (any workload, batch and limit).
        self.min_power_w: float = min(r.avg_power_w for r in power)

    @staticmethod
    @functools.cache
    def load(gpu: str) -> ZeusTable:
        """The table of ``gpu`` (``v100``, ``a40``, ``p100``, ``rtx6000``; any case)."""
        g = gpu.strip().lower().replace("-", "").replace(" ", "")
        if g not in ZEUS_GPUS:
            raise SpecError(f"Zeus measured no GPU {gpu!r}; known: {', '.join(ZEUS_GPUS)}")
        power = tuple(
            PowerRow(r["dataset"], r["network"], int(r["batch_size"]), r["optimizer"],
                     int(r["power_limit"]), float(r["time_per_epoch"]),
                     float(r["average_power"]))
            for r in _read_csv(f"summary_power_{g}.csv"))
        return ZeusTable(g, power, train_rows())

    def batch_sizes(self, w: ZeusWorkload) -> tuple[int, ...]:
        """Batch sizes with both a power measurement and training runs, ascending."""
        return tuple(sorted(k[3] for k in self._limits if k[:3] == (w.dataset, w.network,
                                                                        w.optimizer)
                            and self.epochs_to_target(w, k[3])))

    def power_limits(self, w: ZeusWorkload, batch_size: int) -> tuple[int, ...]:
        """Power limits measured for ``batch_size``, ascending."""
        return tuple(sorted(self._limits.get((w.dataset, w.network, w.optimizer, batch_size),
                                             ())))

    def power_row(self, w: ZeusWorkload, batch_size: int, limit_w: int) -> PowerRow:
        """The measured row, or a :class:`SpecError` naming what was asked."""
        row = self._power.get((w.dataset, w.network, w.optimizer, batch_size, limit_w))
        if row is None:
            raise SpecError(f"Zeus measured {w.key} on {self.gpu} at batch {batch_size} and "
                            f"{limit_w} W never")
        return row

    def epochs_to_target(self, w: ZeusWorkload, batch_size: int) -> tuple[int | None, ...]:
        """Epochs each seed took to reach ``w.target_metric`` (``None``: that seed never did;
        empty: no seed was trained at this batch)."""
        return tuple(self._epochs.get((w.dataset, w.network, w.optimizer, w.target_metric,
                                       batch_size), ()))

    def default_batch(self, w: ZeusWorkload) -> int:
        """Zeus's b0 for this GPU: the workload's default capped by the largest batch measured."""
        sizes = self.batch_sizes(w)
        b0 = min(w.default_batch, max(sizes))
        if b0 not in sizes:
            raise SpecError(f"default batch {b0} of {w.key} is not in {self.gpu}'s table")
        return b0


def zeus_gpu_of(flavor: GpuFlavor) -> str:
    """Zeus's GPU name for a catalog flavor, or a :class:`SpecError` naming the measured ones."""
    for gpu, shorts in ZEUS_GPUS.items():
        if flavor.short in shorts:
            return gpu
    known = ", ".join(s for shorts in ZEUS_GPUS.values() for s in shorts)
    raise SpecError(f"Zeus measured no {flavor.short}; measured flavors: {known}")


class ZeusPowerModel:
    """A :class:`~tessera.perf.power.PowerModel` answering Zeus's measurements.

    ``estimate`` finds the workload by ``model`` or by the model part of ``job_type``
    (``ResNet-50 (batch size 64)`` -> ``imagenet/resnet50``), uses the workload's b0 when no
    batch is given and the GPU's highest measured limit when no limit is given. A limit between
    two measured ones is interpolated linearly (``source`` then ends in ``+interpolated`` and
    ``measured`` is ``False``); a limit outside the measured range is a :class:`SpecError`.

    Zeus measured no idle power and only its six workloads: for those, and for other flavors,
    this model asks ``fallback`` (an estimated model) when given one, and otherwise raises a
    clear :class:`SpecError` -- it never guesses.
    """

    def __init__(self, fallback: PowerModel | None = None) -> None:
        self.fallback = fallback

    def covers(self, job_type: str, model: str | None, flavor: GpuFlavor) -> bool:
        """Whether Zeus measured this job's workload on this flavor."""
        try:
            zeus_gpu_of(flavor)
            workload(_model_name(job_type, model))
        except SpecError:
            return False
        return True

    def limit_range(self, flavor: GpuFlavor) -> PowerLimitRange:
        """The measured limits of ``flavor`` (Zeus's 25 W grid).

        With a fallback, a measured flavor's range is narrowed to the part the fallback also
        accepts (its low end rounded up to Zeus's grid): jobs Zeus did not measure run on the
        same flavor and are answered by the fallback, so every limit of the range must be
        valid for both.
        """
        if self.fallback is not None and not _measured_flavor(flavor):
            return self.fallback.limit_range(flavor)
        t = ZeusTable.load(zeus_gpu_of(flavor))
        low, high = float(t.min_limit_w), float(t.max_limit_w)
        if self.fallback is not None:
            other = self.fallback.limit_range(flavor)
            if other.min_w > low:  # (up to Zeus's 25 W grid: its limits stay measured)
                low += 25.0 * math.ceil((other.min_w - low) / 25.0)
            high = min(high, other.max_w)
            if low > high:
                raise SpecError(f"{flavor.short}: Zeus's measured limits {t.min_limit_w}-"
                                f"{t.max_limit_w} W and the fallback's {other.min_w:g}-"
                                f"{other.max_w:g} W do not overlap")
        return PowerLimitRange(low, high, 25.0)

    def estimate(self, job_type: str, model: str | None, flavor: GpuFlavor,
                 power_limit_w: float | None = None,
                 batch_size: int | None = None) -> PowerEstimate:
        """Measured power and step-time factor of this job on ``flavor`` at ``power_limit_w``."""
        if self.fallback is not None and not self.covers(job_type, model, flavor):
            return self.fallback.estimate(job_type, model, flavor, power_limit_w, batch_size)
        gpu = zeus_gpu_of(flavor)
        t = ZeusTable.load(gpu)
        w = workload(_model_name(job_type, model))
        bs = t.default_batch(w) if batch_size is None else batch_size
        limits = t.power_limits(w, bs)
        if not limits:
            raise SpecError(f"Zeus measured {w.key} on {gpu} at batches "
                            f"{', '.join(map(str, t.batch_sizes(w)))}, not {bs}")
        limit = float(limits[-1]) if power_limit_w is None else power_limit_w
        PowerLimitRange(float(limits[0]), float(limits[-1])).check(flavor, limit)
        top = t.power_row(w, bs, limits[-1])
        lo = max(p for p in limits if p <= limit)
        hi = min(p for p in limits if p >= limit)
        a, b = t.power_row(w, bs, lo), t.power_row(w, bs, hi)
        f = 0.0 if hi == lo else (limit - lo) / (hi - lo)
        power = a.avg_power_w + f * (b.avg_power_w - a.avg_power_w)
        time = a.time_per_epoch_s + f * (b.time_per_epoch_s - a.time_per_epoch_s)
        exact = hi == lo
        return PowerEstimate(avg_power_w=power, step_time_factor=time / top.time_per_epoch_s,
                             measured=exact,
                             source=f"zeus:{gpu}" + ("" if exact else "+interpolated"))

    def idle_power_w(self, flavor: GpuFlavor) -> float:
        """Asked of ``fallback`` (Zeus measured no idle power), but on a measured flavor never
        above the lowest draw Zeus measured on it: a board running a job draws at least its
        idle power (NCF at 34.8 W on the V100 is below a 20 %-of-TDP guess of 60 W), and the
        power budget relies on a completion never raising cluster power."""
        if self.fallback is None:
            raise SpecError(f"Zeus measured no idle power for {flavor.short}; chain an "
                            "estimated power model behind ZeusPowerModel")
        idle = self.fallback.idle_power_w(flavor)
        if _measured_flavor(flavor):
            idle = min(idle, ZeusTable.load(zeus_gpu_of(flavor)).min_power_w)
        return idle


def _measured_flavor(flavor: GpuFlavor) -> bool:
    return any(flavor.short in shorts for shorts in ZEUS_GPUS.values())


def _model_name(job_type: str, model: str | None) -> str:
    if model:
        return model
    return job_type.split(" (batch size ", 1)[0]


def epoch_cost(row: PowerRow, eta: float, max_power_w: float) -> float:
    """Zeus's cost of one epoch: η·energy + (1 − η)·max_power·time (joules-equivalent)."""
    check_eta(eta)
    return eta * row.energy_per_epoch_j + (1.0 - eta) * max_power_w * row.time_per_epoch_s


def check_eta(eta: float) -> None:
    """Raise a one-line :class:`SpecError` unless 0 <= η <= 1."""
    if not (math.isfinite(eta) and 0.0 <= eta <= 1.0):
        raise SpecError(f"eta must be in [0, 1] (the weight on energy), got {eta}")
