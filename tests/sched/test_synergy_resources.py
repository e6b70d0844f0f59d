"""Issue 33, part 2: Synergy's CPU/memory allocations as resource modes of any base policy.

Covers: the profile reader, the simulator's sensitivity speed, the ``resources=`` option, each
mode's allocation (proportional, GREEDY, TUNE with take-back, OPT's LP), and that no node is
ever given more CPUs or memory than it has, at any decision of a whole run.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import tessera.sched.core.decide as decide_mod
from tessera.errors import SpecError
from tessera.model.cluster import load_cluster
from tessera.model.jobs import JobId, JobSpec, JobState, Workload
from tessera.perf.host_profiles import synergy_profile, synergy_profiles
from tessera.sched.catalog import make_policy
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sched.resources.allocate import allocate_hosts
from tessera.sched.resources.opt import build_opt_lp, opt_hosts
from tessera.sched.resources.speed import host_speedup, node_sizes
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload.synergy import CARRIER_TYPE, generate_synergy_like

CLUSTER = load_cluster("synergy-128")
NODE = CLUSTER.nodes[0]


def _job(jid: str, model: str, submit_s: float = 0.0, hours: float = 1.0) -> JobSpec:
    w = generate_synergy_like(1, 9, 0)
    rate = w.jobs[0].total_steps / w.jobs[0].duration_hint_s  # type: ignore[operator]
    return JobSpec(JobId(jid), CARRIER_TYPE, 1, total_steps=hours * 3600 * rate,
                   submit_time_s=submit_s, model=model,
                   sensitivity=synergy_profile(model, 1).sensitivity)


def _on(node: str, cpus: float | None = None, mem: float = 62.5) -> Placement:
    p = Placement.of(NODE.flavor, ((node, 1),))
    return p if cpus is None else replace(p, host_by_node=((node, cpus, mem),))


# -- profiles ------------------------------------------------------------------------------


def test_every_profile_runs_at_one_at_the_proportional_share() -> None:
    for (model, gpus), prof in synergy_profiles().items():
        assert prof.sensitivity.speedup_at(3, 62.5) == pytest.approx(1.0), (model, gpus)


def test_profiles_carry_synergy_s_published_speedups() -> None:
    # the numbers: ResNet-18 2.4x at 9 CPUs, AlexNet 2.94x, M5 2.5x, language 1x
    assert synergy_profile("res18", 1).sensitivity.speedup_at(9, 62.5) == pytest.approx(2.4)
    assert synergy_profile("alexnet", 1).sensitivity.speedup_at(12, 62.5) == pytest.approx(2.94)
    assert synergy_profile("m5", 1).sensitivity.speedup_at(6, 62.5) == pytest.approx(2.5)
    gnmt = synergy_profile("gnmt", 1)
    assert gnmt.best_cpus_per_gpu == 1 and gnmt.sensitivity.speedup_at(24, 250) == 1.0


def test_unknown_model_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match="no Synergy profile for model 'resnet9000'"):
        synergy_profile("resnet9000", 1)


# -- speed in the simulator ----------------------------------------------------------------


def test_host_speedup_reads_what_the_gang_holds() -> None:
    j = _job("a", "res18")
    assert host_speedup(j, _on(NODE.node_id), CLUSTER) == pytest.approx(1.0)  # proportional
    assert host_speedup(j, _on(NODE.node_id, 9), CLUSTER) == pytest.approx(2.4)
    assert host_speedup(replace(j, sensitivity=None), _on(NODE.node_id, 9), CLUSTER) == 1.0


def test_a_lone_sensitive_job_runs_faster_with_its_demand_and_not_without_a_mode() -> None:
    w = Workload("one", (_job("a", "res18", hours=2.4),))
    plain = simulate(w, CLUSTER, "fifo").jobs[0].jct_s
    greedy = simulate(w, CLUSTER, "fifo:resources=greedy").jobs[0].jct_s
    assert plain is not None and greedy is not None
    assert plain == pytest.approx(2.4 * 3600, rel=0.02)  # proportional share: speed 1
    assert greedy == pytest.approx(3600, rel=0.02)  # 9 CPUs: 2.4x


# -- the option ------------------------------------------------------------------------------


def test_resources_option_rides_on_any_base_policy() -> None:
    for base in ("fifo", "srtf", "las", "finish_time_fairness"):
        p = make_policy(f"{base}:resources=tune")
        assert p.host_mode == "tune" and p.display_name == f"{base}:resources=tune"
    assert make_policy("fifo").host_mode is None


def test_bad_resource_modes_are_one_line_errors() -> None:
    with pytest.raises(SpecError, match="resources='lavish': choose one of proportional, "
                                        "greedy, tune, opt"):
        make_policy("fifo:resources=lavish")
    with pytest.raises(SpecError, match="neither share GPUs nor resize"):
        make_policy("gandiva:resources=tune")


# -- allocations -----------------------------------------------------------------------------


def _snapshot(running: list[tuple[JobSpec, Placement]], waiting: list[JobSpec],
              nodes: int = 16) -> Snapshot:
    views = tuple([JobView(s, JobState.RUNNING, 1.0, p) for s, p in running]
                  + [JobView(s, JobState.PENDING, 1.0) for s in waiting])
    return Snapshot(0.0, replace(CLUSTER, nodes=CLUSTER.nodes[:nodes]), views)


def _round(snap: Snapshot, new: dict[str, Placement], mode: str):  # type: ignore[no-untyped-def]
    placements = {j.spec.job_id: j.placement for j in snap.jobs if j.placement is not None}
    placements.update({JobId(k): v for k, v in new.items()})
    return allocate_hosts(snap, placements, tuple(JobId(k) for k in new), {}, mode)  # type: ignore[arg-type]


def test_proportional_gives_the_gpu_share_and_greedy_the_demand() -> None:
    snap = _snapshot([], [_job("a", "alexnet"), _job("b", "gnmt")])
    new = {"a": _on(NODE.node_id), "b": _on(NODE.node_id)}
    prop, _s, _p = _round(snap, new, "proportional")
    assert prop[JobId("a")].host_by_node == ((NODE.node_id, 3.0, 62.5),)
    greedy, started, _p = _round(snap, new, "greedy")
    assert greedy[JobId("a")].host_by_node[0][1] == 12.0  # AlexNet's demand
    assert greedy[JobId("b")].host_by_node[0][1] == 1.0  # GNMT needs one CPU
    assert started == (JobId("a"), JobId("b"))


def test_greedy_leaves_a_job_waiting_when_its_demand_is_not_free_and_says_why() -> None:
    hog = (_job("h", "shufflenet"), _on(NODE.node_id, 20))
    snap = _snapshot([hog], [_job("a", "alexnet")], nodes=1)
    placements, started, pending = _round(snap, {"a": _on(NODE.node_id)}, "greedy")
    assert started == () and JobId("a") not in placements
    assert str(pending[JobId("a")]) == (f"needs 12 CPUs on {NODE.node_id} for its best speed "
                                        "(resources=greedy); 4 free")


@pytest.mark.parametrize("mode", ["greedy", "tune"])
def test_a_new_gang_goes_to_a_node_where_its_demand_fits(mode: str) -> None:
    """Synergy places by the whole demand vector: the core put AlexNet on the node whose
    CPUs two older gangs hold (fewest free GPUs); GREEDY and TUNE move it to the fullest node
    that still has its 12 CPUs free."""
    two = CLUSTER.nodes[1].node_id
    hogs = [(_job("h1", "shufflenet", 0.0), _on(NODE.node_id, 12)),
            (_job("h2", "alexnet", 0.5), _on(NODE.node_id, 12))]
    snap = _snapshot(hogs, [_job("a", "alexnet", 1.0)], nodes=2)
    placements, started, _p = _round(snap, {"a": _on(NODE.node_id)}, mode)
    assert started == (JobId("a"),)
    assert placements[JobId("a")].gpus_by_node == ((two, 1),)
    assert placements[JobId("a")].host_by_node == ((two, 12.0, 62.5),)


def test_tune_moves_a_running_gang_to_a_node_where_its_demand_is_free() -> None:
    """Synergy re-places every job each round: a gang cut to its share on a node whose CPUs
    older gangs hold runs next round where its demand fits. Here it moves (a checkpoint and a
    restore) to the empty second node and gets its 9 CPUs there."""
    two = CLUSTER.nodes[1].node_id
    gangs = [(_job("o1", "alexnet", 0.0), _on(NODE.node_id, 12)),
             (_job("o2", "shufflenet", 0.5), _on(NODE.node_id, 9)),
             (_job("y", "res18", 1.0), _on(NODE.node_id, 3))]
    placements, started, _p = _round(_snapshot(gangs, [], nodes=2), {}, "tune")
    assert started == (JobId("y"),)
    assert placements[JobId("y")].host_by_node == ((two, 9.0, 62.5),)
    assert placements[JobId("o2")].host_by_node == ((NODE.node_id, 12.0, 62.5),)


def test_tune_trades_gpus_with_a_younger_gang_that_loses_nothing_at_its_share() -> None:
    """No GPU is free anywhere: a ResNet-18 cut to its share on a node whose CPUs older gangs
    hold trades GPUs with a younger GNMT (1 CPU, the same speed anywhere) on a node where its
    9 CPUs are free -- where Synergy's every-round re-packing would have put them."""
    two = CLUSTER.nodes[1].node_id
    older = [(_job(f"o{k}", "alexnet", 0.1 * k), _on(NODE.node_id, 12)) for k in range(2)]
    fill0 = [(_job(f"f{k}", "gnmt", 1.0 + k), _on(NODE.node_id, 0, 20.0)) for k in range(5)]
    fill1 = [(_job(f"g{k}", "gnmt", 10.0 + k), _on(two, 1, 20.0)) for k in range(8)]
    cut = (_job("r", "res18", 0.5), _on(NODE.node_id, 0))
    snap = _snapshot([*older, cut, *fill0, *fill1], [], nodes=2)
    placements, started, _p = _round(snap, {}, "tune")
    assert placements[JobId("r")].host_by_node == ((two, 9.0, 62.5),)
    assert set(started) == {JobId("r"), JobId("g0")}  # the oldest GNMT on node 2 took its GPU
    assert placements[JobId("g0")].gpus_by_node == ((NODE.node_id, 1),)


def test_tune_resets_the_peer_with_most_cpus_per_gpu_whole_to_its_share() -> None:
    """Synergy's peer adjustment: when not even the newcomer's share is free, the gangs served
    before it are reset *whole* to their fair share (most CPUs per GPU first, the older on a
    tie) until it is -- not cut by just what the newcomer needs."""
    hogs = [(_job("h1", "alexnet", 0.0), _on(NODE.node_id, 12)),
            (_job("h2", "shufflenet", 1.0), _on(NODE.node_id, 12))]
    snap = _snapshot(hogs, [_job("a", "res18", 2.0)], nodes=1)
    placements, started, _p = _round(snap, {"a": _on(NODE.node_id)}, "tune")
    assert started == (JobId("a"),)
    cpus = {k: placements[JobId(k)].host_by_node[0][1] for k in ("h1", "h2", "a")}
    assert cpus == {"h1": 3.0, "h2": 12.0, "a": 3.0}


def test_tune_deals_every_running_gang_again_oldest_first_at_each_decision() -> None:
    """Synergy re-allocates every job each round in arrival order: the oldest gang, cut to its
    share earlier, gets its demand back from younger gangs even when nothing new starts."""
    old = (_job("o", "res18", 0.0), _on(NODE.node_id, 3))
    young = (_job("y", "alexnet", 1.0), _on(NODE.node_id, 12))
    younger = (_job("z", "res18", 2.0), _on(NODE.node_id, 9))
    snap = _snapshot([old, young, younger], [], nodes=1)
    placements, started, _p = _round(snap, {}, "tune")
    assert started == ()
    cpus = {k: placements[JobId(k)].host_by_node[0][1] for k in ("o", "y", "z")}
    assert cpus == {"o": 9.0, "y": 12.0, "z": 3.0}


def test_tune_gives_the_share_or_the_demand_never_a_point_in_between() -> None:
    """A gang whose demand is not free gets its fair share (speed 1.0), as Synergy's TUNE does,
    not the fastest profile point that happens to fit."""
    hog = (_job("h", "res18", 0.0), _on(NODE.node_id, 9))
    snap = _snapshot([hog], [_job("a", "mobilenet", 1.0), _job("b", "alexnet", 2.0)], nodes=1)
    new = {"a": _on(NODE.node_id), "b": _on(NODE.node_id)}
    placements, _s, _p = _round(snap, new, "tune")
    cpus = {k: placements[JobId(k)].host_by_node[0][1] for k in ("h", "a", "b")}
    assert cpus == {"h": 9.0, "a": 6.0, "b": 3.0}  # b: 12 asked, 9 free -> its share


def test_synergy_workload_jobs_ask_for_synergy_s_simulator_memory_demand() -> None:
    """AlexNet asks for 125 GB per GPU, M5 187.5, a language model 20 (Synergy's model files),
    so GREEDY cannot start an M5 where less memory is free."""
    w = generate_synergy_like(40, 9, 0, split=(40, 30, 30))
    by_model = {j.model: j for j in w.jobs}
    snap = _snapshot([], [by_model["alexnet"], by_model["gnmt"]])
    placements, _s, _p = _round(snap, {by_model["alexnet"].job_id: _on(NODE.node_id),
                                       by_model["gnmt"].job_id: _on(NODE.node_id)}, "greedy")
    assert placements[by_model["alexnet"].job_id].host_by_node[0][1:] == (12.0, 125.0)
    assert placements[by_model["gnmt"].job_id].host_by_node[0][1:] == (1.0, 20.0)
    hog = (_job("h", "gnmt"), _on(NODE.node_id, 1, 400.0))
    m5 = by_model["m5"]
    placements, started, _p = _round(_snapshot([hog], [m5], nodes=1),
                                     {m5.job_id: _on(NODE.node_id)}, "greedy")
    assert started == ()  # 187.5 GB asked, 100 free


def test_opt_lp_shares_a_node_by_sensitivity_and_bounds_the_rounding() -> None:
    gangs = [(_job("a", "alexnet"), _on(NODE.node_id)), (_job("b", "gnmt"), _on(NODE.node_id)),
             (_job("c", "res18"), _on(NODE.node_id))]
    free = {NODE.node_id: [15.0, 500.0]}
    got = opt_hosts(gangs, free, node_sizes(CLUSTER))
    cpus = {k: v[0][1] for k, v in got.items()}
    assert cpus["b"] == 1.0 and sum(cpus.values()) <= 15.0 + 1e-9
    lp = build_opt_lp(gangs, free, node_sizes(CLUSTER))
    rows, cols, nnz = lp.size
    assert rows == 3 + 2 and cols > 3 and nnz > cols


def test_no_node_is_ever_given_more_cpus_or_memory_than_it_has(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every decision of whole runs, every mode: what running and started gangs hold on a node
    (host_by_node, else their proportional share) never exceeds its CPUs or memory."""
    real = decide_mod.allocate_hosts
    checked = []
    sizes = node_sizes(CLUSTER)

    def checking(snapshot, placements, started, pending, mode, solver=None):  # type: ignore[no-untyped-def]
        out = real(snapshot, placements, started, pending, mode, solver)
        used: dict[str, list[float]] = {}
        for p in out[0].values():
            for n, c, m in p.host_by_node or ((n, 3.0 * g, 62.5 * g) for n, g in p.gpus_by_node):
                u = used.setdefault(n, [0.0, 0.0])
                u[0] += c
                u[1] += m
        for n, (c, m) in used.items():
            assert c <= sizes[n][1] + 1e-6 and m <= sizes[n][2] + 1e-6, (mode, n, c, m)
        checked.append(mode)
        return out

    monkeypatch.setattr(decide_mod, "allocate_hosts", checking)
    w = generate_synergy_like(300, 30, 3, multi_gpu=True)
    small = load_cluster("synergy-128")
    small = replace(small, nodes=small.nodes[:4])
    for mode in ("proportional", "greedy", "tune", "opt"):
        r = simulate(w, small, f"fifo:resources={mode}")
        assert r.summary.succeeded == 300
    assert set(checked) == {"proportional", "greedy", "tune", "opt"}


def test_tune_re_times_the_gang_it_takes_cpus_from() -> None:
    """Two hogs fill a node's CPUs; a third job makes TUNE take 3 back from one of them,
    which then runs slower than alone (the simulator re-timed it, no restart)."""
    one = load_cluster("synergy-128")
    one = replace(one, nodes=one.nodes[:1])
    hogs = (_job("0", "alexnet", 0.0, 10.0), _job("1", "shufflenet", 1.0, 10.0))
    late = _job("2", "res18", 3600.0, 1.0)
    alone = simulate(Workload("w", hogs), one, "fifo:resources=tune")
    shared = simulate(Workload("w", (*hogs, late)), one, "fifo:resources=tune")
    jct = {r.job_id: r.jct_s for r in alone.jobs}
    jct2 = {r.job_id: r.jct_s for r in shared.jobs}
    assert jct2["0"] > jct["0"] * 1.01 or jct2["1"] > jct["1"] * 1.01  # type: ignore[operator]
    assert all(r.preemptions == 0 for r in shared.jobs)


def test_tessera_policies_shows_the_resource_modes() -> None:
    from typer.testing import CliRunner

    from tessera.cli import app

    out = CliRunner().invoke(app, ["policies"], terminal_width=200).output
    assert "resources=" in out
    for mode in ("proportional", "Synergy-GREEDY", "Synergy-TUNE", "Synergy-OPT"):
        assert mode in out


def _fig8_mean_jct_h() -> dict[str, float]:
    """Mean JCT (h) per mode, 1,500 single-GPU jobs at 9 jobs/h on synergy-128, jobs 500-1499
    measured, seed 0 (computed once per test session)."""
    if not _FIG8:
        w = generate_synergy_like(1500, 9, 0)
        for mode in ("proportional", "greedy", "tune"):
            r = simulate(w, CLUSTER, f"fifo:resources={mode}")
            jct = [x.jct_s for x in r.jobs
                   if x.jct_s is not None and 500 <= int(x.job_id) < 1500]
            assert len(jct) == 1000
            _FIG8[mode] = sum(jct) / len(jct) / 3600
    return _FIG8


_FIG8: dict[str, float] = {}


@pytest.mark.slow
def test_fig8_ordering_greedy_and_tune_beat_proportional_at_9_jobs_per_hour() -> None:
    """Synergy's Fig. 8 at its load: GREEDY and TUNE both well below proportional."""
    mean_h = _fig8_mean_jct_h()
    assert mean_h["greedy"] <= mean_h["proportional"], mean_h
    assert mean_h["tune"] <= mean_h["proportional"], mean_h


_FIG8_TWIN: dict[str, float] = {}


def _fig8_twin_mean_jct_h() -> dict[str, float]:
    """As :func:`_fig8_mean_jct_h`, in Synergy's round model: ``repack=round``, 300 s rounds,
    moves free of checkpoint and restore (:mod:`tessera.sched.resources.repack`)."""
    if not _FIG8_TWIN:
        w = generate_synergy_like(1500, 9, 0)
        cfg = SimConfig(scheduler=SchedulerSettings(mode="rounds", round_s=300.0,
                                                    checkpoint_s=0.0, restore_s=0.0))
        for mode in ("proportional", "greedy", "tune"):
            r = simulate(w, CLUSTER, f"fifo:resources={mode}:repack=round", cfg)
            jct = [x.jct_s for x in r.jobs
                   if x.jct_s is not None and 500 <= int(x.job_id) < 1500]
            assert len(jct) == 1000
            _FIG8_TWIN[mode] = sum(jct) / len(jct) / 3600
    return _FIG8_TWIN


@pytest.mark.slow
def test_fig8_ordering_tune_at_most_greedy_at_9_jobs_per_hour() -> None:
    """Synergy's Fig. 8 ordering TUNE <= GREEDY <= proportional, in Synergy's own round model
    (every gang dealt again each 300 s round, free). Measured on this setting: TUNE 17.07 h,
    GREEDY 17.17 h, proportional 27.46 h. In Tessera's default (running gangs keep their
    GPUs, moves pay 60 s) TUNE <= GREEDY does not hold here: 16.80 vs 16.75 h
    (``docs/scheduler.md``, "Synergy's round as a twin setting")."""
    mean_h = _fig8_twin_mean_jct_h()
    assert mean_h["tune"] <= mean_h["greedy"] <= mean_h["proportional"], mean_h


def test_modes_on_preemptive_policies_finish_every_job_and_proportional_changes_nothing() -> None:
    """A preemptive full round re-places kept gangs with new placement objects: they must keep
    their CPUs (not count as moved), and a GREEDY mover must not be left nowhere."""
    w = generate_synergy_like(200, 30, 5, multi_gpu=True)
    small = replace(CLUSTER, nodes=CLUSTER.nodes[:4])
    for base in ("las", "drf", "tetris"):
        plain = simulate(w, small, base)
        for mode in ("proportional", "greedy", "tune", "opt"):
            r = simulate(w, small, f"{base}:resources={mode}")
            assert r.summary.succeeded == 200, (base, mode)
            if mode == "proportional":
                assert r.summary.avg_jct_s == plain.summary.avg_jct_s
                assert sum(x.migrations for x in r.jobs) == sum(x.migrations for x in plain.jobs)


def test_drf_and_tetris_order_by_synergy_s_demand_vectors() -> None:
    import random

    from tessera.perf.profiles import default_throughputs
    from tessera.sched.core.oracle import ThroughputOracle
    from tessera.sched.core.policy import PolicyContext

    hungry, light = _job("a", "alexnet", 0.0), _job("b", "gnmt", 1.0)
    snap = _snapshot([], [hungry, light])
    ctx = PolicyContext(snap, ThroughputOracle(default_throughputs(), CLUSTER), random.Random(0))
    for name in ("drf", "tetris"):
        order = [jid for jid, _f in make_policy(name).rank(ctx).candidates]
        assert order[0] == "b", name  # GNMT's 1 CPU is a smaller share than AlexNet's 12
    assert next(jid for jid, _f in make_policy("fifo").rank(ctx).candidates) == "a"
