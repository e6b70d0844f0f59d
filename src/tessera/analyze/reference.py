"""The reference figures themselves (``docs/reference/traces.md`` §2 and §4, data READMEs).

Kept apart from :mod:`.published` (the types and the comparison) so the data reads as a table.
Tolerances follow the precision the source prints: a value given to 0.01 % gets ±0.005, one
given to 0.1 % gets ±0.05; FGD's Table 1 gets the ±0.1 percentage point the paper's rounding
allows. Figures the stored data cannot give carry ``metric=None`` and the reason.
"""

from __future__ import annotations

from tessera.analyze.published import Evidence, PublishedFigure

V, T, C = Evidence.VERIFIED, Evidence.TRANSCRIBED, Evidence.COMPUTED

POLLUX = "Philly data README (Pollux table, computed with pandas)"
ATC19 = "Jeon et al., ATC'19"
ACME_PHILLY = "Acme cluster_summary.csv, Philly row (full raw trace)"
NO_STATUS = "the stored Philly tables carry no job status"
SUBSET = "the Pollux table is an undocumented subset (82,247 of the raw trace's GPU jobs)"
ITP_UP = "ElasticFlow upstream README"
ITP_C = "ITP data README (computed from raw/)"
FGD_T1 = "Weng et al., FGD ATC'23, Table 1"
FGD_C = "FGD data README (computed from the stored files)"
PAI = "Alibaba PAI v2020 README / NSDI'22 project page"
NSDI22 = "Weng et al., NSDI'22"
HELIOS = "Helios artifact helios_cluster_summary.csv, total row"
NO_JOBS_PAI = "the PAI job/task/instance tables are not stored (machine table only)"

P = ("philly",)
PR = ("philly-runtime",)
PG = ("philly-gavel",)
OCC = ("philly", "philly-nodes")


def _pct(formats: tuple[str, ...], quantity: str, value: float, metric: str, source: str,
         evidence: Evidence = C, tolerance: float = 0.05) -> PublishedFigure:
    return PublishedFigure(formats, quantity, value, "%", source, evidence, metric, tolerance)


def _na(formats: tuple[str, ...], quantity: str, value: float, unit: str, source: str,
        evidence: Evidence, why: str) -> PublishedFigure:
    return PublishedFigure(formats, quantity, value, unit, source, evidence, None, why_not=why)


FIGURES: tuple[PublishedFigure, ...] = (
    # --- Philly, Pollux job table -------------------------------------------------------------
    PublishedFigure(P, "jobs in the table", 82_247, "jobs", POLLUX, C, "jobs.count"),
    _pct(P, "1-GPU jobs", 93.17, "size.jobs_pct.1", POLLUX, tolerance=0.005),
    _pct(P, "2-GPU jobs", 2.21, "size.jobs_pct.2", POLLUX, tolerance=0.005),
    _pct(P, "4-GPU jobs", 2.27, "size.jobs_pct.4", POLLUX, tolerance=0.005),
    _pct(P, "8-GPU jobs", 2.00, "size.jobs_pct.8", POLLUX, tolerance=0.005),
    _pct(P, "jobs with > 8 GPUs", 0.35, "size.jobs_pct.>8", POLLUX, tolerance=0.005),
    PublishedFigure(P, "mean GPUs per job", 1.304, "GPUs", POLLUX, C, "jobs.mean_gpus", 0.0005),
    PublishedFigure(P, "duration p50", 1_144, "s", POLLUX, C, "duration.p50_s", 0.5),
    PublishedFigure(P, "duration p90", 11_265, "s", POLLUX, C, "duration.p90_s", 0.5),
    PublishedFigure(P, "duration p99", 254_758, "s", POLLUX, C, "duration.p99_s", 0.5),
    PublishedFigure(P, "duration mean", 13_136, "s", POLLUX, C, "duration.mean_s", 0.5),
    _pct(P, "jobs running > 1 day", 3.17, "duration.over_1_day_pct", POLLUX, tolerance=0.005),
    _pct(P, "GPU-time share, 1-GPU jobs", 18.1, "size_bucket.gpu_time_pct.1", POLLUX),
    _pct(P, "GPU-time share, 2-4-GPU jobs", 19.9, "size_bucket.gpu_time_pct.2-4", POLLUX),
    _pct(P, "GPU-time share, 5-8-GPU jobs", 48.4, "size_bucket.gpu_time_pct.5-8", POLLUX),
    _pct(P, "GPU-time share, > 8-GPU jobs", 13.6, "size.gpu_time_pct.>8", POLLUX),
    _pct(P, "jobs in VC 6214e9", 50.1, "tenant.jobs_pct.6214e9", POLLUX),
    _pct(P, "jobs in VC 11cb48", 19.6, "tenant.jobs_pct.11cb48", POLLUX),
    _pct(P, "jobs in VC 6c71a0", 12.1, "tenant.jobs_pct.6c71a0", POLLUX),
    _pct(P, "jobs in VC b436b2", 9.0, "tenant.jobs_pct.b436b2", POLLUX),
    PublishedFigure(P, "mean GPUs per GPU job", 1.93, "GPUs", ACME_PHILLY, V, "jobs.mean_gpus",
                    0.005, why_not=SUBSET + "; it under-represents multi-GPU jobs"),
    PublishedFigure(P, "median runtime", 874, "s", ACME_PHILLY, V, "duration.p50_s", 0.5,
                    why_not=SUBSET + "; different population"),
    PublishedFigure(P, "mean runtime", 18_006, "s", ACME_PHILLY, V, "duration.mean_s", 0.5,
                    why_not=SUBSET + "; different population"),
    _na(P, "GPU jobs in the raw trace", 112_956, "jobs", ACME_PHILLY, V, SUBSET),
    _na(P, "jobs in the paper window", 96_260, "jobs", ATC19, T,
        SUBSET + "; the paper's window filter cannot be re-applied"),
    _na(P, "jobs killed or unsuccessful", 30, "%", ATC19 + " p. 948", V, NO_STATUS),
    _na(P, "final status Passed (by count)", 69.3, "%", ATC19, T, NO_STATUS),
    _na(P, "final status Passed (by GPU time)", 44.53, "%", ATC19, T, NO_STATUS),
    _na(P, "completed (by count, Acme)", 60.4, "%", ACME_PHILLY, V, NO_STATUS),
    _na(P, "GPU utilisation of GPUs in use", 52, "%", ATC19 + " p. 948", V,
        "per-minute GPU utilisation (cluster_gpu_util) is in the raw tarball, not stored"),
    _na(P, "median queueing delay", 189, "s", ACME_PHILLY, V,
        "the stored Philly tables carry no start times or queueing delay"),
    # --- Philly node sequence (occupancy) ----------------------------------------------------
    PublishedFigure(OCC, "active nodes, mean", 313, "nodes", "Philly data README (Helios "
                    "artifact node sequence)", C, "occupancy.active_mean", 0.5),
    PublishedFigure(OCC, "active nodes, max", 450, "nodes", "Philly data README", C,
                    "occupancy.active_max"),
    PublishedFigure(OCC, "total nodes, p50", 420, "nodes", "Philly data README", C,
                    "occupancy.total_p50"),
    PublishedFigure(OCC, "total nodes, max", 552, "nodes", "Philly data README", C,
                    "occupancy.total_max"),
    PublishedFigure(OCC, "mean active/total", 0.739, "ratio", "Philly data README", C,
                    "occupancy.ratio_mean", 0.0005),
    # --- Philly runtimes (Alibaba NSDI'22 file) ----------------------------------------------
    PublishedFigure(PR, "runtimes in the file", 83_154, "jobs", "Philly data README", C,
                    "jobs.count"),
    PublishedFigure(PR, "runtime p50", 19.8, "min", NSDI22 + " Fig. 4 data (traces.md §4.1)",
                    C, "duration.p50_s", 0.05, 1 / 60),
    PublishedFigure(PR, "runtime p90", 3.6, "h", NSDI22 + " Fig. 4 data (traces.md §4.1)",
                    C, "duration.p90_s", 0.05, 1 / 3600),
    PublishedFigure(PR, "runtime p99", 287_283, "s", "Philly data README", C,
                    "duration.p99_s", 0.5),
    PublishedFigure(PR, "runtime mean", 14_613, "s", "Philly data README", C,
                    "duration.mean_s", 0.5),
    PublishedFigure(PR, "Philly median runtime as quoted", 26, "min", "NSDI'22 comparison "
                    "(third-party quote, unreliable)", T, "duration.p50_s", 0.5, 1 / 60,
                    why_not="the quoted value does not match the file the paper plotted"),
    PublishedFigure(PR, "Philly p90 runtime as quoted", 25, "h", "NSDI'22 comparison "
                    "(third-party quote, unreliable)", T, "duration.p90_s", 0.5, 1 / 3600,
                    why_not="the quoted value does not match the file the paper plotted"),
    # --- Philly, Gavel distribution ----------------------------------------------------------
    PublishedFigure(PG, "duration p50", 14_398, "s", "Philly data README (Gavel)", C,
                    "duration.p50_s", 0.5),
    PublishedFigure(PG, "duration p90", 250_311, "s", "Philly data README (Gavel)", C,
                    "duration.p90_s", 0.5),
    _pct(PG, "1-GPU jobs", 76.2, "size.jobs_pct.1", "Philly data README (Gavel)"),
    _pct(PG, "8-GPU jobs", 12.5, "size.jobs_pct.8", "Philly data README (Gavel)"),
    # --- Microsoft ITP -----------------------------------------------------------------------
    PublishedFigure(("itp",), "jobs", 69_351, "jobs", ITP_UP, V, "jobs.count"),
    PublishedFigure(("itp",), "GPU-hours", 1_632_719.7, "GPU-h", ITP_UP, V, "jobs.gpu_hours",
                    0.05),
    PublishedFigure(("itp",), "submission span", 59.9, "days", ITP_C, C, "jobs.span_days", 0.05),
    _pct(("itp",), "1-GPU jobs", 83.17, "size.jobs_pct.1", ITP_C, tolerance=0.005),
    _pct(("itp",), "8-GPU jobs", 10.11, "size.jobs_pct.8", ITP_C, tolerance=0.005),
    PublishedFigure(("itp",), "duration p50", 10_537, "s", ITP_C, C, "duration.p50_s", 0.5),
    PublishedFigure(("itp",), "duration p90", 28_787, "s", ITP_C, C, "duration.p90_s", 0.5),
    PublishedFigure(("itp",), "duration p99", 210_110, "s", ITP_C, C, "duration.p99_s", 0.5),
    PublishedFigure(("itp",), "duration minimum", 600, "s", ITP_C, C, "duration.min_s"),
    _pct(("itp",), "GPU-time share, 5-8-GPU jobs", 49.2, "size_bucket.gpu_time_pct.5-8", ITP_C),
    _pct(("itp",), "GPU-time share, 17-64-GPU jobs", 23.2, "size_bucket.gpu_time_pct.17-64",
         ITP_C),
    PublishedFigure(("itp",), "jobs in cluster04 (largest)", 15_802, "jobs", ITP_C, C,
                    "tenant.jobs.cluster04"),
    PublishedFigure(("itp",), "jobs in cluster10 (smallest)", 260, "jobs", ITP_C, C,
                    "tenant.jobs.cluster10"),
    # --- Alibaba FGD 2023 --------------------------------------------------------------------
    *(
        _pct(("fgd",), f"tasks requesting {label} GPU", value, f"fgd.tasks_pct.{key}", FGD_T1,
             V, tolerance=0.1)
        for key, label, value in (("0", "0", 13.3), ("fractional", "a fraction of a", 37.8),
                                  ("1", "1", 48.0), ("2", "2", 0.2), ("4", "4", 0.2),
                                  ("8", "8", 0.5))
    ),
    *(
        _pct(("fgd",), f"GPU requests from {label}-GPU tasks", value,
             f"fgd.gpu_requests_pct.{key}", FGD_T1, V, tolerance=0.1)
        for key, label, value in (("0", "0", 0.0), ("fractional", "fractional", 28.5),
                                  ("1", "1", 64.2), ("2", "2", 0.5), ("4", "4", 1.0),
                                  ("8", "8", 5.8))
    ),
    PublishedFigure(("fgd",), "GPU tasks with a GPU-type constraint", 33, "%",
                    "FGD ATC'23 §6.5 (\"about 33%\")", V, "fgd.constrained_gpu_tasks_pct", 1.0,
                    why_not="gpu_spec is empty in the default task list; analyse the "
                    "openb_pod_list_gpuspec33.csv resampling (`fgd-gpuspec33`)",
                    variant="openb_pod_list_gpuspec33"),
    PublishedFigure(("fgd",), "nodes", 1_523, "nodes", FGD_C, C, "inventory.nodes"),
    PublishedFigure(("fgd",), "GPU nodes", 1_213, "nodes", FGD_C, C, "inventory.gpu_nodes"),
    PublishedFigure(("fgd",), "GPUs", 6_212, "GPUs", FGD_C, C, "inventory.gpus"),
    PublishedFigure(("fgd",), "G2 GPUs", 4_392, "GPUs", FGD_C, C, "inventory.gpus.G2"),
    PublishedFigure(("fgd",), "sharing tasks' gpu_milli, median", 470, "milli-GPU", FGD_C, C,
                    "fgd.sharing_gpu_milli_p50"),
    PublishedFigure(("fgd",), "runtime p50", 616, "s", FGD_C, C, "duration.p50_s", 0.5),
    PublishedFigure(("fgd",), "wait p50", 2, "s", FGD_C, C, "wait.p50_s", 0.5),
    PublishedFigure(("fgd",), "wait p99", 890, "s", FGD_C, C, "wait.p99_s", 0.5),
    _pct(("fgd",), "pods Running at trace end", 63.7, "status.jobs_pct.Running", FGD_C),
    _pct(("fgd",), "pods Failed at trace end", 22.9, "status.jobs_pct.Failed", FGD_C),
    _pct(("fgd",), "pods Pending at trace end", 11.0, "status.jobs_pct.Pending", FGD_C),
    # --- Alibaba PAI 2020 --------------------------------------------------------------------
    PublishedFigure(("pai-2020",), "GPUs", 6_742, "GPUs", PAI, V, "inventory.gpus"),
    PublishedFigure(("pai-2020",), "machines", 1_897, "machines", PAI, C, "inventory.nodes"),
    PublishedFigure(("pai-2020",), "CPU-only machines", 83, "machines", PAI, C,
                    "inventory.nodes.CPU"),
    *(
        PublishedFigure(("pai-2020",), f"{t} GPUs", n, "GPUs", PAI, C, f"inventory.gpus.{t}")
        for t, n in (("MISC", 2_240), ("P100", 1_596), ("V100M32", 1_080), ("T4", 994),
                     ("V100", 832))
    ),
    _na(("pai-2020",), "task runtime median", 23, "min", NSDI22, T, NO_JOBS_PAI),
    _na(("pai-2020",), "task runtime p90", 4.5, "h", NSDI22, T, NO_JOBS_PAI),
    _na(("pai-2020",), "GPU jobs", 1_037_085, "jobs", "Acme cluster_summary.csv, PAI row", V,
        NO_JOBS_PAI),
    _na(("pai-2020",), "median GPU request", 0.5, "GPUs", "Acme cluster_summary.csv, PAI row",
        V, NO_JOBS_PAI),
    # --- Alibaba spot 2026 -------------------------------------------------------------------
    PublishedFigure(("spot-2026",), "GPUs", 10_412, "GPUs", "spot-2026 data README", C,
                    "inventory.gpus"),
    PublishedFigure(("spot-2026",), "nodes", 4_278, "nodes", "spot-2026 data README", C,
                    "inventory.nodes"),
    *(
        PublishedFigure(("spot-2026",), f"{t} GPUs", n, "GPUs", "spot-2026 data README", C,
                        f"inventory.gpus.{t}")
        for t, n in (("A10", 2_494), ("A100-SXM4-80GB", 3_456), ("H800", 1_752),
                     ("A800-SXM4-80GB", 176))
    ),
    # --- Helios ------------------------------------------------------------------------------
    PublishedFigure(("helios",), "jobs", 3_362_981, "jobs", HELIOS, V, "helios.jobs"),
    PublishedFigure(("helios",), "GPU jobs", 1_580_464, "jobs", HELIOS, V, "helios.gpu_jobs"),
    PublishedFigure(("helios",), "GPUs", 6_220, "GPUs", HELIOS, V, "helios.gpus",
                    why_not="measured = sum of the four per-cluster rows"),
    PublishedFigure(("helios",), "mean GPUs per GPU job", 3.72, "GPUs", HELIOS, V,
                    "helios.mean_gpus", 0.005),
    PublishedFigure(("helios",), "mean GPU-job runtime", 6_652, "s", HELIOS, V,
                    "helios.mean_runtime_s", 0.5),
    PublishedFigure(("helios",), "mean GPU-job queueing", 862, "s", HELIOS, V,
                    "helios.mean_queue_s", 0.5),
    # Per-cluster rates are printed to 0.1 pp, so their weighted mean carries up to ±0.05 pp
    # of rounding on top of the total's own ±0.05 pp: hence ±0.1.
    *(
        _pct(("helios",), f"GPU jobs {k} (by count)", v, f"helios.status_count_pct.{k}", HELIOS,
             V, tolerance=0.1)
        for k, v in (("completed", 62.4), ("cancelled", 22.1), ("failed", 15.5))
    ),
    *(
        _pct(("helios",), f"GPU time of {k} jobs", v, f"helios.status_gpu_time_pct.{k}",
             "traces.md §4.3 (Helios artifact)", V, tolerance=0.05)
        for k, v in (("completed", 51.3), ("cancelled", 39.4), ("failed", 9.3))
    ),
    _na(("helios",), "median GPU-job runtime", 206, "s", HELIOS, V,
        "medians do not combine across clusters; needs the per-job logs (not stored)"),
    _na(("helios",), "FIFO/SJF average-JCT ratio, Saturn", 6.59, "x", "Helios SC'21 Table 3",
        T, "needs the per-job logs (not stored) and a simulator run"),
    PublishedFigure(("helios",), "Venus daily GPUs, min", 968, "GPUs", "Helios data README", C,
                    "helios.capacity.venus.min_gpus"),
    PublishedFigure(("helios",), "Venus daily GPUs, max", 1_264, "GPUs", "Helios data README",
                    C, "helios.capacity.venus.max_gpus"),
    PublishedFigure(("helios",), "Earth daily GPUs, min", 784, "GPUs", "Helios data README", C,
                    "helios.capacity.earth.min_gpus"),
    PublishedFigure(("helios",), "Earth daily GPUs, max", 1_232, "GPUs", "Helios data README",
                    C, "helios.capacity.earth.max_gpus"),
    # --- Sia workloads -----------------------------------------------------------------------
    PublishedFigure(("sia",), "jobs over all workloads", 12_480, "jobs", "Sia data README", C,
                    "jobs.count"),
)
