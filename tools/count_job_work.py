"""Count the work per training step of every job type in Gavel's and Sia's tables.

Run: ``PYTHONPATH=src python tools/count_job_work.py`` (needs PyTorch; takes about a minute on
one CPU core). It rewrites ``src/tessera/data/job_work.json``, which
:mod:`tessera.perf.job_work` reads at run time (PyTorch is not needed then).

Each model is built in plain PyTorch on the ``meta`` device (shapes only: no weights, no data,
no arithmetic), and one training step -- forward, loss, backward -- runs at the table's batch
size under two counters:

* **FLOPs**: :class:`torch.utils.flop_counter.FlopCounterMode` (matrix products, convolutions
  and attention, forward and backward; element-wise work is not counted, as in that tool);
* **bytes moved** (an estimate, an upper bound on DRAM traffic): the sum over every ATen
  operation of the bytes of its tensor inputs and outputs (each read and written once, no
  reuse through caches), view operations excluded, plus the optimizer's traffic, five times
  the parameters' bytes (SGD with momentum reads weight, gradient and momentum and writes
  weight and momentum);
* **kernels**: how many non-view ATen operations ran, a proxy for launch overhead (eager
  PyTorch launches about one kernel per operation).

Everything is FP32 (4 bytes per value). The architectures follow the papers' and reference
implementations' published shapes; where a detail is not published the choice is written next
to the model below (sequence lengths, vocabularies). They are *the work of the model*, not of
the exact script Gavel or Sia timed: the predictor calibrates each job's efficiency from one
observation, so a constant factor in a count cancels; a wrong *ratio* of compute to bytes does
not.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

OUT = Path(__file__).resolve().parents[1] / "src" / "tessera" / "data" / "job_work.json"
BYTES_PER_VALUE = 4
OPTIMIZER_PASSES = 5


class ByteCounter(TorchDispatchMode):
    """Sums input and output bytes of every non-view ATen operation, and counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.kernels = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not func.is_view and func.__name__.split(".")[0] not in ("detach", "alias"):
            tensors = [t for t in tree_flatten((args, kwargs or {}, out))[0]
                       if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
            self.kernels += 1
        return out


def count(model: nn.Module, step: Callable[[], torch.Tensor]) -> dict[str, float]:
    """FLOPs, bytes and kernels of one training step ``step()`` (returns the loss)."""
    params = sum(p.numel() for p in model.parameters())
    bc = ByteCounter()
    with FlopCounterMode(display=False) as fc, bc:
        step().backward()
    return {"flops": float(fc.get_total_flops()),
            "bytes": float(bc.bytes + OPTIMIZER_PASSES * params * BYTES_PER_VALUE),
            "kernels": float(bc.kernels), "params": float(params)}


# ---- models (plain PyTorch) ------------------------------------------------------------------

def conv_bn(cin: int, cout: int, k: int, stride: int = 1, act: nn.Module | None = None
            ) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                         nn.BatchNorm2d(cout), act or nn.ReLU())


class Block(nn.Module):
    """ResNet basic (two 3x3) or bottleneck (1x1, 3x3, 1x1 at 4x width) block."""

    def __init__(self, cin: int, width: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        cout = width * 4 if bottleneck else width
        if bottleneck:
            self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, stride),
                                      nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        else:
            self.body = nn.Sequential(conv_bn(cin, width, 3, stride),
                                      nn.Conv2d(width, cout, 3, 1, 1, bias=False),
                                      nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())
        self.out = cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def resnet(depth: int, classes: int = 1000, cifar: bool = False) -> nn.Module:
    """ResNet-18/50 (He et al.); ``cifar``: 3x3 stem, no max-pool (the usual CIFAR variant)."""
    blocks, bottleneck = {18: ([2, 2, 2, 2], False), 50: ([3, 4, 6, 3], True)}[depth]
    layers: list[nn.Module] = ([conv_bn(3, 64, 3)] if cifar else
                               [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)])
    cin = 64
    for i, n in enumerate(blocks):
        for j in range(n):
            b = Block(cin, 64 * 2 ** i, 2 if j == 0 and i > 0 else 1, bottleneck)
            layers.append(b)
            cin = b.out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def image_step(model: nn.Module, batch: int, size: int, classes: int
               ) -> Callable[[], torch.Tensor]:
    x = torch.randn(batch, 3, size, size)
    y = torch.zeros(batch, dtype=torch.long)
    return lambda: nn.functional.cross_entropy(model(x), y)


class Lstm(nn.Module):
    """An LSTM unrolled in matrix products (so every step's work is counted)."""

    def __init__(self, nin: int, hidden: int, layers: int, bidirectional: bool = False) -> None:
        super().__init__()
        dirs = 2 if bidirectional else 1
        self.hidden, self.dirs = hidden, dirs
        self.inp = nn.ModuleList(nn.Linear(nin if i < dirs else hidden * dirs, 4 * hidden)
                                 for i in range(layers * dirs))
        self.rec = nn.ModuleList(nn.Linear(hidden, 4 * hidden, bias=False)
                                 for _ in range(layers * dirs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (T, B, nin)
        for layer in range(len(self.inp) // self.dirs):
            outs = []
            for d in range(self.dirs):
                i = layer * self.dirs + d
                gates_x = self.inp[i](x)
                h = torch.zeros(x.shape[1], self.hidden)
                c = torch.zeros_like(h)
                hs = []
                steps = range(x.shape[0]) if d == 0 else reversed(range(x.shape[0]))
                for t in steps:
                    g = gates_x[t] + self.rec[i](h)
                    a, b, cc, o = g.chunk(4, dim=1)
                    c = torch.sigmoid(b) * c + torch.sigmoid(a) * torch.tanh(cc)
                    h = torch.sigmoid(o) * torch.tanh(c)
                    hs.append(h)
                outs.append(torch.stack(hs if d == 0 else hs[::-1]))
            x = torch.cat(outs, dim=2)
        return x


def language_model(batch: int) -> dict[str, float]:
    """Gavel's LM: PyTorch's word_language_model on Wikitext-2 with its defaults (2-layer
    LSTM, 200 units, embeddings 200, bptt 35, vocabulary 33,278)."""
    vocab, width, bptt = 33278, 200, 35
    emb, rnn, dec = nn.Embedding(vocab, width), Lstm(width, width, 2), nn.Linear(width, vocab)
    model = nn.ModuleList([emb, rnn, dec])
    x = torch.zeros(bptt, batch, dtype=torch.long)
    return count(model, lambda: nn.functional.cross_entropy(
        dec(rnn(emb(x))).reshape(-1, vocab), x.reshape(-1)))


def transformer(batch: int, seq: int = 30, vocab: int = 10000) -> dict[str, float]:
    """Gavel's Transformer (Vaswani et al., base: 6+6 layers, d_model 512, 8 heads, FFN 2048)
    on Multi30k; sentences of ``seq`` tokens and a ``vocab``-word target vocabulary (our
    choice: Multi30k's sentences average about 13 words, its vocabularies about 10,000)."""
    model = nn.Transformer(512, 8, 6, 6, 2048, dropout=0.1, batch_first=True)
    emb_s, emb_t, out = nn.Embedding(vocab, 512), nn.Embedding(vocab, 512), nn.Linear(512, vocab)
    whole = nn.ModuleList([model, emb_s, emb_t, out])
    src = torch.zeros(batch, seq, dtype=torch.long)
    return count(whole, lambda: nn.functional.cross_entropy(
        out(model(emb_s(src), emb_t(src))).reshape(-1, vocab), src.reshape(-1)))


def recommendation(batch: int, items: int = 26744) -> dict[str, float]:
    """Gavel's Recommendation: an autoencoder collaborative filter (NVIDIA DeepRecommender's
    layout) on MovieLens-20M's 26,744 items: items -> 512 -> 512 -> 1024 -> 512 -> 512 -> items,
    SELU activations, dense input rows."""
    dims = [items, 512, 512, 1024, 512, 512, items]
    layers: list[nn.Module] = []
    for a, b in pairwise(dims):
        layers += [nn.Linear(a, b), nn.SELU()]
    model = nn.Sequential(*layers[:-1])
    x = torch.randn(batch, items)
    return count(model, lambda: nn.functional.mse_loss(model(x), x))


def cyclegan() -> dict[str, float]:
    """Gavel's CycleGAN (Zhu et al.): two ResNet generators (9 blocks, 64 filters) and two
    70x70 PatchGAN discriminators, 256x256 images, batch 1; one step computes both cycles, the
    identity-free generator loss and both discriminators' losses."""

    def generator() -> nn.Module:
        layers: list[nn.Module] = [conv_bn(3, 64, 7), conv_bn(64, 128, 3, 2),
                                   conv_bn(128, 256, 3, 2)]
        layers += [Block(256, 256, 1, False) for _ in range(9)]
        layers += [nn.ConvTranspose2d(256, 128, 3, 2, 1, 1), nn.ReLU(),
                   nn.ConvTranspose2d(128, 64, 3, 2, 1, 1), nn.ReLU(),
                   nn.Conv2d(64, 3, 7, 1, 3), nn.Tanh()]
        return nn.Sequential(*layers)

    def discriminator() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 64, 4, 2, 1), nn.LeakyReLU(0.2),
                             conv_bn(64, 128, 4, 2, nn.LeakyReLU(0.2)),
                             conv_bn(128, 256, 4, 2, nn.LeakyReLU(0.2)),
                             conv_bn(256, 512, 4, 1, nn.LeakyReLU(0.2)),
                             nn.Conv2d(512, 1, 4, 1, 1))

    g_ab, g_ba, d_a, d_b = generator(), generator(), discriminator(), discriminator()
    model = nn.ModuleList([g_ab, g_ba, d_a, d_b])
    a, b = torch.randn(1, 3, 256, 256), torch.randn(1, 3, 256, 256)

    def step() -> torch.Tensor:
        fake_b, fake_a = g_ab(a), g_ba(b)
        loss = ((g_ba(fake_b) - a).abs().mean() + (g_ab(fake_a) - b).abs().mean()
                + d_b(fake_b).square().mean() + d_a(fake_a).square().mean())
        return (loss + d_b(b).square().mean() + d_b(fake_b.detach()).square().mean()
                + d_a(a).square().mean() + d_a(fake_a.detach()).square().mean())

    return count(model, step)


def a3c(steps: int = 20) -> dict[str, float]:
    """Gavel's A3C (Mnih et al., the pytorch-a3c layout): four 3x3 stride-2 convolutions of 32
    filters on 42x42 frames, an LSTM cell of 256, actor and critic heads; one update is a
    ``steps``-step rollout of one environment."""
    convs = nn.Sequential(nn.Conv2d(1, 32, 3, 2, 1), nn.ELU(), nn.Conv2d(32, 32, 3, 2, 1),
                          nn.ELU(), nn.Conv2d(32, 32, 3, 2, 1), nn.ELU(),
                          nn.Conv2d(32, 32, 3, 2, 1), nn.ELU(), nn.Flatten())
    cell, actor, critic = Lstm(32 * 3 * 3, 256, 1), nn.Linear(256, 6), nn.Linear(256, 1)
    model = nn.ModuleList([convs, cell, actor, critic])
    frames = torch.randn(steps, 1, 1, 42, 42)

    def step() -> torch.Tensor:
        feats = torch.stack([convs(frames[t]) for t in range(steps)])
        h = cell(feats)
        return actor(h).logsumexp(-1).mean() + critic(h).mean()

    return count(model, step)


def bert(batch: int, seq: int = 384) -> dict[str, float]:
    """Sia's bert: BERT-base (12 layers, 768 wide, 12 heads, FFN 3072, vocabulary 30,522)
    fine-tuned for SQuAD question answering, sequences of 384 tokens."""
    layer = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.1, activation="gelu",
                                       batch_first=True)
    enc = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
    emb, pos, head = nn.Embedding(30522, 768), nn.Embedding(512, 768), nn.Linear(768, 2)
    model = nn.ModuleList([enc, emb, pos, head])
    ids = torch.zeros(batch, seq, dtype=torch.long)
    where = torch.zeros(batch, seq, dtype=torch.long)
    return count(model, lambda: head(enc(emb(ids) + pos(where))).square().mean())


def deepspeech2(batch: int, frames: int = 300) -> dict[str, float]:
    """Sia's deepspeech2 (Amodei et al., deepspeech.pytorch's layout): two 2-D convolutions
    (32 filters, 41x11 stride 2x2, 21x11 stride 2x1) on 161-bin spectrograms, five
    bidirectional LSTM layers of 800 units, a 29-character output; ``frames`` 10 ms frames per
    utterance (our choice: CMU-ARCTIC utterances last about 3 s)."""
    convs = nn.Sequential(nn.Conv2d(1, 32, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(32),
                          nn.Hardtanh(0, 20),
                          nn.Conv2d(32, 32, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(32),
                          nn.Hardtanh(0, 20))
    rnn, out = Lstm(32 * 41, 800, 5, bidirectional=True), nn.Linear(1600, 29)
    model = nn.ModuleList([convs, rnn, out])
    x = torch.randn(batch, 1, 161, frames)

    def step() -> torch.Tensor:
        f = convs(x)  # (B, 32, 41, T/2)
        seq = f.reshape(batch, 32 * 41, -1).permute(2, 0, 1)
        return out(rnn(seq)).log_softmax(-1).mean()

    return count(model, step)


def yolov3(batch: int, size: int = 416, classes: int = 20) -> dict[str, float]:
    """Sia's yolov3 (Redmon and Farhadi): the Darknet-53 backbone and three detection heads
    (five alternating 1x1/3x3 convolutions, a 3x3 and a 1x1 output of 3 x (5 + 20) channels
    for PASCAL VOC) with the two upsample-and-concatenate paths, 416x416 images."""
    leaky = nn.LeakyReLU(0.1)

    class Res(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.body = nn.Sequential(conv_bn(c, c // 2, 1, act=leaky),
                                      conv_bn(c // 2, c, 3, act=leaky))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.body(x)

    stages: list[nn.Module] = []
    cin = 32
    stem = conv_bn(3, 32, 3, act=leaky)
    for n, c in zip([1, 2, 8, 8, 4], [64, 128, 256, 512, 1024], strict=True):
        stages.append(nn.Sequential(conv_bn(cin, c, 3, 2, leaky), *[Res(c) for _ in range(n)]))
        cin = c

    def head(cin: int, c: int) -> tuple[nn.Module, nn.Module]:
        five = nn.Sequential(conv_bn(cin, c, 1, act=leaky), conv_bn(c, 2 * c, 3, act=leaky),
                             conv_bn(2 * c, c, 1, act=leaky), conv_bn(c, 2 * c, 3, act=leaky),
                             conv_bn(2 * c, c, 1, act=leaky))
        return five, nn.Sequential(conv_bn(c, 2 * c, 3, act=leaky),
                                   nn.Conv2d(2 * c, 3 * (5 + classes), 1))

    h1, o1 = head(1024, 512)
    h2, o2 = head(512 + 256, 256)
    h3, o3 = head(256 + 128, 128)
    lat1, lat2 = conv_bn(512, 256, 1, act=leaky), conv_bn(256, 128, 1, act=leaky)
    model = nn.ModuleList([stem, *stages, h1, o1, h2, o2, h3, o3, lat1, lat2])
    x = torch.randn(batch, 3, size, size)
    up = nn.Upsample(scale_factor=2)

    def step() -> torch.Tensor:
        y = stem(x)
        feats = []
        for s in stages:
            y = s(y)
            feats.append(y)
        a = h1(feats[4])
        b = h2(torch.cat([up(lat1(a)), feats[3]], 1))
        c = h3(torch.cat([up(lat2(b)), feats[2]], 1))
        return o1(a).square().mean() + o2(b).square().mean() + o3(c).square().mean()

    return count(model, step)


def ncf(batch: int) -> dict[str, float]:
    """Sia's ncf: NeuMF (He et al.) on MovieLens-1M (6,040 users, 3,706 items), GMF factors
    32, an MLP tower 256 -> 128 -> 64 -> 32 on 128-wide embeddings, one output."""
    users, items = 6040, 3706
    gu, gi = nn.Embedding(users, 32), nn.Embedding(items, 32)
    mu, mi = nn.Embedding(users, 128), nn.Embedding(items, 128)
    mlp = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                        nn.Linear(64, 32), nn.ReLU())
    pred = nn.Linear(64, 1)
    model = nn.ModuleList([gu, gi, mu, mi, mlp, pred])
    u = torch.zeros(batch, dtype=torch.long)
    i = torch.zeros(batch, dtype=torch.long)

    def step() -> torch.Tensor:
        z = torch.cat([gu(u) * gi(i), mlp(torch.cat([mu(u), mi(i)], 1))], 1)
        return nn.functional.binary_cross_entropy_with_logits(pred(z).squeeze(1),
                                                              torch.zeros(batch))

    return count(model, step)


# ---- the tables' job types ---------------------------------------------------------------------

def work_of(table: str, job_type: str) -> dict[str, float]:
    """Counts for one job type of ``table`` (``gavel`` or ``sia``)."""
    m = re.match(r"^(.+?)(?: \(batch size (\d+)\))?$", job_type)
    assert m, job_type
    model, batch = m.group(1), int(m.group(2) or 1)
    with torch.device("meta"):
        if table == "gavel":
            if model == "ResNet-18":  # Gavel's ResNet-18 trains on CIFAR-10
                net = resnet(18, 10, cifar=True)
                return count(net, image_step(net, batch, 32, 10))
            if model == "ResNet-50":  # and its ResNet-50 on ImageNet
                net = resnet(50)
                return count(net, image_step(net, batch, 224, 1000))
            builders: dict[str, Callable[[], dict[str, float]]] = {
                "Transformer": lambda: transformer(batch), "LM": lambda: language_model(batch),
                "Recommendation": lambda: recommendation(batch), "CycleGAN": cyclegan,
                "A3C": a3c}
            return builders[model]()
        if model in ("imagenet", "cifar10"):
            net = resnet(50) if model == "imagenet" else resnet(18, 10, cifar=True)
            size = 224 if model == "imagenet" else 32
            return count(net, image_step(net, batch, size, 10))
        return {"bert": bert, "deepspeech2": deepspeech2, "yolov3": yolov3,
                "ncf": ncf}[model](batch)


def main() -> None:
    sys.setrecursionlimit(10000)
    from tessera.perf.estimate import table_matrix
    from tessera.perf.tables import load_throughputs

    data: dict[str, Any] = {
        "about": "Work per training step of each job type of Gavel's and Sia's throughput "
                 "tables, counted on PyTorch's meta device by tools/count_job_work.py (its "
                 "docstring says how; regenerate with PYTHONPATH=src python "
                 "tools/count_job_work.py). flops: FlopCounterMode, forward and backward; "
                 "bytes: input and output bytes of every non-view ATen op plus 5x the "
                 "parameters' bytes (an estimate of DRAM traffic, FP32); kernels: non-view ATen "
                 "ops run; params: parameters.",
        "torch": torch.__version__, "tables": {}}
    for table in ("gavel", "sia"):
        job_types, _flavors, _logs = table_matrix(load_throughputs(table))
        data["tables"][table] = {}
        for job_type in job_types:
            w = work_of(table, job_type)
            data["tables"][table][job_type] = {k: float(f"{v:.4g}") for k, v in w.items()}
            print(f"{table:<6} {job_type:<32} {w['flops'] / 1e9:10.2f} GFLOP "
                  f"{w['bytes'] / 1e9:8.3f} GB {w['kernels']:7.0f} kernels", flush=True)
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
