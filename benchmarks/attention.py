"""Cost of attention against sequence length, and of incremental decoding with and without the KV cache.

Table 1: one attention layer's core, q, k, v (B, N, T, Dh) -> output (B, N, T, Dh), causal, for
T = 256, 512, ... up to --max-T. One iteration is the forward pass, ``output.sum().backward()`` and clearing
the gradients of q, k, v. Paths:
    reference  seqlab's ``scaled_dot_product_attention(..., need_weights=True)``: explicit (T, T) scores and
               softmax, so its memory grows as T^2;
    sdpa       the same function without weights: ``torch.nn.functional.scaled_dot_product_attention``
               (flash / memory-efficient kernels where the device has them), memory linear in T;
    local      ``seqlab.nn.functional.attention.local_attention`` with --window keys per query;
    linear     ``seqlab.nn.functional.attention.linear_attention`` (Katharopoulos et al. 2020).
Columns: median milliseconds per iteration, peak memory in MiB, both as ratios to the reference at the same T
(measured in the same run, rows taking turns), and "mem / T/2", the peak's growth from the previous T
(2 = linear in T, 4 = quadratic).

Peak memory is the largest total size of the tensors alive at once during one iteration, the inputs q, k, v
excluded. On CUDA it is ``torch.cuda.max_memory_allocated`` (reset before the iteration) minus what was
allocated before it. On CPU, where PyTorch keeps no such statistic, a ``TorchDispatchMode`` sees every tensor
that every operator returns, forward and backward (activations, tensors saved for backward, gradients), adds
its storage's size when the storage first appears and subtracts it when the storage is freed (a weakref
finalizer); scratch space that a kernel allocates and frees inside one operator is not seen. The memory pass
is a separate, untimed iteration. A reference row whose (T, T) tensors would not fit in --memory-limit-gib
is skipped rather than run into the operating system's out-of-memory killer.

Table 2: greedy decoding of a G2P-size ``TransformerSeq2Seq`` (D = 256, N = 4, d_ff = 1024, 3 + 3 pre-LN
layers, rotary positions, random weights) on --decode-batch random words of 4 to 12 letters, --new-tokens
tokens per word (EOS does not stop it), three ways: with the KV cache (``encode`` once, then ``step``); without
it (``encode`` once, then the decoder over the whole prefix at every step, as a model without a cache must),
the baseline of the ratio column; and, for comparison with earlier tables, ``forward`` on the source and the
prefix at every step, which also re-runs the encoder every step and so overstates what the cache saves.
tokens/s counts generated tokens (batch x new tokens) per second, encoding included. All paths must pick the
same tokens (checked).

    python benchmarks/attention.py                     # the full run: estimated 1-2 minutes on 2 CPU cores
    python benchmarks/attention.py --max-T 512 --repeats 1 --decode-batch 4 --new-tokens 4   # smoke test
    python benchmarks/attention.py --device cuda --max-T 16384
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from seqlab.models.seq2seq.transformer import TransformerDecoderState, TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.nn.functional.attention import linear_attention, local_attention, scaled_dot_product_attention

MIB = 2**20
AttentionFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def attention_paths(window: int) -> dict[str, AttentionFn]:
    """The four attention cores, each (q, k, v) -> output (B, N, T, Dh), causal."""
    return {
        "reference": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal=True, need_weights=True).output,
        "sdpa": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal=True).output,
        "local": lambda q, k, v: local_attention(q, k, v, window=window, causal=True).output,
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=True).output,
    }


class LiveTensorBytes(TorchDispatchMode):
    """Tracks the bytes of tensor storages created by operators while active, and their peak.

    A storage is counted once however many views of it operators return, and uncounted when it is freed; the
    finalizer fires when the C++ storage dies (its Python object is kept alive for as long as the storage is).
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key = storage._cdata
                if key not in self.live:
                    self.live[key] = storage.nbytes()
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(storage, self._free, key)
        return out


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward_backward(fn: AttentionFn, q: Tensor, k: Tensor, v: Tensor) -> None:
    fn(q, k, v).sum().backward()
    for x in (q, k, v):
        x.grad = None


def peak_mib(fn: AttentionFn, q: Tensor, k: Tensor, v: Tensor) -> float:
    """Peak MiB of tensors alive during one forward + backward, q, k, v excluded (see the module docstring)."""
    if q.device.type == "cuda":
        synchronize(q.device)
        base = torch.cuda.memory_allocated(q.device)
        torch.cuda.reset_peak_memory_stats(q.device)
        forward_backward(fn, q, k, v)
        synchronize(q.device)
        return (torch.cuda.max_memory_allocated(q.device) - base) / MIB
    tracker = LiveTensorBytes()
    with tracker:
        forward_backward(fn, q, k, v)
    return tracker.peak / MIB


def median_ms(calls: dict[str, Callable[[], object]], *, device: torch.device, warmup: int, repeats: int):
    """Median milliseconds per call; the calls take turns, so load from other processes spreads over all
    of them. A call that runs out of memory is dropped: its entry is "OOM" instead."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    failed: dict[str, str] = {}
    for i in range(warmup + repeats):
        for name, call in calls.items():
            if name in failed:
                continue
            try:
                synchronize(device)
                start = time.perf_counter()
                call()
                synchronize(device)
            except (torch.OutOfMemoryError, RuntimeError) as e:
                if "memory" not in str(e) and "allocate" not in str(e):
                    raise
                failed[name] = "OOM"
                continue
            if i >= warmup:
                times[name].append(1000 * (time.perf_counter() - start))
    return {name: failed.get(name) or statistics.median(times[name]) for name in calls}


def memory_limit_bytes(device: torch.device, limit_gib: float | None) -> float:
    if limit_gib is not None:
        return limit_gib * 2**30
    if device.type == "cuda":
        return 0.9 * torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return 0.7 * available


def ratio(value: float | str, reference: float | str | None) -> str:
    if isinstance(value, str) or not isinstance(reference, float):
        return "-"
    return f"{value / reference:.2f}x"


def number(value: float | str, digits: int) -> str:
    return value if isinstance(value, str) else f"{value:,.{digits}f}"


def sequence_lengths(max_T: int) -> list[int]:
    """256, 512, ... up to max_T (just max_T if that is shorter than 256)."""
    lengths = [256]
    while lengths[-1] * 2 <= max_T:
        lengths.append(lengths[-1] * 2)
    return lengths if max_T >= 256 else [max_T]


def attention_rows(
    T: int,
    args: argparse.Namespace,
    paths: dict[str, AttentionFn],
    *,
    limit: float,
    previous_peak: dict[str, float | str],
    device: torch.device,
    dtype: torch.dtype,
) -> dict[str, float | str]:
    """Time and measure every path at length T, print its rows, and return the peaks (MiB or a reason)."""
    B, N, Dh = args.batch, args.heads, args.head_dim
    g = torch.Generator(device=device).manual_seed(T)
    q, k, v = (torch.randn(B, N, T, Dh, generator=g, device=device, dtype=dtype).requires_grad_() for _ in range(3))
    # The reference holds about four (B, N, T, T) tensors at once in the backward pass.
    reference_bytes = 4 * B * N * T * T * q.element_size()
    skipped = {}
    if reference_bytes > limit:
        skipped["reference"] = "skipped"
    calls = {name: (lambda fn=fn: forward_backward(fn, q, k, v)) for name, fn in paths.items() if name not in skipped}
    ms = {**skipped, **median_ms(calls, device=device, warmup=args.warmup, repeats=args.repeats)}
    peaks = {name: value if isinstance(value := ms[name], str) else peak_mib(paths[name], q, k, v) for name in paths}
    for name in paths:
        print(
            f"{T:>6} {name:<10} {number(ms[name], 1):>10} {ratio(ms[name], ms['reference']):>10} "
            f"{number(peaks[name], 1):>10} {ratio(peaks[name], peaks['reference']):>10} "
            f"{ratio(peaks[name], previous_peak.get(name)):>10}"
        )
    if skipped:
        print(
            f"{'':>6} (reference: ~{reference_bytes / 2**30:.1f} GiB of (T, T) tensors > {limit / 2**30:.1f} GiB limit)"
        )
    return peaks


def attention_table(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> None:
    B, N, Dh = args.batch, args.heads, args.head_dim
    print(f"Attention core, causal, fwd+bwd: B={B}, N={N}, Dh={Dh}, window={args.window}, {dtype}")
    header = f"{'T':>6} {'path':<10} {'ms':>10} {'time / ref':>10} {'peak MiB':>10} {'mem / ref':>10} {'mem / T/2':>10}"
    print(header)
    print("-" * len(header))
    paths = attention_paths(args.window)
    limit = memory_limit_bytes(device, args.memory_limit_gib)
    previous_peak: dict[str, float | str] = {}
    for T in sequence_lengths(args.max_T):
        peaks = attention_rows(T, args, paths, limit=limit, previous_peak=previous_peak, device=device, dtype=dtype)
        previous_peak = peaks
    print()


def encode(model: TransformerSeq2Seq, src: Tensor, lengths: Tensor) -> TransformerDecoderState:
    """The model's encoder state for decoding, computed once per batch of words."""
    return model.encode(src, lengths)


def decoder_logits(model: TransformerSeq2Seq, state: TransformerDecoderState, prefix: Tensor) -> Tensor:
    """Logits (B, V) at the last position of ``prefix`` (B, t) from the decoder alone over the whole prefix,
    without a cache, reading the encoder output that ``state`` holds: what a model without a KV cache
    computes at every step. The step interface has no whole-prefix call, so this is the one place that
    reaches into the model's parts (its target embedding, decoder and output layer, and the state's fields)."""
    x = model._embed(model.tgt_embedding, prefix, 0)  # (B, t, D)
    out = model.decoder(x, state.memory_kv, memory_keep_mask=state.src_keep_mask)
    return model.output(out.output[:, -1])  # (B, V)


def greedy_tokens(model: TransformerSeq2Seq, src: Tensor, lengths: Tensor, new_tokens: int, *, path: str) -> Tensor:
    """(B, new_tokens) argmax tokens after BOS, EOS included (nothing stops early), by one of three paths:
    "cached" (``encode`` once, then ``step``), "uncached" (``encode`` once, then the decoder over the whole
    prefix at every step) or "forward" (``forward`` on the source and the whole prefix at every step, which
    re-runs the encoder too: the former baseline, kept to show how much that inflates the speed-up)."""
    bos = torch.full((src.shape[0],), model.config.bos_id, device=src.device)
    if path == "cached":
        state = encode(model, src, lengths)
        tokens = bos
        generated = []
        for _ in range(new_tokens):
            logits, state = model.step(tokens, state)
            tokens = logits.argmax(dim=-1)
            generated.append(tokens)
        return torch.stack(generated, dim=1)
    state = encode(model, src, lengths) if path == "uncached" else None
    prefix = bos.unsqueeze(1)  # (B, 1)
    for _ in range(new_tokens):
        # (B, V); without a state, forward runs the encoder and the decoder again
        logits = model(src, lengths, prefix).logits[:, -1] if state is None else decoder_logits(model, state, prefix)
        prefix = torch.cat([prefix, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return prefix[:, 1:]


@torch.no_grad()
def decoding_table(args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(args.seed)
    config = TransformerSeq2SeqConfig(
        src_vocab_size=32, tgt_vocab_size=42, d_model=256, num_heads=4, d_ff=1024, encoder_layers=3, decoder_layers=3
    )
    model = TransformerSeq2Seq(config).to(device).eval()
    B, steps = args.decode_batch, args.new_tokens
    g = torch.Generator().manual_seed(args.seed)
    lengths = torch.randint(4, 13, (B,), generator=g)
    src = torch.randint(3, config.src_vocab_size, (B, int(lengths.max())), generator=g)
    src, lengths = src.to(device), lengths.to(device)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"Greedy decoding, TransformerSeq2Seq D=256 N=4 d_ff=1024 3+3 layers ({params:,} parameters), "
        f"batch {B}, {steps} new tokens, sources of 4-12 tokens, float32"
    )
    paths = {
        "KV cache (step)": "cached",
        "no cache (decoder on prefix)": "uncached",
        "no cache, encoder every step": "forward",
    }
    tokens = {name: greedy_tokens(model, src, lengths, steps, path=path) for name, path in paths.items()}
    same = all(torch.equal(t, tokens["KV cache (step)"]) for t in tokens.values())
    calls = {
        name: (lambda path=path: greedy_tokens(model, src, lengths, steps, path=path)) for name, path in paths.items()
    }
    ms = median_ms(calls, device=device, warmup=args.warmup, repeats=args.repeats)
    tokens_per_s = {name: value if isinstance(value, str) else B * steps / (value / 1000) for name, value in ms.items()}
    header = f"{'path':<30} {'ms':>10} {'tokens/s':>12} {'vs no cache':>12}"
    print(header)
    print("-" * len(header))
    baseline = tokens_per_s["no cache (decoder on prefix)"]
    for name in calls:
        print(
            f"{name:<30} {number(ms[name], 1):>10} {number(tokens_per_s[name], 0):>12} "
            f"{ratio(tokens_per_s[name], baseline):>12}"
        )
    print(f"same tokens on every path: {'yes' if same else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-T", dest="max_T", type=int, default=8192, help="longest sequence (from 256, doubling)")
    parser.add_argument("--repeats", type=int, default=3, help="timed iterations per row (median is shown)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations before timing")
    parser.add_argument("--batch", type=int, default=1, help="B of the attention table")
    parser.add_argument("--heads", type=int, default=4, help="N of the attention table")
    parser.add_argument("--head-dim", type=int, default=64, help="Dh of the attention table")
    parser.add_argument("--window", type=int, default=128, help="keys per query of local attention")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32", help="attention")
    parser.add_argument("--memory-limit-gib", type=float, help="skip the reference above this (default: ~free memory)")
    parser.add_argument("--decode-batch", type=int, default=64, help="words decoded together in the decoding table")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per word")
    parser.add_argument("--only", choices=["attention", "decoding"], help="print one table only")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--threads", type=int, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in ("max_T", "repeats", "batch", "heads", "head_dim", "window", "decode_batch", "new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"torch {torch.__version__}, device {device} ({name})")
    print(f"median of {args.repeats} interleaved rounds after {args.warmup} warmup\n")
    if args.only != "decoding":
        attention_table(args, device, getattr(torch, args.dtype))
    if args.only != "attention":
        decoding_table(args, device)


if __name__ == "__main__":
    main()
