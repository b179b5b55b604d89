"""The decoding page's figure: what temperature, top-k and top-p do to one next-token distribution of a trained
language model.

Reads a run of the ``lm`` recipe, takes the model's distribution over the token after ``--prompt``, and draws the
``--tokens`` most probable tokens at three temperatures, marking the tokens that top-k and top-p (applied after
the temperature, as ``seqlab generate`` does) leave to sample from. Re-run with:

    seqlab train lm --out runs/lm-fig --set train.max_steps=1500 train.time_budget=none data.test_fraction=0.002
    python docs/tables/decoding_figure.py runs/lm-fig --out docs/figures/decoding.png

It prints, for each setting, how many tokens remain and the probability mass they held before renormalising.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from matplotlib.figure import Figure

from seqlab.decoding.processors import temperature, top_k, top_p
from seqlab.recipes import load_system

TEMPERATURES = (0.5, 1.0, 2.0)


def next_token_logits(run: Path, prompt: str) -> tuple[torch.Tensor, list[str]]:
    """(V,) logits of the token after ``prompt`` and the V tokens' printable names."""
    system = load_system(run)
    ids = system.encode(prompt, source="--prompt")
    system.model.eval()
    with torch.no_grad():
        logits = system.model(ids[None]).logits[0, -1].float()
    names = [system.tokenizer.decode([i]).replace(" ", "\u2423").replace("\n", "\u23ce") for i in range(len(logits))]
    return logits, names


def draw(logits: torch.Tensor, names: list[str], path: Path, *, prompt: str, tokens: int, k: int, p: float) -> None:
    """Write the PNG: one panel per temperature, the ``tokens`` most probable tokens (at tau = 1) as bars, those
    kept by top-k and top-p marked."""
    order = logits.argsort(descending=True)[:tokens]
    figure = Figure(figsize=(10, 7.5), layout="constrained")
    axes = figure.subplots(len(TEMPERATURES), 1, sharex=True)
    for ax, tau in zip(axes, TEMPERATURES, strict=True):
        scaled = temperature(logits[None], tau)
        probs = torch.softmax(scaled, dim=-1)[0]
        kept_k = torch.isfinite(top_k(scaled, k))[0]
        kept_p = torch.isfinite(top_p(scaled, p))[0]
        x = range(len(order))
        ax.bar(x, probs[order].numpy(), color="0.75", label="p after temperature")
        ax.bar(x, (probs * kept_p)[order].numpy(), color="tab:blue", alpha=0.6, label=f"kept by top-p {p}")
        marks = [i for i, token in enumerate(order) if kept_k[token]]
        lift = 0.05 * float(probs[order[0]])
        ax.plot(marks, [float(probs[order[i]]) + lift for i in marks], "v", color="tab:red", label=f"kept by top-k {k}")
        ax.set_ylabel("probability")
        ax.set_title(
            f"temperature {tau:g}: top-p keeps {int(kept_p.sum())} tokens, top-k {int(kept_k.sum())}", fontsize=9
        )
        print(
            f"tau {tau:g}: top-p {p} keeps {int(kept_p.sum())} tokens ({float(probs[kept_p].sum()):.3f} of the mass), "
            f"top-k {k} keeps {float(probs[kept_k].sum()):.3f}"
        )
    axes[0].legend(fontsize=7, loc="upper right")
    axes[-1].set_xticks(range(len(order)), [names[int(i)] for i in order])
    axes[-1].set_xlabel(f"next token after {prompt!r} (the {tokens} most probable at temperature 1)")
    figure.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run of the lm recipe")
    parser.add_argument("--prompt", default="And the LORD said unto ")
    parser.add_argument("--out", type=Path, default=Path("docs/figures/decoding.png"))
    parser.add_argument("--tokens", type=int, default=25)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--top-p", type=float, default=0.9)
    args = parser.parse_args()
    logits, names = next_token_logits(args.run, args.prompt)
    draw(logits, names, args.out, prompt=args.prompt, tokens=args.tokens, k=args.top_k, p=args.top_p)


if __name__ == "__main__":
    main()
