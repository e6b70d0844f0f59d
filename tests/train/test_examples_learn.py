"""The training examples visibly learn (issue 31, first hour: ``tessera train cnn`` went
2.2956 → 2.3137 over the README's 40 steps, ``tessera train transformer`` stayed near 1.39).
Every example ``tessera train`` offers is trained here as the README runs it — its default
global batch, learning rate and momentum, 40 steps on the example's own sample stream — and its
loss must fall clearly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessera.train.config import TrainConfig  # noqa: E402
from tessera.train.examples import (  # noqa: E402
    EXAMPLES,
    build_model,
    get_example,
    global_batch,
    loss_fn,
)

pytestmark = pytest.mark.torch

README_STEPS = 40


def _losses(name: str, steps: int = README_STEPS) -> list[float]:
    cfg = TrainConfig(name, "A100:1")
    example = get_example(name)
    model = build_model(example, cfg.seed, torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    losses = []
    for step in range(steps):
        x, y = global_batch(example, cfg.seed, step, cfg.global_batch, torch.float32)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_loss_falls_clearly_within_the_readme_steps(name: str) -> None:
    losses = _losses(name)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.5 * first, (name, losses[:5], losses[-5:])
