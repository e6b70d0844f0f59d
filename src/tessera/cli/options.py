"""Options that several commands take: declared once, so each has one name, default and help.

A flag that means the same thing in two commands is declared here and imported by both, and
``tests/cli/test_help_walk.py`` checks that no command drifts from it. ``docs/cli.md`` tables
the whole vocabulary. The conventions:

* time flags end in ``-s`` and take seconds (``--round-s``, ``--grace-s``, ``--traffic-s``);
* ``--state`` is always the live service's state directory (``jobs --status`` filters by
  job state);
* ``-t`` is the trace, ``-c`` the cluster, ``-p`` the policy, wherever a command takes them;
* ``--json`` prints JSON on stdout for scripts instead of text;
* ``--gpus-per-server`` sizes the servers of a compact ``flavor:count`` list (8 unless told);
  presets and YAML clusters keep their own servers.

A renamed flag keeps its old spelling as a hidden alias (:func:`deprecated_alias`) that still
works and says what to type instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import typer

T = TypeVar("T")

DEFAULT_GPUS_PER_SERVER = 8
"""Servers of a compact cluster hold 8 GPUs unless told otherwise (a DGX/HGX-sized box)."""

GPUS_PER_SERVER = typer.Option(
    DEFAULT_GPUS_PER_SERVER, "--gpus-per-server", min=1,
    help="GPUs per server when GPUs are given as a flavor:count list (a flavor's GPUs that "
         "do not fill a whole server go on one smaller server). Presets and YAML clusters "
         "keep their own server sizes.",
)

CLUSTER_HELP = ("Cluster: a preset (gavel-108, philly, pai-2020, modern-mixed, sia-64 = Sia's "
                "T4/RTX/A100 setting, lingjun-847 = Alibaba Lingjun's switch tree), a YAML "
                "file, or a flavor:count list such as "
                "v100:12,p100:12,k80:12.")
POLICY_HELP = ("Scheduling policy (`tessera policies` lists them); add -agnostic for the "
               "heterogeneity-blind twin, :option=value to set an option (`tessera policies "
               "NAME` lists them), e.g. hetero_pack:min_gain=0.05.")

TRACE_HELP = ("Trace file or trace name (`tessera traces` lists the names and where their data "
              "is; philly and sia-philly-1 are bundled).")
SEED = typer.Option(0, "--seed", help="Random seed: the same seed gives the same result.")
ARRIVAL_SCALE = typer.Option(1.0, "--arrival-scale", help="Divide submission times by this "
                             "(> 1 raises the load).")
LIMIT = typer.Option(None, "--limit", min=1, help="Use only the first N jobs of the trace.")
JSON = typer.Option(False, "--json", help="Print JSON on stdout (for scripts) instead of text.")
RUN_OUT = typer.Option(None, "--out", help="Output folder (default: a new folder under runs/).")

SERVER = typer.Option(None, "--server", envvar="TESSERA_SERVER", show_default=False,
                      help="URL of the running service (default http://127.0.0.1:8470).")
TOKEN = typer.Option(None, "--token", show_default=False,
                     help="Bearer token on the command line (visible to every user in `ps`: "
                          "prefer --token-file or TESSERA_TOKEN).")
TOKEN_FILE = typer.Option(None, "--token-file", show_default=False, metavar="PATH",
                          help="File holding the bearer token (the admin token `tessera serve` "
                               "printed on first start, or a tenant token from `tessera "
                               "token-add`); else TESSERA_TOKEN.")
STATE = typer.Option(Path.home() / ".tessera", "--state",
                     help="State directory of the live service (job store, tenancy, token "
                          "hashes; private to the service, 0700).")

TENANCY = typer.Option(None, "--tenancy", metavar="PATH",
                       help="Tenant queues, per-flavor quotas, cohorts, fair sharing, priority "
                            "classes and local queues from this file or folder: Kueue v1beta2 "
                            "YAML (ResourceFlavor, ClusterQueue, Cohort, LocalQueue, "
                            "WorkloadPriorityClass) or Tessera's (docs/tenancy.md); a field "
                            "Tessera cannot honour is refused, naming it.")

THROUGHPUTS = typer.Option("gavel", "--throughputs", help="Training throughput table: gavel "
                           "(K80/P100/V100), sia (T4/V100/A100/RTX, for sia-64 and "
                           "modern-mixed), or a Gavel-layout JSON file.")

GPU_HELP = "MIG-capable GPU model, e.g. A100-80GB or H100-80GB (`share layouts` lists them)."
PRE_R510 = typer.Option(False, "--pre-r510", help="Driver older than R510 (fewer layouts).")
PROFILES = typer.Option(None, "--profiles", help="ParvaGPU-format profile folder (default: "
                        "the bundled A100-80GB profiles).")
METHOD = typer.Option("auto", "--method", help="Packing method: auto, heuristic or ilp.")
TRAFFIC_S = typer.Option(10.0, "--traffic-s", min=0.0,
                         help="Seconds of request traffic to replay against the plan "
                              "(0: do not replay).")


def deprecated_alias(old: str, new: str) -> Any:
    """A hidden option spelled ``old`` that stands in for ``new`` (pair with :func:`prefer`)."""
    return typer.Option(None, old, hidden=True, show_default=False,
                        help=f"Deprecated spelling of {new}.")


def prefer(value: T, old_value: T | None, old: str, new: str) -> T:
    """``old_value`` when the deprecated ``old`` flag was given (with a note), else ``value``."""
    if old_value is None:
        return value
    typer.secho(f"note: {old} is deprecated; use {new}", err=True, fg=typer.colors.YELLOW)
    return old_value

DEVICES_HELP = "GPUs as a FLAVOR:COUNT list, e.g. A100:2,V100:4,T4:2."
GLOBAL_BATCH_HELP = "Samples per optimizer step, over all devices."
