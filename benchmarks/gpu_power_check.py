"""GPU check of the live power layer (issue 34, part 5): run on a machine with an NVIDIA GPU.

    python benchmarks/gpu_power_check.py                 # GPU 0, 20 s of load (about 40 s)
    python benchmarks/gpu_power_check.py --load-s 5 --json

It drives the product's own :class:`~tessera.live.nvml_power.GpuPower` (as the service does for
a run) on one idle GPU and checks, printing one line per step (``ok``, ``FAILED (why)`` or
``skipped: why``):

1. every GPU's model, power-limit range, current limit and energy counter (listed, not checked);
2. ``limit set``: ``GpuPower.begin`` sets a limit a quarter of the way up the GPU's range
   (whole watts), and ``limit reads back`` through NVML;
3. ``load``: ``--load-s`` seconds of bf16 matmuls where PyTorch sees CUDA (else the GPU idles
   for that time, and the step says it was skipped), while ``nvmlDeviceGetPowerUsage`` is
   sampled every 100 ms (``power sampled``);
4. ``GpuPower.end``: ``limit restored`` to the value found before; ``energy matches the
   sampled power``: the energy counters' figure within ±15 % of the samples' integral;
   ``power under the limit``: no sample over the set limit by more than 5 %;
5. the crash path: a child process begins a run with the limit and dies (``os._exit(9)``)
   before ending it (``crash leaves the limit set``); ``GpuPower.recover()``, as
   ``LiveService.start`` calls it, must put the limit back (``recover restores the limit``).

Setting a limit needs root (or a driver that allows it): where it is not permitted the limit
and crash steps are skipped and only the energy is checked. Whatever a failed step leaves, the
check puts the GPU's limit back as it found it at the start (``limit as found``). Without
``nvidia-ml-py`` or a GPU it prints ``no GPU to check: <why>`` and exits 0. Exit status 1 when a
step does not do what it should. ``--json`` prints a machine-readable summary on stdout (the
step lines then go to stderr).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tessera.live.nvml_power import GpuPower, load_nvml

#: The energy counters' figure may differ from the sampled power's integral by this fraction.
ENERGY_TOLERANCE = 0.15
#: A power sample may exceed the set limit by this fraction.
OVER_LIMIT_TOLERANCE = 0.05
SAMPLE_PERIOD_S = 0.1
JOB = "gpucheck"
CRASH_EXIT = 9


class Report:
    """The steps' outcomes, printed as they come and summarised for ``--json``."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.steps: list[dict[str, str]] = []
        self.figures: dict[str, Any] = {}

    def say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def step(self, name: str, status: str, detail: str = "") -> bool:
        """Record a step (``ok``, ``FAILED`` or ``skipped``); True when it did not fail."""
        self.steps.append({"step": name, "status": status, "detail": detail})
        if status == "skipped":
            self.say(f"{name}: skipped: {detail}")
        else:
            self.say(f"{name}: {status}" + (f" ({detail})" if detail else ""))
        return status != "FAILED"

    def check(self, name: str, good: bool, detail: str) -> bool:
        return self.step(name, "ok" if good else "FAILED", detail)

    @property
    def ok(self) -> bool:
        return all(s["status"] != "FAILED" for s in self.steps)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _try(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or the error's one-line description (a string) when NVML refuses."""
    try:
        return fn(*args)
    except Exception as e:  # NVMLError_NotSupported and the like: reported, never fatal
        return f"unknown ({type(e).__name__}: {e})"


def list_gpus(nv: Any, report: Report) -> list[dict[str, Any]]:
    """One line per GPU: model, limit range, current limit, energy counter (raw NVML: the
    product has no listing call)."""
    gpus = []
    for i in range(int(nv.nvmlDeviceGetCount())):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        rng = _try(nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
        now = _try(nv.nvmlDeviceGetPowerManagementLimit, h)
        counter = not isinstance(_try(nv.nvmlDeviceGetTotalEnergyConsumption, h), str)
        range_w = rng if isinstance(rng, str) else [rng[0] / 1000, rng[1] / 1000]
        limit_w = now if isinstance(now, str) else now / 1000
        model = _text(_try(nv.nvmlDeviceGetName, h))
        gpus.append({"index": i, "model": model, "range_w": range_w, "limit_w": limit_w,
                     "energy_counter": counter})
        span = range_w if isinstance(range_w, str) else f"{range_w[0]:g}-{range_w[1]:g} W"
        limit = limit_w if isinstance(limit_w, str) else f"{limit_w:g} W"
        report.say(f"GPU {i} {model}: limit range {span}, limit now {limit}, energy counter "
                   f"{'yes' if counter else 'no'}")
    return gpus


def pick_limit_mw(lo_mw: int, hi_mw: int, now_mw: int) -> int:
    """A limit a quarter of the way up ``lo_mw..hi_mw``, in whole watts (the step
    ``nvidia-smi -pl`` takes), inside the range and unlike ``now_mw`` (else halfway up)."""
    lo_w, hi_w = math.ceil(lo_mw / 1000), math.floor(hi_mw / 1000)
    for frac in (0.25, 0.5):
        w = min(max(round(lo_w + frac * (hi_w - lo_w)), lo_w), hi_w)
        if w * 1000 != now_mw:
            break
    return int(w * 1000)


class Sampler:
    """``nvmlDeviceGetPowerUsage`` of one GPU every :data:`SAMPLE_PERIOD_S`, in a thread."""

    def __init__(self, nv: Any, handle: Any) -> None:
        self.nv, self.h = nv, handle
        self.samples: list[tuple[float, float]] = []  # (monotonic s, W)
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            try:
                w = int(self.nv.nvmlDeviceGetPowerUsage(self.h)) / 1000
            except Exception as e:  # NVMLError_NotSupported: said in the step's line
                self.error = f"{type(e).__name__}: {e}"
                return
            self.samples.append((time.monotonic(), w))
            if self._stop.wait(SAMPLE_PERIOD_S):
                return

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def energy_j(self, t0_s: float, t1_s: float) -> float:
        """The samples' integral over ``t0_s..t1_s`` (trapezoids; the first and last sample
        held to the window's edges)."""
        s = self.samples
        total = s[0][1] * max(s[0][0] - t0_s, 0.0) + s[-1][1] * max(t1_s - s[-1][0], 0.0)
        for (ta, wa), (tb, wb) in itertools.pairwise(s):
            total += (wa + wb) / 2 * (tb - ta)
        return total


def put_load(gpu: int, load_s: float, report: Report) -> None:
    """bf16 matmuls on ``gpu`` for ``load_s`` seconds, or an idle wait where PyTorch has no
    CUDA (the step says so)."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # (CUDA indices = NVML's)
    try:
        import torch  # lazy: optional, and only this step needs it
        why = "" if torch.cuda.is_available() else "PyTorch sees no CUDA device"
        if not why and gpu >= torch.cuda.device_count():
            why = f"PyTorch sees {torch.cuda.device_count()} CUDA devices, not GPU {gpu}"
    except ImportError:
        why = "PyTorch is not installed"
    if why:
        time.sleep(load_s)
        report.step("load", "skipped", f"{why}; the GPU idled for {load_s:g} s instead")
        return
    dev = torch.device(f"cuda:{gpu}")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < load_s:
        for _ in range(20):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize(dev)
        n += 20
    el = time.monotonic() - t0
    note = (f"; CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}: cuda:{gpu} is "
            "assumed to be NVML's GPU" if "CUDA_VISIBLE_DEVICES" in os.environ else "")
    report.step("load", "ok", f"{n} bf16 matmuls of 8192x8192 in {el:.1f} s on cuda:{gpu}, "
                f"{n * 2 * 8192 ** 3 / el / 1e12:.0f} TFLOP/s{note}")


def run_check(nv: Any, gpu: int, load_s: float, report: Report, state: Path) -> None:
    """Steps 2-5 of the module docstring on GPU ``gpu``."""
    h = nv.nvmlDeviceGetHandleByIndex(gpu)
    found_mw = int(nv.nvmlDeviceGetPowerManagementLimit(h))
    lo_mw, hi_mw = nv.nvmlDeviceGetPowerManagementLimitConstraints(h)
    limit_mw = pick_limit_mw(int(lo_mw), int(hi_mw), found_mw)
    limit_w = limit_mw / 1000
    report.figures.update(gpu=gpu, limit_found_w=found_mw / 1000, limit_w=limit_w)
    power = GpuPower(state)
    try:
        permitted = _run(nv, h, power, gpu, found_mw, limit_w, load_s, report)
        if permitted:
            _crash(nv, h, state, gpu, found_mw, limit_w, report)
        else:
            for name in ("crash leaves the limit set", "recover restores the limit"):
                report.step(name, "skipped", "setting a limit is not permitted here")
    except Exception as e:  # an NVML call the steps expect to work: a failure, said in a line
        report.step("unexpected error", "FAILED", f"{type(e).__name__}: {e}")
    finally:
        _as_found(nv, h, found_mw, report)


def _run(nv: Any, h: Any, power: GpuPower, gpu: int, found_mw: int, limit_w: float,
         load_s: float, report: Report) -> bool:
    """One run through ``GpuPower.begin``/``end``; True when the limit could be set."""
    t0 = time.monotonic()
    start = power.begin(JOB, 1, [gpu], limit_w)
    notes = "; ".join(start.notes)
    permitted = start.limit_w is not None
    if permitted:
        report.check("limit set", start.limit_w == limit_w, notes)
        now_mw = int(nv.nvmlDeviceGetPowerManagementLimit(h))
        report.check("limit reads back", abs(now_mw - limit_w * 1000) < 1000,
                     f"{now_mw / 1000:g} W read, {limit_w:g} W set")
    elif "may not set limits" in notes:
        euid = os.geteuid() if hasattr(os, "geteuid") else -1
        report.step("limit set", "skipped", f"setting a limit is not permitted (euid {euid}): "
                    f"{notes}; only the energy is checked")
        report.step("limit reads back", "skipped", "no limit was set")
    else:
        report.check("limit set", False, notes or "GpuPower.begin set nothing")
    with Sampler(nv, h) as sampler:
        try:
            put_load(gpu, load_s, report)
        except Exception as e:  # CUDA refused (out of memory, a busy GPU): the run still ends
            report.step("load", "FAILED", f"{type(e).__name__}: {e}")
    t1 = time.monotonic()
    end = power.end(JOB, 1)
    ends = "; ".join(end.notes)
    now_mw = int(nv.nvmlDeviceGetPowerManagementLimit(h))
    if permitted:
        report.check("limit restored", now_mw == found_mw and "NOT" not in ends,
                     f"{now_mw / 1000:g} W now, {found_mw / 1000:g} W before; {ends}")
    else:
        report.check("limit unchanged", now_mw == found_mw,
                     f"{now_mw / 1000:g} W now, {found_mw / 1000:g} W before")
    s = sampler.samples
    if not s:
        report.check("power sampled", False, sampler.error or "no sample")
        return permitted
    watts = [w for _, w in s]
    report.figures.update(samples=len(s), mean_power_w=round(sum(watts) / len(s), 1),
                          max_power_w=max(watts), window_s=round(t1 - t0, 2))
    report.check("power sampled", True, f"{len(s)} samples, mean {sum(watts) / len(s):.0f} W, "
                 f"max {max(watts):.0f} W")
    _energy(sampler.energy_j(t0, t1), end.energy_j, ends, report)
    if permitted:
        worst = max(watts)
        report.check("power under the limit", worst <= limit_w * (1 + OVER_LIMIT_TOLERANCE),
                     f"max {worst:.0f} W under a {limit_w:g} W limit (up to "
                     f"+{OVER_LIMIT_TOLERANCE:.0%} allowed)")
    else:
        report.step("power under the limit", "skipped", "no limit was set")
    return permitted


def _energy(sampled_j: float, counted_j: float | None, notes: str, report: Report) -> None:
    if counted_j is None:
        report.step("energy matches the sampled power", "skipped",
                    f"the energy counters gave no figure: {notes or 'no reason given'}")
        return
    ratio = counted_j / sampled_j if sampled_j > 0 else math.inf
    report.figures.update(energy_counter_j=round(counted_j, 1),
                          energy_sampled_j=round(sampled_j, 1), energy_ratio=round(ratio, 3))
    report.check("energy matches the sampled power", abs(ratio - 1) <= ENERGY_TOLERANCE,
                 f"counters {counted_j:.1f} J, sampled power's integral {sampled_j:.1f} J, "
                 f"ratio {ratio:.3f} (±{ENERGY_TOLERANCE:.0%} allowed)")


def _crash(nv: Any, h: Any, state: Path, gpu: int, found_mw: int, limit_w: float,
           report: Report) -> None:
    """A child begins a run and dies; ``GpuPower.recover()`` here must restore the limit."""
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--crash-child",
                            str(state), "--gpu", str(gpu), "--limit-w", str(limit_w)],
                           capture_output=True, text=True, timeout=60)
    now_mw = int(nv.nvmlDeviceGetPowerManagementLimit(h))
    records = sorted(p.name for p in state.glob("*.json"))
    report.check("crash leaves the limit set",
                 child.returncode == CRASH_EXIT and abs(now_mw - limit_w * 1000) < 1000
                 and bool(records),
                 f"child exit {child.returncode}, limit {now_mw / 1000:g} W, restore records "
                 f"{records or 'none'}" + (f"; {child.stderr.strip()[-300:]}"
                                           if child.returncode != CRASH_EXIT else ""))
    lines = GpuPower(state).recover()
    now_mw = int(nv.nvmlDeviceGetPowerManagementLimit(h))
    left = sorted(p.name for p in state.glob("*.json"))
    said = "; ".join(lines) or "recover() did nothing"
    report.check("recover restores the limit",
                 now_mw == found_mw and not left and "NOT" not in said,
                 f"{now_mw / 1000:g} W now, {found_mw / 1000:g} W before; {said}")


def _as_found(nv: Any, h: Any, found_mw: int, report: Report) -> None:
    """Leave the GPU at the limit found at the start, whatever a failed step left."""
    now_mw = _try(nv.nvmlDeviceGetPowerManagementLimit, h)
    if now_mw == found_mw:
        report.step("limit as found", "ok", f"{found_mw / 1000:g} W")
        return
    left = now_mw if isinstance(now_mw, str) else f"{now_mw / 1000:g} W"
    fixed = _try(nv.nvmlDeviceSetPowerManagementLimit, h, found_mw)
    report.step("limit as found", "FAILED",
                f"{left} left by the steps above; the check put back {found_mw / 1000:g} W"
                if not isinstance(fixed, str) else
                f"{left} left, and putting back {found_mw / 1000:g} W failed: {fixed}; "
                "set it with nvidia-smi -pl")


def crash_child(state: Path, gpu: int, limit_w: float) -> None:
    """Begin a run with ``limit_w`` on ``gpu`` and die before ending it (a crashed service)."""
    start = GpuPower(state).begin(JOB + "-crash", 1, [gpu], limit_w)
    print("; ".join(start.notes), flush=True)
    os._exit(CRASH_EXIT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to check")
    ap.add_argument("--load-s", type=float, default=20.0, help="seconds of load (default 20)")
    ap.add_argument("--json", action="store_true",
                    help="print a JSON summary on stdout (the step lines go to stderr)")
    ap.add_argument("--crash-child", metavar="STATE_DIR", help=argparse.SUPPRESS)
    ap.add_argument("--limit-w", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.crash_child:
        crash_child(Path(args.crash_child), args.gpu, args.limit_w)
    if not (math.isfinite(args.load_s) and args.load_s >= 0):
        ap.error(f"--load-s {args.load_s} is not a number of seconds >= 0")
    report = Report(sys.stderr if args.json else sys.stdout)
    nv, why = load_nvml()
    summary: dict[str, Any] = {"gpus": [], "steps": report.steps, "figures": report.figures}
    if nv is None:
        report.say(f"no GPU to check: {why}")
        summary.update(ok=True, no_gpu=why)
    else:
        summary["gpus"] = list_gpus(nv, report)
        if not 0 <= args.gpu < len(summary["gpus"]):
            ap.error(f"--gpu {args.gpu}: NVML counts {len(summary['gpus'])} GPUs")
        with tempfile.TemporaryDirectory(prefix="tessera-gpucheck-") as tmp:
            run_check(nv, args.gpu, args.load_s, report, Path(tmp) / "power")
        failed = [s["step"] for s in report.steps if s["status"] == "FAILED"]
        report.say(f"{'FAILED: ' + ', '.join(failed) if failed else 'all steps ok'}")
        summary["ok"] = report.ok
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
