"""GPU check of the real device layer (issue 36, part 4): run on a machine with an NVIDIA GPU.

    python benchmarks/gpu_mig_check.py            # list GPUs, MIG mode and MIG instances
    python benchmarks/gpu_mig_check.py --create   # also create 1g@6 on the first GPU with MIG
                                                  # on, run a process on it, destroy it (root)

Without ``nvidia-ml-py`` or a GPU it says so and exits 0 (nothing to check). With ``--create``
it needs root and an idle GPU whose MIG mode is already on; it never changes MIG mode (that
needs a GPU reset). Exit status 1 when a step does not do what it should.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from tessera.live.inference.devices import DeviceError
from tessera.share.mig import Placement


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--create", action="store_true", help="create, use and destroy 1g@6")
    args = ap.parse_args()
    try:
        from tessera.live.inference.nvml import NvmlDevices

        dev = NvmlDevices()
        gpus = dev.gpus()
    except DeviceError as e:
        print(f"no GPU to check: {e}")
        return 0
    for g in gpus:
        insts = dev.instances(g.index) if g.mig_enabled else ()
        print(f"GPU {g.index} {g.model} {g.uuid} MIG {'on' if g.mig_enabled else 'off'}: "
              + (", ".join(f"{i.placement} {i.uuid}" for i in insts) or "no instances"))
    if not args.create:
        return 0
    target = next((g for g in gpus if g.mig_enabled), None)
    if target is None:
        print("no GPU with MIG mode on: nothing created")
        return 0
    where = Placement(6, "1g")
    inst = dev.create(target.index, where)
    print(f"created {inst.placement} {inst.profile} {inst.uuid}")
    try:
        seen = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": inst.uuid}).stdout
        ok = inst.uuid in seen
        print(f"nvidia-smi -L lists it: {ok}")
    finally:
        dev.destroy(target.index, where)
    gone = all(i.placement != where for i in dev.instances(target.index))
    print(f"destroyed: {gone}")
    return 0 if ok and gone else 1


if __name__ == "__main__":
    sys.exit(main())
