"""seqlab's language models against their references of the same shape and weights, measured in the same run.

GPT rows: seqlab's GPT against transformers' GPT2LMHeadModel; both hold the same random weights (the Hugging Face
model is built from a GPT2Config and loaded into seqlab with ``GPT.from_hf``), float32, dropout 0, on the CPU
unless --device says otherwise.
    train     one iteration is forward on --batch random blocks of --context tokens, the next-token cross-entropy
              (the same expression for both), backward, an AdamW step and zero_grad; tokens/s = B * T / seconds.
    greedy    --new-tokens tokens at batch 1 after a 16-token prompt: ``seqlab.decoding.generate`` (the public
              path: prefill, then step with the KV cache, argmax) against ``generate(do_sample=False)`` with its
              cache; tokens/s = new tokens / seconds.
    beam      the same with --beams beams: ``seqlab.decoding.generate(num_beams=K)`` against
              ``generate(num_beams=K, do_sample=False)``, no EOS, so every beam runs --new-tokens steps; tokens/s =
              new tokens of the best beam / seconds.
Both sides of greedy and beam must pick the same tokens (checked and printed).
    compiled  with --compile, more rows under greedy and beam, timed in the same rounds: the same ``generate``
              over ``seqlab.models.CompiledGPT`` (``torch.compile`` of ``GPT.step`` over static KV caches of
              16 + --new-tokens slots, --compile-backend inductor), and over the static caches alone, uncompiled.
              Compiling happens in the first call (a warm-up before the rounds), timed apart: its wall and CPU
              seconds are printed with the steady per-token times, and the tokens after which compiling has paid
              for itself against the eager path, compile seconds / (eager - compiled seconds per token).
    products  with --products, a third row under greedy and beam, timed in the same rounds: the matrix products of
              those --new-tokens steps alone (each step's 6 L block products and its V x D head, at 1 or K rows,
              through ``seqlab.nn.direct_calls`` as the step computes them, at one row the widening ones from
              transposed copies, on the model's weights). Its ratio,
              transformers' time over the products' time, is the most seqlab could reach at that shape with no
              per-step cost besides the products (no attention, norms, cache, search or Python).
RNN row: seqlab's ``RNNLanguageModel`` (fused LSTM) against a bare torch.nn language model (Embedding ->
torch.nn.LSTM -> Linear) with the same weights, at Zaremba et al.'s small shape by default (2 x 200, V = 10000,
batch 20, bptt 35): forward from the previous batch's detached state, cross-entropy, backward, gradient clipping at
5, an SGD step; tokens/s = batch * bptt / seconds.

Timing: each round runs both rows of a kind once, seqlab first in even rounds and the reference first in odd ones,
so neither the order nor load from other processes favours one. Over --repeats rounds after one warm-up round, the
table shows the median tokens/s with its interquartile range, and the ratio seqlab / reference as the median of
the per-round ratios of times with its interquartile range; a ratio whose range straddles 1.00 separates nothing.
Times are wall time, or with --clock cpu this process's CPU time, which other processes on a shared CPU disturb
far less (with one thread it is the time the work took; with more, it sums the threads).

    python benchmarks/language_model.py --threads 1              # 4 layers, D = 256, context 256: 1-2 minutes
    python benchmarks/language_model.py --threads 1 --rows greedy,beam --products --clock cpu   # what bounds them
    python benchmarks/language_model.py --threads 1 --rows greedy,beam --compile --clock cpu   # compiled rows
    python benchmarks/language_model.py --layers 1 --d-model 8 --heads 2 --context 8 --batch 2 --new-tokens 4 \\
        --vocab 16 --beams 2 --rnn-size 4 --rnn-vocab 16 --rnn-batch 2 --bptt 3 --repeats 1   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from timing import median_and_iqr, time_pair
from torch import Tensor, nn

from seqlab.decoding import generate
from seqlab.logs import quiet_loggers
from seqlab.models import GPT, CompiledGPT, RNNLanguageModel, RNNLanguageModelConfig
from seqlab.models.quantized import TORCHAO_IMPORT_LOGGERS
from seqlab.nn import direct_calls

# transformers imports torchao where it is installed, which logs at import what a CPU run does not use (its
# CUDA-only kernels did not load); seqlab's own torchao import is lazy (seqlab.models.quantized).
with quiet_loggers(TORCHAO_IMPORT_LOGGERS):
    from transformers import GPT2Config, GPT2LMHeadModel

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


class TorchLSTMLanguageModel(nn.Module):
    """The bare reference: Embedding -> torch.nn.LSTM (batch first) -> Linear."""

    def __init__(self, vocab_size: int, size: int, num_layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, size)
        self.lstm = nn.LSTM(size, size, num_layers=num_layers, batch_first=True)
        self.output = nn.Linear(size, vocab_size)

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        hidden, state = self.lstm(self.embedding(x), state)
        return self.output(hidden), state


def copy_into_torch(ours: RNNLanguageModel, theirs: TorchLSTMLanguageModel) -> None:
    """Give the torch.nn model seqlab's weights."""
    theirs.lstm = ours.rnn.to_torch()
    if not theirs.lstm.batch_first:
        raise RuntimeError("seqlab's LSTM converted to a torch.nn.LSTM that is not batch first")
    with torch.no_grad():
        theirs.embedding.weight.copy_(ours.embedding.weight)
        theirs.output.weight.copy_(ours.output.weight)
        theirs.output.bias.copy_(ours.output.bias)


def tbptt_step(forward: Callable, optimizer: torch.optim.Optimizer, batches: list[Tensor]) -> Callable[[], None]:
    """One truncated-BPTT iteration per call over the next batch (cycling), carrying the detached state."""
    carried: list = [None, 0]

    def run() -> None:
        x = batches[carried[1] % len(batches)]
        carried[1] += 1
        logits, state = forward(x, carried[0])
        next_token_loss(logits, x).backward()
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        nn.utils.clip_grad_norm_(parameters, 5.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        carried[0] = getattr(state, "_make", tuple)(s.detach() for s in state)  # LSTMState or torch.nn's (h, c)

    return run


@torch.inference_mode()
def seqlab_generate(model: GPT | CompiledGPT, prompt: Tensor, new_tokens: int, beams: int) -> Tensor:
    out = generate(model, prompt, max_new_tokens=new_tokens, num_beams=beams)
    return out.tokens[:, prompt.shape[1] :]


@torch.inference_mode()
def hf_generate(model: GPT2LMHeadModel, prompt: Tensor, new_tokens: int, beams: int) -> Tensor:
    keep = torch.ones_like(prompt)  # else generate takes every pad_token_id in the prompt for padding
    out = model.generate(
        prompt,
        attention_mask=keep,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        num_beams=beams,
    )
    return out[:, prompt.shape[1] :]


@torch.inference_mode()
def step_products(model: GPT, rows: int, steps: int) -> None:
    """The matrix products of ``steps`` decoding steps of ``rows`` rows alone: each Linear of the decoder's layers and
    the tied V x D head, computed as ``GPT.step`` computes them (``direct_calls``: at one row, q, k, v stacked, the
    first feed-forward layer and the head from transposed copies made once; at a few rows, q, k, v as one product
    over their weights stacked), on the model's weights and constant inputs."""
    weight = model.wte.weight
    derived = direct_calls.DerivedWeights()
    groups = []  # the step's products, in its order
    for layer in model.decoder.layers:
        attention, feed_forward = layer.self_attn, layer.feed_forward
        groups += [(attention.q_proj, attention.k_proj, attention.v_proj), (attention.out_proj,)]
        groups += [(feed_forward.linear1,), (feed_forward.linear2,)]
    inputs = {m.in_features: torch.ones(rows, m.in_features, device=weight.device) for g in groups for m in g}
    h = torch.ones(rows, model.config.d_model, device=weight.device)
    few = direct_calls.few_rows(h)
    for _ in range(steps):
        for group in groups:
            x = inputs[group[0].in_features]
            if direct_calls.stacked_linear(group, x, derived) is None:
                for m in group:
                    direct_calls.linear(m, x, few=few)
        if direct_calls.stacked_product(h, (weight,), (), derived) is None:
            direct_calls.affine(h, weight) if few else F.linear(h, weight)


def print_rows(
    kind: str, names: tuple[str, str], tokens: int, seconds: list[list[float]], *, reference: bool = True
) -> None:
    """One line per run: tokens/s and, for the first, the ratio of times against the second (the reference), whose
    own line is printed only if ``reference``."""
    ours, theirs = seconds
    ratio, r1, r3 = median_and_iqr([t / o for o, t in zip(ours, theirs, strict=True)])
    shown = 2 if reference else 1
    for name, row in zip(names[:shown], seconds[:shown], strict=True):
        tps, q1, q3 = median_and_iqr([tokens / s for s in row])
        shown = f"{ratio:>7.2f}x {f'{r1:.2f}-{r3:.2f}':>11}" if row is ours else f"{'1.00x':>8} {'':>11}"
        print(f"{kind:<8} {name:<20} {tps:>11,.0f} {f'{q1:,.0f}-{q3:,.0f}':>21} {shown}", flush=True)


GPT_NAMES = ("seqlab GPT", "transformers GPT-2")
SIZES = ("layers", "d_model", "heads", "context", "vocab", "batch", "new_tokens", "beams")
RNN_SIZES = ("rnn_size", "rnn_layers", "rnn_vocab", "rnn_batch", "bptt")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="L")
    parser.add_argument("--d-model", type=int, default=256, help="D")
    parser.add_argument("--heads", type=int, default=4, help="N")
    parser.add_argument("--context", type=int, default=256, help="training block length T (and >= the positions)")
    parser.add_argument("--vocab", type=int, default=4096, help="V")
    parser.add_argument("--batch", type=int, default=8, help="training blocks per iteration")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generated at batch 1 (greedy, beam)")
    parser.add_argument("--beams", type=int, default=5, help="K of the beam rows")
    parser.add_argument("--rnn-size", type=int, default=200, help="embedding and hidden size of the RNN rows")
    parser.add_argument("--rnn-layers", type=int, default=2, help="LSTM layers of the RNN rows")
    parser.add_argument("--rnn-vocab", type=int, default=10000, help="V of the RNN rows")
    parser.add_argument("--rnn-batch", type=int, default=20, help="parallel streams of the RNN rows")
    parser.add_argument("--bptt", type=int, default=35, help="truncated-BPTT length of the RNN rows")
    parser.add_argument("--rows", default="train,greedy,beam,rnn", help="comma-separated row kinds to run")
    parser.add_argument(
        "--products", action="store_true", help="also time greedy's and beam's matrix products alone (see above)"
    )
    parser.add_argument(
        "--compile", action="store_true", help="also time the compiled step and the static caches alone (see above)"
    )
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile's backend of the compiled rows")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="weights and inputs")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or this process's CPU time (less disturbed by other processes on a shared CPU)",
    )
    args = parser.parse_args()
    for name in (*SIZES, *RNN_SIZES, "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    args.rows = args.rows.split(",")
    args.clock = time.perf_counter if args.clock == "wall" else time.process_time
    unknown = set(args.rows) - {"train", "greedy", "beam", "rnn"}
    if unknown:
        parser.error(f"--rows takes train, greedy, beam, rnn; got {', '.join(sorted(unknown))}")
    return args


def gpt_pair(args: argparse.Namespace, device: torch.device) -> tuple[GPT, GPT2LMHeadModel]:
    """seqlab's GPT and transformers' GPT-2 with the same random weights."""
    config = GPT2Config(
        vocab_size=args.vocab,
        n_positions=max(args.context, PROMPT_LENGTH + args.new_tokens),
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
    return ours.to(device), hf.to(device)


def gpt_rows(args: argparse.Namespace, device: torch.device, sync: Callable[[], None]) -> list[str]:
    """Time the GPT rows asked for; return the lines saying whether both sides chose the same tokens."""
    models = gpt_pair(args, device)
    ours, hf = models
    notes = []
    if "train" in args.rows:
        x = torch.randint(0, args.vocab, (args.batch, args.context), generator=torch.Generator().manual_seed(args.seed))
        x = x.to(device)
        for m in models:
            m.train()
        optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]
        runs = [train_step(m, o, x) for m, o in zip(models, optimizers, strict=True)]
        print_rows(
            "train",
            GPT_NAMES,
            args.batch * args.context,
            time_pair(runs, repeats=args.repeats, sync=sync, clock=args.clock),
        )
    for m in models:
        m.eval()
    generator = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(0, args.vocab, (1, PROMPT_LENGTH), generator=generator).to(device)
    capacity = PROMPT_LENGTH + args.new_tokens
    compiled = CompiledGPT(ours, capacity=capacity, compile_backend=args.compile_backend) if args.compile else None
    static = CompiledGPT(ours, capacity=capacity, compile_backend=None) if args.compile else None
    for kind, beams in (("greedy", 1), ("beam", args.beams)):
        if kind not in args.rows:
            continue
        label = kind if beams == 1 else f"beam K={beams}"
        expected = hf_generate(hf, prompt, args.new_tokens, beams)
        same = torch.equal(seqlab_generate(ours, prompt, args.new_tokens, beams), expected)
        notes.append(f"same {label} tokens: {'yes' if same else 'no'}")
        runs = [
            lambda b=beams: seqlab_generate(ours, prompt, args.new_tokens, b),
            lambda b=beams: hf_generate(hf, prompt, args.new_tokens, b),
        ]
        extra = []
        if args.products:
            runs.append(lambda b=beams: step_products(ours, b, args.new_tokens))
            extra.append("products alone")
        if compiled is not None:
            wall, cpu = time.perf_counter(), time.process_time()
            same = torch.equal(seqlab_generate(compiled, prompt, args.new_tokens, beams), expected)
            warm_up = (time.perf_counter() - wall, time.process_time() - cpu)  # (wall, CPU) seconds
            notes.append(f"same {label} tokens compiled: {'yes' if same else 'no'}")
            same = torch.equal(seqlab_generate(static, prompt, args.new_tokens, beams), expected)
            notes.append(f"same {label} tokens with static caches: {'yes' if same else 'no'}")
            runs.append(lambda b=beams: seqlab_generate(compiled, prompt, args.new_tokens, b))
            runs.append(lambda b=beams: seqlab_generate(static, prompt, args.new_tokens, b))
            extra += ["seqlab compiled", "static caches alone"]
        seconds = time_pair(runs, repeats=args.repeats, sync=sync, clock=args.clock)
        print_rows(kind, GPT_NAMES, args.new_tokens, seconds[:2])
        for name, row in zip(extra, seconds[2:], strict=True):
            print_rows(kind, (name, GPT_NAMES[1]), args.new_tokens, [row, seconds[1]], reference=False)
        if compiled is not None:
            notes.append(compile_note(label, warm_up, seconds[0], seconds[extra.index("seqlab compiled") + 2], args))
    return notes


def compile_note(
    label: str, warm_up: tuple[float, float], eager: list[float], compiled: list[float], args: argparse.Namespace
) -> str:
    """The compiled rows' first call (compiling included, wall and CPU seconds), steady ms per token of the eager and
    compiled paths, and the tokens after which compiling pays for itself."""
    eager_token = statistics.median(eager) / args.new_tokens
    compiled_token = statistics.median(compiled) / args.new_tokens
    gain = eager_token - compiled_token
    first = warm_up[0] if args.clock is time.perf_counter else warm_up[1]  # on the rows' clock
    payback = f"{(first - statistics.median(compiled)) / gain:,.0f} tokens" if gain > 0 else "never"
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]  # one per batch size, none per step
    return (
        f"{label} compiled: first call {warm_up[0]:.1f} s wall, {warm_up[1]:.1f} s CPU (compiling); steady "
        f"{compiled_token * 1e3:.2f} ms/token against eager {eager_token * 1e3:.2f}; pays back after {payback}; "
        f"{graphs} graph(s) compiled so far"
    )


def rnn_rows(args: argparse.Namespace, device: torch.device, sync: Callable[[], None]) -> None:
    """Time seqlab's RNN language model against the bare torch.nn one at the same weights."""
    config = RNNLanguageModelConfig(
        vocab_size=args.rnn_vocab,
        embedding_size=args.rnn_size,
        hidden_size=args.rnn_size,
        num_layers=args.rnn_layers,
        cell="lstm",
        init_range=0.1,
    )
    ours = RNNLanguageModel(config).to(device).train()
    theirs = TorchLSTMLanguageModel(args.rnn_vocab, args.rnn_size, args.rnn_layers).to(device).train()
    copy_into_torch(ours, theirs)
    generator = torch.Generator().manual_seed(args.seed + 2)
    batches = [
        torch.randint(0, args.rnn_vocab, (args.rnn_batch, args.bptt), generator=generator).to(device) for _ in range(4)
    ]
    runs = [
        tbptt_step(lambda x, s: ours(x, s), torch.optim.SGD(ours.parameters(), lr=1.0), batches),
        tbptt_step(theirs, torch.optim.SGD(theirs.parameters(), lr=1.0), batches),
    ]
    names = ("seqlab RNN LM", "torch.nn LSTM LM")
    print_rows(
        "rnn", names, args.rnn_batch * args.bptt, time_pair(runs, repeats=args.repeats, sync=sync, clock=args.clock)
    )


def main() -> None:
    args = parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    print(f"torch {torch.__version__}, device {device}, float32, {torch.get_num_threads()} CPU threads")
    positions = max(args.context, PROMPT_LENGTH + args.new_tokens)
    shape = f"GPT L={args.layers} D={args.d_model} N={args.heads} V={args.vocab} positions={positions}"
    print(f"{shape}, training blocks {args.batch} x {args.context}, {args.new_tokens} new tokens, K={args.beams}")
    rnn = f"{args.rnn_layers} x {args.rnn_size} LSTM, V={args.rnn_vocab}, batch {args.rnn_batch}, bptt {args.bptt}"
    print(f"RNN LM {rnn}; {args.repeats} rounds")
    clock = "wall" if args.clock is time.perf_counter else "CPU"
    print(f"median [interquartile range] of {clock} times; rows alternate their order by round\n")
    header = f"{'row':<8} {'model':<20} {'tokens/s':>11} {'tokens/s IQR':>21} {'ratio':>8} {'ratio IQR':>11}"
    print(header)
    print("-" * len(header))
    notes = gpt_rows(args, device, sync) if {"train", "greedy", "beam"} & set(args.rows) else []
    if "rnn" in args.rows:
        rnn_rows(args, device, sync)
    print()
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
