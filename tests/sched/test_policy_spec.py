"""Policy specs: a policy's options ride on its name (``hetero_pack:short_first=0.1``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tessera.sched
import tessera.sched.core.policy as policy_module
from tessera.errors import SpecError
from tessera.model.cluster import load_cluster
from tessera.sched.catalog import list_policies, make_policy, policy_options
from tessera.sched.core.policy import parse_policy_spec, split_policies
from tessera.sched.policies.hetero_pack import HeteroPackConfig
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import generate_gavel_like


def test_options_on_the_name_set_the_config_and_label_the_policy() -> None:
    p = make_policy("hetero_pack:short_first=0.1:move_slow=false")
    assert isinstance(p.config, HeteroPackConfig)
    assert p.config.short_first == 0.1 and p.config.move_slow is False
    assert p.name == "hetero_pack"
    assert p.display_name == "hetero_pack:short_first=0.1:move_slow=false"
    assert make_policy("hetero_pack").display_name == "hetero_pack"


def test_the_label_builds_the_same_policy_again() -> None:
    for spec in ("hetero_gittins:prior_minutes=[[1,30,3000]]:prior_points=64",
                 "max_min_fairness-agnostic", "hetero_srpt-agnostic:aging_s=3600"):
        p = make_policy(spec)
        again = make_policy(p.display_name)
        assert again.config == p.config and again.agnostic == p.agnostic
        assert again.display_name == p.display_name
    p = make_policy("hetero_gittins:prior_minutes=[[1,30,3000]]")
    assert p.config.prior_minutes == ((1.0, 30.0, 3000.0),)  # type: ignore[attr-defined]
    assert make_policy("hetero_srpt-agnostic:aging_s=3600").agnostic


def test_explicit_options_add_to_the_spec_and_to_its_label() -> None:
    p = make_policy("hetero_pack:min_gain=0.2", {"short_first": 0.05})
    assert p.config.min_gain == 0.2 and p.config.short_first == 0.05  # type: ignore[attr-defined]
    assert p.display_name == "hetero_pack:min_gain=0.2:short_first=0.05"


def test_text_values_stay_text_and_objects_keep_their_colons() -> None:
    p = make_policy("goodput_srpt:remaining=declared")
    assert p.config.remaining == "declared"  # type: ignore[attr-defined]
    assert p.display_name == "goodput_srpt:remaining=declared"
    assert parse_policy_spec('x:s="7"')[1] == {"s": "7"}
    assert make_policy("hetero_pack", {"scan_factor": 3}).display_name == (
        "hetero_pack:scan_factor=3")
    assert parse_policy_spec('x:obj={"a":1,"b":[1,2]}:y=2') == (
        "x", {"obj": {"a": 1, "b": [1, 2]}, "y": 2})


def test_values_are_json_where_they_parse_else_text() -> None:
    assert parse_policy_spec("x:a=1:b=true:c=[1,2]:d=hello:e=") == (
        "x", {"a": 1, "b": True, "c": [1, 2], "d": "hello", "e": ""})


def test_commas_inside_brackets_do_not_split_a_policy_list() -> None:
    assert split_policies(" fifo, hetero_gittins:prior_minutes=[[0.8,30,1000],[0.2,1000,"
                          "10000]] ,las,") == [
        "fifo", "hetero_gittins:prior_minutes=[[0.8,30,1000],[0.2,1000,10000]]", "las"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [("hetero_pack:short_firs=0.1", "unknown option 'short_firs' (its options: restart_s"),
     ("hetero_pack:short_first=2", "option 'short_first': Input should be less than or equal"),
     ("hetero_pack:short_first=fast", "option 'short_first': Input should be a valid number"),
     ("hetero_pack:short_first", "options are written name:key=value"),
     ("hetero_pack:a=1:a=2", "option 'a' given twice"),
     ("fifo:anything=1", "unknown option 'anything' (its options: none"),
     ("fofo:x=1", "unknown policy 'fofo'")],
)
def test_bad_options_are_refused_with_one_clear_line(spec: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        make_policy(spec)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_every_policy_lists_its_options_with_defaults() -> None:
    options = {o: (d, what) for o, d, what in policy_options("hetero_pack-agnostic")}
    assert options["short_first"][0] == "0.0" and "α" in options["short_first"][1]
    assert options["prior_minutes"][0].startswith("[[0.8,")
    assert policy_options("fifo") == []


def test_a_simulation_runs_the_options_and_is_labelled_by_the_spec() -> None:
    """Two runs of one policy side by side, one with an option that changes what it does:
    ``min_gain`` so high that no pair is ever worth forming."""
    wl = generate_gavel_like(30, jobs_per_hour=30, seed=1, multi_gpu=False)
    cluster = load_cluster("v100:2,p100:2,k80:2", gpus_per_server=1)
    cfg = SimConfig(compat="gavel", compat_solver="ecos")
    plain = simulate(wl, cluster, "hetero_pack", cfg)
    never = simulate(wl, cluster, "hetero_pack:min_gain=1000", cfg)
    assert never.policy == "hetero_pack:min_gain=1000" and plain.policy == "hetero_pack"
    unpacked = simulate(wl, cluster, "hetero_gittins", cfg)
    assert plain.summary.avg_jct_s < never.summary.avg_jct_s
    assert never.summary.avg_jct_s != unpacked.summary.avg_jct_s  # flavors still its own


def test_the_catalog_lists_every_policy_in_the_order_tessera_policies_shows() -> None:
    """One explicit list (``tessera.sched.catalog``), in the order ``tessera policies`` always
    showed: Tessera's and the literature's policies, then Gavel's own (``--compat gavel``)."""
    assert [name for name, _ in list_policies()] == [
        "fifo", "max_min_fairness", "finish_time_fairness", "min_makespan",
        "max_sum_throughput", "goodput_srpt", "hetero_srpt", "hetero_gittins", "hetero_pack",
        "las", "pollux", "sjf", "srtf", "sia", "drf", "tetris", "hetero_host",
        "max_min_fairness_packed",
        "fifo_packed",
        "min_total_duration", "allox", "gandiva"]


def test_importing_a_policy_module_registers_nothing() -> None:
    """No registry is filled as a side effect of an import: no module of ``sched/`` but the
    catalog calls ``.register(`` (the catalog is the one list)."""
    sched = Path(tessera.sched.__file__).parent
    registering = sorted(str(p.relative_to(sched)) for p in sched.rglob("*.py")
                         if ".register(" in p.read_text() and p.name != "catalog.py")
    assert registering == []
    assert not hasattr(policy_module, "POLICIES")
