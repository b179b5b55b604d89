"""One training step of seqlab's GPT against nanoGPT's, in one process, at nanoGPT's CPU shakespeare_char size.

nanoGPT's ``model.py`` (Karpathy, MIT licence) is loaded from a checkout the user points to (``--nanogpt-dir``);
nothing of it is copied here. Both models have the same shape (4 layers, 4 heads, d_model 128, context 64, 65
characters, exact GELU, biases, dropout 0) and take the same batches of 12 blocks; a step is the forward pass, the
mean cross-entropy, the backward pass and the optimizer's update. Each side's optimizer is its own: nanoGPT's
``configure_optimizers`` (AdamW, decay 0.1, beta_2 0.99; torch's loop over parameters on a CPU) and seqlab's
``build_optimizer`` with the ``lm`` default's Adam (torch's fused kernel where it has one), plus seqlab's GPT with
torch's loop (``foreach=False``), the optimizer it had before. The sides alternate in rounds of ``--steps`` steps so
that a shared machine's load falls on all of them alike; the table gives the CPU time of a step (process time, so
time spent waiting for a core is not counted) and its ratio to nanoGPT's.

    nice python benchmarks/nanogpt_step.py --nanogpt-dir ~/src/nanoGPT --rounds 6
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from seqlab.models import GPT
from seqlab.models.language_model.gpt import GPTConfig
from seqlab.recipes.lm import Config
from seqlab.training.optim import build_optimizer

VOCAB, LAYERS, HEADS, WIDTH, CONTEXT, BATCH = 65, 4, 4, 128, 64, 12


def nanogpt_step(nanogpt_dir: Path, inputs: torch.Tensor, targets: torch.Tensor) -> Callable[[], None]:
    """A training step of nanoGPT's own model and optimizer (from its ``model.py``)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", nanogpt_dir / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.GPTConfig(
        block_size=CONTEXT, vocab_size=VOCAB, n_layer=LAYERS, n_head=HEADS, n_embd=WIDTH, dropout=0.0, bias=True
    )
    model = module.GPT(config)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")

    def step() -> None:
        _, loss = model(inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def seqlab_step(inputs: torch.Tensor, targets: torch.Tensor, *, fused: bool) -> Callable[[], None]:
    """A training step of seqlab's GPT with the ``lm`` default's optimizer, fused or torch's loop."""
    model = GPT(GPTConfig(vocab_size=VOCAB, context_length=CONTEXT, d_model=WIDTH, num_heads=HEADS, activation="gelu"))
    if fused:
        optimizer = build_optimizer(model, Config().train)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)

    def step() -> None:
        logits = model(inputs).logits  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nanogpt-dir", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds per side")
    parser.add_argument("--steps", type=int, default=20, help="training steps per round")
    args = parser.parse_args()
    if not (args.nanogpt_dir / "model.py").is_file():
        parser.error(f"--nanogpt-dir {args.nanogpt_dir}: no nanoGPT checkout there (model.py)")
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be >= 1")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    blocks = torch.randint(VOCAB, (BATCH, CONTEXT + 1))
    inputs, targets = blocks[:, :-1].contiguous(), blocks[:, 1:].contiguous()  # (B, T) each
    sides = {
        "nanoGPT (its AdamW)": nanogpt_step(args.nanogpt_dir, inputs, targets),
        "seqlab (fused Adam)": seqlab_step(inputs, targets, fused=True),
        "seqlab (Adam, torch's loop)": seqlab_step(inputs, targets, fused=False),
    }
    seconds = dict.fromkeys(sides, 0.0)
    for side in sides.values():  # warm-up
        side()
    for _ in range(args.rounds):
        for name, step in sides.items():
            start = time.process_time()
            for _ in range(args.steps):
                step()
            seconds[name] += time.process_time() - start
    steps = args.rounds * args.steps
    reference = seconds["nanoGPT (its AdamW)"]
    print(f"1 thread, {steps} steps per side in {args.rounds} alternating rounds; CPU time per step")
    print(f"{'side':<28} {'ms / step':>10} {'/ nanoGPT':>10}")
    for name, total in seconds.items():
        print(f"{name:<28} {1000 * total / steps:>10.1f} {total / reference:>9.3f}x")


if __name__ == "__main__":
    main()
