"""Small, real training examples on synthetic data: an MLP, a CNN and a transformer.

Each example is a model plus a deterministic data source: an endless **sample stream**, where
sample ``k`` is a pure function of ``(seed, k)`` (generated in blocks of :data:`BLOCK_SAMPLES`,
block ``j`` from a generator seeded with ``(seed, j)``). A step that starts after ``c`` samples
were consumed trains on samples ``[c, c + B)`` of the stream, and rank i keeps its slice
``[c + offset_i, c + offset_i + b_i)``. So the samples a step trains on depend neither on how the
batch is split nor on how many ranks there are, which is what lets a heterogeneous run be
compared with single-process training on the concatenated batch, lets a resumed run see exactly
the data the uninterrupted run saw, and lets a run resumed at another world size or global batch
continue the same stream where the checkpoint left it (:mod:`tessera.train.resize`).

Labels come from a fixed random "teacher" (the MLP), fixed class templates under noise (the CNN)
or a sequence's topic (the transformer), so the loss falls and a broken gradient shows up as a
loss that does not. Every task is one its model learns within the README's 40 steps at the
default batch, rate and momentum (the loss at least halves; ``tests/train/test_examples_learn``):
a demo must visibly learn. Models avoid
BatchNorm: its statistics depend on the local batch, which differs per rank in heterogeneous
data parallelism; LayerNorm does not.

The planner has no profile of these small models; for the first split of ``--split planned`` each
is planned as the profiled model closest to it (``mlp`` as ``ncf``, ``cnn`` as ``cifar10``,
``transformer`` as ``bert``): see :data:`tessera.train.prior.PLAN_MODELS` for why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from tessera.errors import SpecError

_TEACHER_SEED_OFFSET = 7_919
_BLOCK_STRIDE = 1_000_003
BLOCK_SAMPLES = 64
"""Samples generated together from one seeded generator (sample ``k`` is in block ``k // 64``)."""


@dataclass(frozen=True, slots=True)
class Example:
    """A trainable example.

    Attributes:
        name: registry key (``tessera train NAME``).
        description: one line for ``--help`` and reports.
        build_model: builds a freshly initialised model (call after seeding torch).
        make_batch: ``(generator, batch, seed) -> (inputs, labels)`` for ``batch`` samples.
    """

    name: str
    description: str
    build_model: Callable[[], nn.Module]
    make_batch: Callable[[torch.Generator, int, int], tuple[torch.Tensor, torch.Tensor]]


def _teacher(seed: int, in_features: int, classes: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + _TEACHER_SEED_OFFSET)
    return torch.randn(in_features, classes, generator=gen)


def _mlp_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


WIDE_MLP_HIDDEN = 2048
"""Width of ``wide-mlp``'s hidden layers: 4.2 M parameters, 17 MB of fp32 gradient per step,
enough for a 1-10 Gb/s link to matter (``tessera train --compress``)."""


class _WideMlp(nn.Module):
    """Two 2048-wide tanh layers; the logits are scaled by 1/4 (an output multiplier, as in
    muP), without which SGD at the default rate 0.05 and momentum 0.9 diverges on this width
    (the mean loss of steps 35-39 was 0.97 against 0.90 for steps 0-4; with it, 0.20)."""

    def __init__(self) -> None:
        super().__init__()
        h = WIDE_MLP_HIDDEN
        self.net = nn.Sequential(nn.Linear(16, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(),
                                 nn.Linear(h, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * 0.25


def _wide_mlp_model() -> nn.Module:
    return _WideMlp()


def _mlp_batch(gen: torch.Generator, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(batch, 16, generator=gen)
    return x, (x @ _teacher(seed, 16, 4)).argmax(dim=1)


_CNN_CLASSES = 10
_CNN_SIDE = 12
_CNN_NOISE = 1.0
"""Standard deviation of the pixel noise over a template (the templates' pixels have 1)."""


class _SmallCnn(nn.Module):
    """Two convolutions, 3×3 average pooling, one linear classifier (1×12×12 inputs).

    The pooling keeps a coarse 3×3 map (not one global average): where a pattern lies is what
    tells the classes apart, and a global average would throw that away.
    """

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(3),
        )
        self.head = nn.Linear(16 * 9, _CNN_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def _cnn_templates(seed: int) -> torch.Tensor:
    """One fixed random 1×12×12 image per class, from ``seed`` (the same on every rank)."""
    gen = torch.Generator().manual_seed(seed + _TEACHER_SEED_OFFSET)
    return torch.randn(_CNN_CLASSES, 1, _CNN_SIDE, _CNN_SIDE, generator=gen)


def _cnn_batch(gen: torch.Generator, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A uniformly drawn class per sample; its image is the class template plus noise."""
    labels = torch.randint(0, _CNN_CLASSES, (batch,), generator=gen)
    noise = _CNN_NOISE * torch.randn(batch, 1, _CNN_SIDE, _CNN_SIDE, generator=gen)
    return _cnn_templates(seed)[labels] + noise, labels


_VOCAB = 32
_SEQ_LEN = 12
_CLASSES = 4
_TOPIC_TOKENS = _VOCAB // _CLASSES
"""Tokens per topic: topic ``c`` owns tokens ``[8c, 8c + 8)`` of the 32-token vocabulary."""
_TOPIC_FRACTION = 0.5
"""Chance that a position holds a token of the sequence's topic (else any token, uniformly)."""


class _TinyTransformer(nn.Module):
    """Token embedding + learned positions, one pre-norm encoder layer, mean-pooled classifier."""

    def __init__(self, d_model: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(_VOCAB, d_model)
        self.pos = nn.Parameter(torch.zeros(_SEQ_LEN, d_model))
        self.encoder = nn.TransformerEncoderLayer(
            d_model, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True, norm_first=True
        )
        self.head = nn.Linear(d_model, _CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(tokens) + self.pos)
        return self.head(h.mean(dim=1))


def _sequence_batch(gen: torch.Generator, batch: int, seed: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences about one of 4 topics; the label is the topic.

    Each position holds, with probability :data:`_TOPIC_FRACTION`, a token of the sequence's
    topic and otherwise any token, so a sequence is "mostly about" its topic the way a sentence
    is, and the model must weigh the tokens of all positions to tell. (The first task, the sum
    of the tokens modulo 4, depends on every token at once; this model stayed at loss ≈1.39,
    chance, over the README's 40 steps.) ``seed`` is unused: the topics are fixed.
    """
    labels = torch.randint(0, _CLASSES, (batch,), generator=gen)
    background = torch.randint(0, _VOCAB, (batch, _SEQ_LEN), generator=gen)
    on_topic = torch.rand(batch, _SEQ_LEN, generator=gen) < _TOPIC_FRACTION
    topical = labels[:, None] * _TOPIC_TOKENS + torch.randint(
        0, _TOPIC_TOKENS, (batch, _SEQ_LEN), generator=gen)
    return torch.where(on_topic, topical, background), labels


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example("mlp", "two-layer MLP on 16-d Gaussian inputs (fastest; tests)",
                _mlp_model, _mlp_batch),
        Example("cnn", "two-conv CNN on 1×12×12 noisy class templates, 10 classes",
                _SmallCnn, _cnn_batch),
        Example("transformer", "one-layer transformer encoder naming the topic of token "
                "sequences, 4 topics",
                _TinyTransformer, _sequence_batch),
        Example("wide-mlp", "the mlp's task with two 2048-wide hidden layers (4.2 M "
                "parameters: a gradient large enough for slow links to matter)",
                _wide_mlp_model, _mlp_batch),
    )
}


def get_example(name: str) -> Example:
    """Look an example up by name.

    Raises:
        SpecError: the name is not registered (the message lists the known ones).
    """
    try:
        return EXAMPLES[name]
    except KeyError:
        raise SpecError(
            f"unknown example {name!r}; choose one of: {', '.join(EXAMPLES)}"
        ) from None


def build_model(example: Example, seed: int, dtype: torch.dtype) -> nn.Module:
    """The example's model, initialised from ``seed`` (identical on every rank)."""
    torch.manual_seed(seed)
    return example.build_model().to(dtype)


def sample_range(example: Example, seed: int, start_sample: int, count: int,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples ``[start_sample, start_sample + count)`` of the example's stream.

    Only the blocks that overlap the range are generated, so a rank builds its own slice, not
    the whole global batch.

    Raises:
        ValueError: a negative start or count.
    """
    if start_sample < 0 or count < 0:
        raise ValueError(f"sample range [{start_sample}, +{count}) must be non-negative")
    first, last = start_sample // BLOCK_SAMPLES, (start_sample + count - 1) // BLOCK_SAMPLES
    xs, ys = [], []
    for block in range(first, max(first, last) + 1):
        gen = torch.Generator().manual_seed(seed * _BLOCK_STRIDE + block)
        x, y = example.make_batch(gen, BLOCK_SAMPLES, seed)
        xs.append(x)
        ys.append(y)
    lo = start_sample - first * BLOCK_SAMPLES
    x, y = torch.cat(xs)[lo:lo + count], torch.cat(ys)[lo:lo + count]
    return (x.to(dtype) if x.is_floating_point() else x), y


def global_batch(example: Example, seed: int, step: int, batch: int, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole global batch of ``step`` of a run that kept ``batch`` samples per step."""
    return sample_range(example, seed, step * batch, batch, dtype)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the samples of a (local) batch."""
    return nn.functional.cross_entropy(logits, labels)
