"""seqlab's GPT against transformers' GPT2LMHeadModel of the same shape and weights, measured in the same run.

Both models hold the same random weights (the Hugging Face model is built from a GPT2Config and loaded into seqlab
with ``GPT.from_hf``), float32, dropout 0, on the CPU unless --device says otherwise. Rows:
    train     one iteration is forward on --batch random blocks of --context tokens, the next-token cross-entropy
              (the same expression for both), backward, an AdamW step and zero_grad; tokens/s = B * T / seconds.
    greedy    --new-tokens tokens at batch 1 after a 16-token prompt: seqlab's own loop (``prefill``, then
              ``step`` with the KV cache, argmax) against ``generate(do_sample=False)`` with its cache; tokens/s =
              new tokens / seconds. Both must pick the same tokens (checked and printed).
Beam search (``generate(num_beams=5)``) has no row yet: seqlab's generation engine lands separately.

Timing: each round runs both rows of a kind once, seqlab first in even rounds and transformers first in odd ones,
so neither the order nor load from other processes favours one. Over --repeats rounds after one warm-up round, the
table shows the median tokens/s with its interquartile range, and the ratio seqlab / transformers as the median of
the per-round ratios of times with its interquartile range; a ratio whose range straddles 1.00 separates nothing.

    python benchmarks/language_model.py                          # 4 layers, D = 256, context 256: about a minute
    python benchmarks/language_model.py --layers 1 --d-model 8 --heads 2 --context 8 --batch 2 --new-tokens 4 \\
        --vocab 16 --repeats 1                                   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel

from seqlab.models import GPT

PROMPT_LENGTH = 16


def next_token_loss(logits: Tensor, x: Tensor) -> Tensor:
    """Mean cross-entropy (nats) of x[:, t + 1] under logits[:, t]."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor) -> Callable[[], None]:
    def run() -> None:
        next_token_loss(model(x).logits, x).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return run


@torch.inference_mode()
def seqlab_greedy(model: GPT, prompt: Tensor, new_tokens: int) -> Tensor:
    out = model.prefill(prompt)
    chosen = []
    for i in range(new_tokens):
        token = out.logits.argmax(dim=-1)  # (B,)
        chosen.append(token)
        if i + 1 < new_tokens:
            out = model.step(token, out.state)
    return torch.stack(chosen, dim=1)  # (B, N)


@torch.inference_mode()
def hf_greedy(model: GPT2LMHeadModel, prompt: Tensor, new_tokens: int) -> Tensor:
    keep = torch.ones_like(prompt)  # else generate takes every pad_token_id in the prompt for padding
    out = model.generate(
        prompt, attention_mask=keep, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
    )
    return out[:, prompt.shape[1] :]


def time_pair(runs: list[Callable[[], object]], *, repeats: int, sync: Callable[[], None]) -> list[list[float]]:
    """Seconds per run (outer) and round (inner); the order of the two runs alternates by round; one warm-up."""
    seconds: list[list[float]] = [[] for _ in runs]
    for i in range(1 + repeats):
        order = range(len(runs)) if i % 2 == 0 else reversed(range(len(runs)))
        for r in order:
            start = time.perf_counter()
            runs[r]()
            sync()
            if i > 0:
                seconds[r].append(time.perf_counter() - start)
    return seconds


def median_and_iqr(values: list[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile); all three equal the value for a single one."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q1, q3


def print_rows(kind: str, tokens: int, seconds: list[list[float]]) -> None:
    ours, theirs = seconds
    ratio, r1, r3 = median_and_iqr([t / o for o, t in zip(ours, theirs, strict=True)])
    for name, row in (("seqlab GPT", ours), ("transformers GPT-2", theirs)):
        tps, q1, q3 = median_and_iqr([tokens / s for s in row])
        shown = f"{ratio:>7.2f}x {f'{r1:.2f}-{r3:.2f}':>11}" if name == "seqlab GPT" else f"{'1.00x':>8} {'':>11}"
        print(f"{kind:<8} {name:<20} {tps:>11,.0f} {f'{q1:,.0f}-{q3:,.0f}':>21} {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="L")
    parser.add_argument("--d-model", type=int, default=256, help="D")
    parser.add_argument("--heads", type=int, default=4, help="N")
    parser.add_argument("--context", type=int, default=256, help="training block length T (and >= the positions)")
    parser.add_argument("--vocab", type=int, default=4096, help="V")
    parser.add_argument("--batch", type=int, default=8, help="training blocks per iteration")
    parser.add_argument("--new-tokens", type=int, default=256, help="greedy tokens generated at batch 1")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="weights and inputs")
    args = parser.parse_args()
    for name in ("layers", "d_model", "heads", "context", "vocab", "batch", "new_tokens", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    positions = max(args.context, PROMPT_LENGTH + args.new_tokens)
    config = GPT2Config(
        vocab_size=args.vocab,
        n_positions=positions,
        n_embd=args.d_model,
        n_head=args.heads,
        n_layer=args.layers,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    hf = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as directory:
        hf.save_pretrained(directory)
        ours = GPT.from_hf(directory)
    models = [ours.to(device).train(), hf.to(device).train()]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    print(f"torch {torch.__version__}, device {device}, float32, {torch.get_num_threads()} CPU threads")
    shape = f"L={args.layers} D={args.d_model} N={args.heads} V={args.vocab} positions={positions}"
    print(f"{shape}, training blocks {args.batch} x {args.context}; {args.repeats} rounds")
    print("median [interquartile range]; rows alternate their order by round\n")
    header = f"{'row':<8} {'model':<20} {'tokens/s':>11} {'tokens/s IQR':>21} {'ratio':>8} {'ratio IQR':>11}"
    print(header)
    print("-" * len(header))

    x = torch.randint(0, args.vocab, (args.batch, args.context), generator=torch.Generator().manual_seed(args.seed))
    x = x.to(device)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]
    runs = [train_step(m, o, x) for m, o in zip(models, optimizers, strict=True)]
    print_rows("train", args.batch * args.context, time_pair(runs, repeats=args.repeats, sync=sync))

    for m in models:
        m.eval()
    prompt = torch.randint(0, args.vocab, (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(args.seed + 1))
    prompt = prompt.to(device)
    same = torch.equal(seqlab_greedy(ours, prompt, args.new_tokens), hf_greedy(hf, prompt, args.new_tokens))
    runs = [lambda: seqlab_greedy(ours, prompt, args.new_tokens), lambda: hf_greedy(hf, prompt, args.new_tokens)]
    print_rows("greedy", args.new_tokens, time_pair(runs, repeats=args.repeats, sync=sync))
    print(f"\nsame greedy tokens: {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
