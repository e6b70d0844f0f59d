"""The policy's memory survives a service restart, and a tampered memory is refused."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pickle
import random
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from tessera.live import memory
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.elastic.policy import ElasticMemory
from tessera.sched.gavel.mechanism import RoundState, Shares
from tests.live.helpers import make_service

ADMIN = Principal("admin", None)


def _service(state: Path, policy: str) -> LiveService:
    return make_service(state, cluster="v100:2,t4:2", gpus_per_server=2, policy=policy,
                        settings=SchedulerSettings(round_s=100.0), start=False)


def _submit(svc: LiveService, name: str) -> str:
    req = parse_request(f"name: {name}\nqueue: team-a\ngpus: 1\ncommand: sleep 600")
    return svc.submit(req, ADMIN).job_id


def test_round_state_round_trips() -> None:
    shares = Shares(("j-1", "j-2"), ("v100", "t4"), np.array([[0.5, 0.25], [0.5, 0.75]]))
    state = RoundState(shares, 12.5, MappingProxyType({"j-1": (("v100", 3.0),)}),
                       frozenset({"j-1", "j-2"}))
    back = memory.decode(memory.encode(state))
    assert isinstance(back, RoundState)
    assert back.shares.jobs == shares.jobs and np.array_equal(back.shares.x, shares.x)
    assert back.reset_s == 12.5 and back.jobs == state.jobs
    assert dict(back.run_at_reset) == {"j-1": (("v100", 3.0),)}
    offsets = memory.decode(memory.encode(MappingProxyType({"j-9": 7.0})))
    assert isinstance(offsets, MappingProxyType) and dict(offsets) == {"j-9": 7.0}
    rng = random.Random(5)
    rng.random()
    assert memory.decode(memory.encode(rng)).random() == rng.random()  # type: ignore[attr-defined]


def test_memory_survives_a_restart(tmp_path: Path) -> None:
    svc = _service(tmp_path / "state", "max_min_fairness")
    for name in "abc":
        _submit(svc, name)
    svc.round(1000.0)
    before = svc.policy_state
    assert isinstance(before, RoundState)
    svc.store.close()

    again = _service(tmp_path / "state", "max_min_fairness")
    after = again.policy_state
    assert isinstance(after, RoundState)
    assert after.shares.jobs == before.shares.jobs
    assert np.array_equal(after.shares.x, before.shares.x)
    assert (after.reset_s, after.jobs, dict(after.run_at_reset)) == \
        (before.reset_s, before.jobs, dict(before.run_at_reset))


def test_another_policy_starts_afresh(tmp_path: Path) -> None:
    svc = _service(tmp_path / "state", "max_min_fairness")
    _submit(svc, "a")
    svc.round(1000.0)
    assert svc.policy_state is not None
    svc.store.close()
    assert _service(tmp_path / "state", "finish_time_fairness").policy_state is None


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return os.system, ("echo pwned",)


def test_a_tampered_memory_is_refused_and_dropped(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(pickle.UnpicklingError, match=r"(os|posix)\.system"):
        memory.decode(pickle.dumps(_Evil()))
    svc = _service(tmp_path / "state", "fifo")
    with svc.store.tx() as db:
        db.execute("INSERT OR REPLACE INTO policy_memory VALUES (?, ?, ?)",
                   (svc.policy.display_name, 1.0, pickle.dumps(_Evil())))
    svc.store.close()
    with caplog.at_level(logging.WARNING, logger="tessera.live"):
        again = _service(tmp_path / "state", "fifo")
    assert again.policy_state is None
    assert "dropping the saved memory of policy fifo" in caplog.text


#: ``memory.encode(ElasticMemory(restarts={"j-1": 3}, largest_run={"j-1": 4}))`` as the service
#: stored it before ``sched/`` went into sub-packages (written by main at a1eedee, where the class
#: lived in ``tessera.sched.elastic_policy``).
ELASTIC_MEMORY_A1EEDEE = bytes.fromhex(
    "8005954c000000000000008c1c746573736572612e73636865642e656c61737469635f706f6c696379948c0d"
    "456c61737469634d656d6f72799493942981945d94287d948c036a2d31944b03737d9468064b047365622e")


def test_a_memory_stored_before_the_package_move_still_loads() -> None:
    """Sia's and Pollux's memory (restart counts, the most GPUs a job ran on) stored by the
    previous version names a module that moved; after an upgrade it loads, not silently
    afresh."""
    got = memory.decode(ELASTIC_MEMORY_A1EEDEE)
    assert isinstance(got, ElasticMemory)
    assert dict(got.restarts) == {"j-1": 3} and dict(got.largest_run) == {"j-1": 4}


@pytest.mark.parametrize("old", sorted(memory.MOVED_MODULES))
def test_every_moved_module_names_where_it_went(old: str) -> None:
    """Each old name is gone and its new one imports (a map that points nowhere helps no
    restart)."""
    new = memory.MOVED_MODULES[old]
    assert importlib.import_module(new).__name__ == new
    spec = importlib.util.find_spec(old)
    assert spec is None or spec.submodule_search_locations is not None, old  # gone, or a package


def test_a_gavel_memory_from_before_flavors_were_typed_starts_afresh_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """max_min_fairness's RoundState as main a1eedee stored it (its flavors were names:
    ``tests/data/live/roundstate-a1eedee.pickle``, written by that version's service after
    one round of three jobs on v100:2,t4:2) no longer matches the catalog's flavors: it is
    refused and dropped with a warning naming the reason, not read with its columns
    misaligned."""
    blob = (Path(__file__).resolve().parents[1] / "data" / "live"
            / "roundstate-a1eedee.pickle").read_bytes()
    with pytest.raises(pickle.UnpicklingError, match="memory format 1"):
        memory.decode(blob)
    svc = _service(tmp_path / "state", "max_min_fairness")
    with svc.store.tx() as db:
        db.execute("INSERT OR REPLACE INTO policy_memory VALUES (?, ?, ?)",
                   ("max_min_fairness", 5.0, blob))
    svc.store.close()
    with caplog.at_level(logging.WARNING, logger="tessera.live"):
        again = _service(tmp_path / "state", "max_min_fairness")
    assert again.policy_state is None
    assert "memory format 1" in caplog.text and "starts afresh" in caplog.text
    again.store.close()
