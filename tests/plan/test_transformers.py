"""Today's transformers as layer chains: sizes checked against the published ones."""

from __future__ import annotations

import pytest

from tessera.plan.models import coarsen, layered_model
from tessera.plan.transformers import (
    PUBLISHED_PARAMS,
    SPECS,
    decoder,
    train_flops_per_token,
    vit_large,
)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_parameter_counts_match_published(name: str) -> None:
    # published sizes are rounded to two significant figures (1.3B, 2.7B, 6.7B ...)
    assert decoder(SPECS[name]).params == pytest.approx(PUBLISHED_PARAMS[name], rel=0.02)


def test_llama_counts_match_the_exact_published_figures() -> None:
    """LLaMA-7B 6,738,415,616 and Llama-2-70B 68,976,648,192 parameters (model cards);
    the difference is the norms' few thousand parameters."""
    assert decoder(SPECS["llama-7b"]).params == pytest.approx(6_738_415_616, rel=1e-5)
    assert decoder(SPECS["llama-70b"]).params == pytest.approx(68_976_648_192, rel=1e-5)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_training_flops_follow_the_6n_accounting(name: str) -> None:
    """Per token: 6·(parameters that multiply activations) + 12·layers·seq·hidden."""
    spec, model = SPECS[name], decoder(SPECS[name])
    lookup_params = spec.vocab * spec.hidden + (spec.seq * spec.hidden if spec.style == "gpt"
                                                else 0)
    tied_head = spec.vocab * spec.hidden if spec.style == "gpt" else 0
    matmul = model.params - lookup_params + tied_head
    expect = 6 * matmul + 12 * spec.layers * spec.seq * spec.hidden
    # norms (2h per block) are counted as parameters but do no matrix multiply
    assert train_flops_per_token(model, spec.seq) == pytest.approx(expect, rel=1e-3)


def test_vit_large() -> None:
    v = vit_large()
    assert v.params == pytest.approx(PUBLISHED_PARAMS["vit-l16"], rel=0.01)
    assert sum(x.fwd_flops for x in v.layers) / 2 == pytest.approx(61.6e9, rel=0.01)  # GMACs


@pytest.mark.parametrize("name", ["llama-7b", "llama-70b", "gpt3-1.3b", "vit-l16"])
def test_lookup_by_name(name: str) -> None:
    assert layered_model(name).name == name


def test_coarsen_keeps_totals_and_maps_back() -> None:
    m = decoder(SPECS["llama-70b"])
    c = coarsen(m, 24)
    assert c.n_layers <= 24 and c.params == pytest.approx(m.params)
    assert c.train_flops_per_sample == pytest.approx(m.train_flops_per_sample)
    assert c.original_layer(0) == 0 and c.original_layer(c.n_layers) == m.n_layers
    assert coarsen(m, 200) is m
