"""Greedy generation with a TCN language model: the cached state against recomputing the receptive field per token.

Both rows generate --new-tokens tokens at batch --batch after a --prompt-token prompt with the same random
``TCNLanguageModel`` (float32, dropout 0, eval):
    cached      ``seqlab.decoding.generate`` (prefill, then ``step`` with each convolution's last (k - 1) d inputs
                as the state: constant work per token, the "fast WaveNet" cache of Paine et al., 2016)
    recompute   at every step, one forward over the last R tokens (R = the receptive field) and the argmax of the
                last position: what a TCN without a state does (it reads no further back, so the tokens agree)
Both must pick the same tokens (checked and printed). tokens/s = batch * new tokens / seconds.

Timing: rounds alternate which row runs first; over --repeats rounds after one warm-up round the table shows the
median tokens/s with its interquartile range and the ratio cached / recompute (median of per-round time ratios,
with its interquartile range). Load from other processes moves both rows of a round alike.

    nice python benchmarks/tcn_generation.py --threads 1                       # R = 253, about a minute
    python benchmarks/tcn_generation.py --levels 2 --hidden 8 --vocab 16 --new-tokens 4 --repeats 1   # smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from seqlab.decoding import generate
from seqlab.models import TCNLanguageModel, TCNLanguageModelConfig


def recompute(model: TCNLanguageModel, prompt: Tensor, new_tokens: int) -> Tensor:
    """Greedy tokens (B, new_tokens), each from one stateless forward over the last R tokens."""
    R, text = model.receptive_field, prompt
    for _ in range(new_tokens):
        logits = model(text[:, -R:]).logits[:, -1]  # (B, V)
        text = torch.cat([text, logits.argmax(-1, keepdim=True)], 1)
    return text[:, prompt.shape[1] :]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", type=int, default=6, help="num_levels L (default 6: R = 253 with k = 3)")
    parser.add_argument("--kernel-size", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=128, help="E = H")
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = TCNLanguageModelConfig(
        args.vocab, embedding_size=args.hidden, hidden_size=args.hidden, num_levels=args.levels,
        kernel_size=args.kernel_size,
    )  # fmt: skip
    model = TCNLanguageModel(config).eval()
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt_tokens), generator=torch.Generator().manual_seed(1))
    rows: dict[str, Callable[[], Tensor]] = {
        "cached": lambda: generate(model, prompt, max_new_tokens=args.new_tokens).tokens[:, args.prompt_tokens :],
        "recompute": lambda: recompute(model, prompt, args.new_tokens),
    }
    seconds: dict[str, list[float]] = {name: [] for name in rows}
    tokens: dict[str, Tensor] = {}
    with torch.no_grad():
        for round_ in range(args.repeats + 1):
            for name in rows if round_ % 2 == 0 else reversed(rows):
                start = time.perf_counter()
                tokens[name] = rows[name]()
                if round_ > 0:
                    seconds[name].append(time.perf_counter() - start)
    generated = args.batch * args.new_tokens
    ratios = [r / c for c, r in zip(seconds["cached"], seconds["recompute"], strict=True)]
    print(f"TCN LM: L = {args.levels}, k = {args.kernel_size}, E = H = {args.hidden}, V = {args.vocab}, "
          f"receptive field R = {model.receptive_field}; batch {args.batch}, {args.new_tokens} new tokens, "
          f"{args.threads} thread(s), {args.repeats} rounds")  # fmt: skip
    print(f"{'path':<10} {'tokens/s':>10} {'tokens/s IQR':>20} {'speed-up vs recompute (IQR)':>30}")
    for name in rows:
        q1, median, q3 = quartiles([generated / s for s in seconds[name]])
        if name == "cached":
            r1, r, r3 = quartiles(ratios)
            ratio = f"{r:.2f} ({r1:.2f}-{r3:.2f})"
        else:
            ratio = "1.00"
        print(f"{name:<10} {median:>10,.0f} {f'{q1:,.0f}-{q3:,.0f}':>20} {ratio:>30}")
    print(f"same greedy tokens: {'yes' if torch.equal(tokens['cached'], tokens['recompute']) else 'NO'}")


if __name__ == "__main__":
    main()
