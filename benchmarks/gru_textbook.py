"""Training-step throughput of the recipes' recurrent models with ``cell=gru_textbook`` against ``cell=gru``
(torch's fused kernel), measured in the same run.

Models, at the recipes' default sizes (``seqlab recipes NAME``):
    lm          RNNLanguageModel: E = H = 200, 2 layers, a batch of 12 windows of 35 tokens, V = 80;
    g2p         RNNSeq2Seq: E = 64, H = 128, 2-layer bidirectional encoder, 1-layer decoder with additive
                attention (Luong placement), 32 words of 8 letters to 8 phonemes;
    forecast    Forecaster: H = 64, 2 layers, direct head, 64 windows of 48 steps, 1 channel;
    tagger      RNNSequenceTagger: E = 32, H = 64, bidirectional, 32 words of 10 phonemes.
One iteration is forward, cross-entropy or squared error, backward, an Adam step and clearing the gradients.

Timing: every round runs each row once in a fresh random order (seeded by --seed); the table shows, over --repeats
rounds after --warmup, the median sequences/s with its interquartile range and the ratio to the ``gru`` row of the
same model: the median of the per-round ratios of times (gru seconds / row seconds), with their interquartile range.
A ratio below 1 means the textbook form trains slower. It runs the reference loop (r_t acts on h_{t-1} before W_hn,
which no fused kernel computes), while the fused path's cost sits in one kernel call per layer.

    python benchmarks/gru_textbook.py --threads 1                 # all models, 15 rounds
    python benchmarks/gru_textbook.py --models lm,g2p --repeats 5
    python benchmarks/gru_textbook.py --repeats 1 --warmup 0 --scale 0.1   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from timing import median_and_iqr
from torch import Tensor, nn

from seqlab.models import RNNLanguageModel, RNNSeq2Seq
from seqlab.models.forecaster import Forecaster, ForecasterConfig
from seqlab.models.language_model.rnn import RNNLanguageModelConfig
from seqlab.models.seq2seq.rnn import RNNSeq2SeqConfig
from seqlab.models.tagger import RNNSequenceTagger, RNNSequenceTaggerConfig

CELLS = ("gru", "gru_textbook")
MODELS = ("lm", "g2p", "forecast", "tagger")


class Row(NamedTuple):
    model: str
    cell: str
    sequences: int  # B, sequences per iteration
    step: Callable[[], None]  # one training iteration


def size(value: int, scale: float) -> int:
    return max(2, round(value * scale))


def make_step(module: nn.Module, loss: Callable[[], Tensor]) -> Callable[[], None]:
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)

    def step() -> None:
        loss().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def build(model: str, cell: str, scale: float, generator: torch.Generator) -> Row:
    """The model of ``model`` with ``cell``, its batch and its training iteration."""
    if model == "lm":
        B, T, V = 12, size(35, scale), 80
        lm = RNNLanguageModel(RNNLanguageModelConfig(vocab_size=V, embedding_size=200, hidden_size=200, cell=cell))
        tokens = torch.randint(V, (B, T + 1), generator=generator)
        return Row(
            model,
            cell,
            B,
            make_step(
                lm,
                lambda: (
                    lm(tokens[:, :-1])
                    .logits.flatten(0, 1)
                    .log_softmax(-1)
                    .gather(1, tokens[:, 1:].reshape(-1, 1))
                    .mean()
                    .neg()
                ),
            ),
        )
    if model == "g2p":
        B, S, T, V = 32, size(8, scale), size(8, scale), 40
        config = RNNSeq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, embedding_size=64, hidden_size=128, cell=cell)
        seq2seq = RNNSeq2Seq(config)
        src, tgt = (
            torch.randint(3, V, (B, S), generator=generator),
            torch.randint(3, V, (B, T + 1), generator=generator),
        )
        lengths = torch.full((B,), S)

        def g2p_loss() -> Tensor:
            logits = seq2seq(src, lengths, tgt[:, :-1]).logits  # (B, T, V)
            return nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())

        return Row(model, cell, B, make_step(seq2seq, g2p_loss))
    if model == "forecast":
        B, L, H = 64, size(48, scale), 12
        forecaster = Forecaster(ForecasterConfig(channels=1, horizon=H, encoder=cell, hidden_size=64, dropout=0.0))
        x, y = torch.randn(B, L, 1, generator=generator), torch.randn(B, H, 1, generator=generator)
        return Row(model, cell, B, make_step(forecaster, lambda: nn.functional.mse_loss(forecaster(x), y)))
    B, T, V = 32, size(10, scale), 40
    config = RNNSequenceTaggerConfig(vocab_size=V, num_labels=3, embedding_size=32, hidden_size=64, cell=cell)
    tagger = RNNSequenceTagger(config)
    ids, tags = torch.randint(1, V, (B, T), generator=generator), torch.randint(3, (B, T), generator=generator)
    return Row(
        model,
        cell,
        B,
        make_step(tagger, lambda: nn.functional.cross_entropy(tagger(ids).logits.flatten(0, 1), tags.flatten())),
    )


def time_rounds(rows: list[Row], *, warmup: int, repeats: int, seed: int) -> list[list[float]]:
    """Seconds per row (outer) and round (inner); every round runs all rows once in a fresh random order."""
    order, shuffle = list(range(len(rows))), random.Random(seed).shuffle
    seconds: list[list[float]] = [[] for _ in rows]
    for i in range(warmup + repeats):
        shuffle(order)
        for r in order:
            start = time.perf_counter()
            rows[r].step()
            if i >= warmup:
                seconds[r].append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated from {','.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds before timing")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every sequence length (smoke tests)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="weights, batches and the order of rows")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    if not models or any(m not in MODELS for m in models):
        parser.error(f"--models: choose from {','.join(MODELS)}, got {args.models!r}")
    if args.repeats < 1 or args.warmup < 0 or not args.scale > 0:
        parser.error("--repeats must be >= 1, --warmup >= 0 and --scale > 0")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    rows = [build(model, cell, args.scale, generator) for model in models for cell in CELLS]
    seconds = time_rounds(rows, warmup=args.warmup, repeats=args.repeats, seed=args.seed)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, float32, training steps (Adam)")
    print(f"{args.repeats} rounds after {args.warmup} warmup, rows in a random order per round; median [IQR]\n")
    print(f"{'model':<9} {'cell':<13} {'sequences/s':>12} {'IQR':>17} {'vs gru':>7} {'ratio IQR':>11}")
    print("-" * 74)
    baseline = {row.model: s for row, s in zip(rows, seconds, strict=True) if row.cell == "gru"}
    for row, row_seconds in zip(rows, seconds, strict=True):
        rate, q1, q3 = median_and_iqr([row.sequences / s for s in row_seconds])
        ratio, r1, r3 = median_and_iqr([b / s for b, s in zip(baseline[row.model], row_seconds, strict=True)])
        print(
            f"{row.model:<9} {row.cell:<13} {rate:>12,.1f} {f'{q1:,.1f}-{q3:,.1f}':>17} {ratio:>6.2f}x "
            f"{f'{r1:.2f}-{r3:.2f}':>11}"
        )


if __name__ == "__main__":
    main()
