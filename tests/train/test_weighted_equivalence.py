"""The key correctness property: heterogeneous DP equals single-process training.

With uneven local batches ``b_i`` and gradients weighted by ``b_i/B``, every update must equal the
update on the concatenated global batch. We check it over gloo in float64 to 1e-9, and check that
the naive ``1/N`` average (what plain DDP would do with these batches) is measurably wrong, so
the comparison has teeth.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessera.train.checkpoint import parameters_of  # noqa: E402
from tessera.train.config import TrainConfig  # noqa: E402
from tessera.train.emulation import EmulationConfig  # noqa: E402
from tessera.train.examples import build_model, get_example, global_batch, loss_fn  # noqa: E402
from tessera.train.launcher import launch  # noqa: E402
from tessera.train.worker import reference_training  # noqa: E402

TOL = 1e-9


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.torch
@pytest.mark.slow
def test_uneven_split_over_gloo_equals_single_process(tmp_path):
    cfg = TrainConfig(
        "mlp", "A100:1,V100:1,T4:1", global_batch=13, steps=4, split="fixed",
        fixed_split=(7, 4, 2), dtype="float64", speeds=(3.0, 1.5, 1.0),
        emulation=EmulationConfig(overhead_s=0.0, per_sample_s=0.0002),
    )
    result = launch(cfg, run_dir=tmp_path, timeout_s=240)
    assert [r["split"] for r in result.log] == [[7, 4, 2]] * 4
    hetero = parameters_of(tmp_path / "checkpoints")
    reference = reference_training(cfg).state_dict()
    assert _max_abs_diff(hetero, reference) < TOL
    # The loss the ranks agree on is the global-batch loss; it must have gone down.
    assert result.log[-1]["loss"] < result.log[0]["loss"]


@pytest.mark.torch
def test_naive_average_of_uneven_batches_is_biased():
    """Plain DDP's 1/N mean of local mean gradients differs from the full-batch gradient."""
    example = get_example("mlp")
    model = build_model(example, seed=0, dtype=torch.float64)
    x, y = global_batch(example, 0, 0, 13, torch.float64)
    params = list(model.parameters())

    def grad(xs, ys):
        model.zero_grad()
        loss_fn(model(xs), ys).backward()
        return torch.cat([p.grad.reshape(-1).clone() for p in params])

    full = grad(x, y)
    parts = [grad(x[a:b], y[a:b]) for a, b in ((0, 7), (7, 11), (11, 13))]
    weighted = sum(g * (n / 13) for g, n in zip(parts, (7, 4, 2), strict=True))
    naive = sum(parts) / 3
    assert float((weighted - full).abs().max()) < 1e-12
    assert float((naive - full).abs().max()) > 1e-3
