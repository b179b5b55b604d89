"""What the monotonic-alignment priors cost the g2p Transformer per training step and per decoded word (issue 25).

Three rows of the same small Transformer (``--set`` style options below, the reduced scale of
docs/recipes/g2p.md's "Why the Transformer decodes long words worse"): no prior, the guided attention loss
(``model.guided_attention_weight``, training only: it needs every layer's cross-attention weights, so the
reference attention path instead of the fused one) and the monotonic ALiBi bias (``model.cross_attention_alibi``,
a float mask in the fused path, also at decoding). One training iteration is the recipe's loss on a real batch of
--batch pronunciations (``G2PTraining.loss``), backward and an Adam step; every row of a round trains on the same
batch, the rows' order rotating from round to round. Decoding is beam 5 over --words test words. The table shows
the median seconds over --repeats rounds after a warm-up round, and each row's ratio to the no-prior row: the
median of the per-round ratios, so a load that changes between rounds cancels.

    python benchmarks/g2p_alignment_priors.py --threads 1
    python benchmarks/g2p_alignment_priors.py --repeats 1 --words 8 --threads 1   # smoke test
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from seqlab.data.batching import batch_iterator
from seqlab.data.pronunciations import load_splits
from seqlab.recipes import g2p
from seqlab.recipes.g2p.system import encode_pairs
from seqlab.recipes.g2p.training import G2PTraining, build_system

SMALL = {
    "arch": "transformer",
    "d_model": 64,
    "num_heads": 4,
    "d_ff": 256,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "label_smoothing": 0.1,
    "positional": "rotary",
}
ROWS = {
    "no prior": {},
    "guided attention 1.0": {"guided_attention_weight": 1.0},
    "ALiBi bias 1.0": {"cross_attention_alibi": 1.0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="pronunciations per training batch")
    parser.add_argument("--steps", type=int, default=20, help="training steps per row and round")
    parser.add_argument("--words", type=int, default=64, help="test words decoded per row and round")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = g2p.Config()
    train_set, _, test_set = load_splits(base.data)
    rows = {}
    for name, options in ROWS.items():
        config = dataclasses.replace(base, model=g2p.TransformerConfig(**SMALL, **options))
        torch.manual_seed(0)
        system = build_system(config, train_set)
        training = G2PTraining(system, [], [], test_set, "test split")
        optimizer = torch.optim.Adam(system.model.parameters(), lr=1e-4)
        rows[name] = (system, training, optimizer)
    pairs = encode_pairs(rows["no prior"][0], train_set, source="train split")
    batches = batch_iterator(pairs, batch_size=args.batch, shuffle=True, generator=torch.Generator().manual_seed(0))
    words = sorted({p.word for p in test_set})[:: max(1, len({p.word for p in test_set}) // args.words)][: args.words]
    train_s = {name: [] for name in rows}
    decode_s = {name: [] for name in rows}
    for round_ in range(args.repeats + 1):
        chunk = [next(batches) for _ in range(args.steps)]
        names = list(rows)[round_ % len(rows) :] + list(rows)[: round_ % len(rows)]
        for name in names:
            system, training, optimizer = rows[name]
            system.model.train()
            start = time.perf_counter()
            for batch in chunk:
                optimizer.zero_grad()
                training.loss(system.model, batch).loss.backward()
                optimizer.step()
            train_s[name].append((time.perf_counter() - start) / args.steps)
            system.model.eval()
            start = time.perf_counter()
            system.transcribe(words, source="test split", num_beams=5)
            decode_s[name].append((time.perf_counter() - start) / len(words))
    print(f"{'row':<22} {'train s/step':>12} {'ratio':>6} {'decode s/word':>13} {'ratio':>6}")
    for name in rows:
        train_ratio = statistics.median(a / b for a, b in zip(train_s[name][1:], train_s["no prior"][1:], strict=True))
        decode_ratio = statistics.median(
            a / b for a, b in zip(decode_s[name][1:], decode_s["no prior"][1:], strict=True)
        )
        print(
            f"{name:<22} {statistics.median(train_s[name][1:]):12.4f} {train_ratio:6.2f} "
            f"{statistics.median(decode_s[name][1:]):13.4f} {decode_ratio:6.2f}"
        )


if __name__ == "__main__":
    main()
