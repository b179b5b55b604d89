"""Cost against sequence length: time and peak memory of one layer for growing T at a fixed width D.

The asymptotic costs of one layer (Vaswani et al., 2017, Table 1; Beltagy et al., 2020 for the window;
Katharopoulos et al., 2020 for linear attention), T steps, width D, window r:

    layer                     per-layer complexity   sequential operations   maximum path length
    recurrent (RNN/GRU/LSTM)  O(T D^2)               O(T)                    O(T)
    self-attention (full)     O(T^2 D)               O(1)                    O(1)
    self-attention (local r)  O(T r D)               O(1)                    O(T / r)
    linear attention          O(T D^2)               O(1)                    O(1)
    S4D, convolution form     O(T D (N + log T))     O(log T)                O(1)
    S4D, recurrent scan       O(T D N)               O(T)                    O(T)

(S4D: Gu et al., 2022, N the state size; the convolution form builds the kernel in O(T D N) and convolves by FFT
in O(T D log T); ``seqlab.nn.state_space``.) The S4D rows measure a whole ``S4DBlock``, whose GLU projection
adds O(T D^2), as a Transformer layer's feed-forward network does; its state size is ``SSM_STATE_SIZE``.
A Transformer layer adds its projections and feed-forward network, O(T D^2), to the attention: at moderate T the
full layer's time grows with an exponent between 1 and 2, reaching 2 once T D dominates D^2. The measured exponent
is the least-squares slope of log cost against log T over the upper half of the lengths measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.analysis.gradients import least_squares_slope
from seqlab.analysis.memory import measure_call
from seqlab.nn import GRU, LSTM, RNN, S4DBlock, TransformerEncoderLayer
from seqlab.validation import check_choice, check_int


class Cost(NamedTuple):
    """One row of the seeds' cost table; exponent: the power of T in the per-layer complexity."""

    complexity: str
    sequential: str
    path_length: str
    exponent: int


COST_TABLE = {
    "rnn": Cost("O(T D^2)", "O(T)", "O(T)", 1),
    "gru": Cost("O(T D^2)", "O(T)", "O(T)", 1),
    "lstm": Cost("O(T D^2)", "O(T)", "O(T)", 1),
    "attention_reference": Cost("O(T^2 D)", "O(1)", "O(1)", 2),
    "attention_fused": Cost("O(T^2 D)", "O(1)", "O(1)", 2),
    "attention_local": Cost("O(T r D)", "O(1)", "O(T/r)", 1),
    "attention_linear": Cost("O(T D^2)", "O(1)", "O(1)", 1),
    "ssm_convolution": Cost("O(T D (N + log T))", "O(log T)", "O(1)", 1),
    "ssm_recurrent": Cost("O(T D N)", "O(T)", "O(T)", 1),
}
SSM_STATE_SIZE = 64  # N of the S4D rows, the paper's default
LAYERS = tuple(COST_TABLE)
MODES = ("train", "inference")


class Measurement(NamedTuple):
    """layer, mode ("train": forward + backward of sum(output); "inference": forward under inference_mode), T;
    seconds (fastest call, s) and peak_bytes (bytes) when measured, else None with ``skipped`` saying why."""

    layer: str
    mode: str
    length: int
    seconds: float | None
    peak_bytes: int | None
    skipped: str


def build_layer(name: str, width: int, *, num_heads: int, window: int) -> Callable[[Tensor], Tensor]:
    """``x (1, T, D) -> output (1, T, D)`` of a fresh layer: seqlab's RNN/GRU/LSTM (fused kernels), a
    Transformer encoder layer (d_ff = 4D, no dropout) whose self-attention is the reference path (weights
    materialised), PyTorch's fused SDPA, a sliding window of ``window`` keys, or linear attention, or an
    ``S4DBlock`` (state size ``SSM_STATE_SIZE``) in its convolution form or its recurrent scan.

    Raises: ConfigError for an unknown layer name; ValueError if width is not divisible by num_heads.
    """
    check_choice("layer", name, LAYERS)
    recurrent = {"rnn": RNN, "gru": GRU, "lstm": LSTM}
    if name in recurrent:
        module = recurrent[name](width, width)
        return lambda x: module(x).outputs
    if name.startswith("ssm_"):
        block = S4DBlock(width, SSM_STATE_SIZE)
        return (lambda x: block(x).outputs) if name == "ssm_convolution" else (lambda x: block.scan(x).outputs)
    kind = name.removeprefix("attention_")
    layer = TransformerEncoderLayer(
        width,
        num_heads,
        4 * width,
        dropout=0.0,
        attention_kind={"reference": "full", "fused": "full"}.get(kind, kind),
        window=window if kind == "local" else None,
    )
    if kind == "reference":
        # Asking for the weights makes MultiHeadAttention take its reference path (softmax of the full score matrix).
        layer.self_attn.register_forward_pre_hook(lambda m, a, k: (a, {**k, "need_weights": True}), with_kwargs=True)
    return lambda x: layer(x).output


def _call(forward: Callable[[Tensor], Tensor], x: Tensor, mode: str) -> Callable[[], object]:
    if mode == "inference":

        def run() -> object:
            with torch.inference_mode():
                return forward(x)

        return run
    return lambda: forward(x).sum().backward()


def _predicted(points: list[tuple[int, float]], length: int) -> float:
    """Extrapolate a cost to ``length`` along the power law through the last two measured points, its exponent
    clamped to [1, 2]: no layer here grows faster than T^2, and timing noise on a busy machine must not stop a run."""
    if len(points) < 2:
        return 0.0
    (t0, c0), (t1, c1) = points[-2:]
    exponent = min(2.0, max(1.0, math.log(max(c1, 1e-12) / max(c0, 1e-12)) / math.log(t1 / t0)))
    return c1 * (length / t1) ** exponent


def measure_costs(
    layers: Sequence[str],
    lengths: Sequence[int],
    modes: Sequence[str],
    *,
    width: int,
    num_heads: int = 4,
    window: int = 32,
    repeats: int = 3,
    max_seconds: float = 2.0,
    max_bytes: int = 1 << 30,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> list[Measurement]:
    """Time and peak memory (``seqlab.analysis.memory.measure_call``) of each layer, mode and length, batch 1;
    weights and inputs drawn from ``seed`` without touching the global generator.

    Lengths are run in increasing order; once a call took longer than ``max_seconds``, or the power law through
    the last two measurements predicts more than ``max_seconds`` or ``max_bytes`` at the next length, that and
    every longer length are skipped, with the reason in ``Measurement.skipped``.

    Raises: ConfigError for an unknown layer or mode, a length or width < 1, or repeats < 1.
    """
    for name in layers:
        check_choice("layer", name, LAYERS)
    for mode in modes:
        check_choice("mode", mode, MODES)
    for length in lengths:
        check_int("length", length)
    check_int("width", width)
    device = torch.device(device)
    results = []
    generator = torch.Generator(device).manual_seed(seed)
    for name in layers:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.device(device):
            torch.manual_seed(seed)
            forward = build_layer(name, width, num_heads=num_heads, window=window)
        for mode in modes:
            times: list[tuple[int, float]] = []
            peaks: list[tuple[int, float]] = []
            skip = ""
            for length in sorted(lengths):
                if not skip:
                    time_guess, bytes_guess = _predicted(times, length), _predicted(peaks, length)
                    if time_guess > max_seconds:
                        skip = f"skipped: predicted {time_guess:.2g} s > {max_seconds:g} s cap"
                    elif bytes_guess > max_bytes:
                        skip = f"skipped: predicted {bytes_guess / 2**20:.0f} MiB > {max_bytes / 2**20:.0f} MiB cap"
                if skip:
                    results.append(Measurement(name, mode, length, None, None, skip))
                    continue
                x = torch.randn(1, length, width, device=device, generator=generator)
                cost = measure_call(_call(forward, x, mode), device=device, repeats=repeats)
                times.append((length, cost.seconds))
                peaks.append((length, float(cost.peak_bytes)))
                results.append(Measurement(name, mode, length, cost.seconds, cost.peak_bytes, ""))
                if cost.seconds > max_seconds:
                    skip = f"skipped: T={length} took {cost.seconds:.2g} s > {max_seconds:g} s cap"
    return results


def fit_exponent(lengths: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of log(value) against log(T) over the upper half of the lengths (at least two
    points; non-positive values left out); NaN when fewer than two usable points remain."""
    points = sorted((t, v) for t, v in zip(lengths, values, strict=True) if v is not None and v > 0)
    upper = points[len(points) // 2 :] if len(points) >= 4 else points
    if len(upper) < 2:
        return math.nan
    t, v = zip(*upper, strict=True)
    return least_squares_slope(torch.tensor(t).log(), torch.tensor(v).log())


def fitted_exponents(measurements: Sequence[Measurement]) -> dict[tuple[str, str], tuple[float, float]]:
    """(layer, mode) -> (time exponent, memory exponent), from ``fit_exponent``."""
    fits = {}
    for key in dict.fromkeys((m.layer, m.mode) for m in measurements):
        done = [m for m in measurements if (m.layer, m.mode) == key and m.seconds is not None]
        lengths = [m.length for m in done]
        fits[key] = (
            fit_exponent(lengths, [m.seconds for m in done]),
            fit_exponent(lengths, [float(m.peak_bytes) for m in done]),
        )
    return fits


def plot_costs(measurements: Sequence[Measurement], path: Path, *, title: str) -> None:
    """Log-log panels, one row per mode: time per call and peak memory against T, each line labelled with its fitted
    exponent; written as a PNG."""
    modes = list(dict.fromkeys(m.mode for m in measurements))
    fits = fitted_exponents(measurements)
    fig = new_figure(figsize=(13, 4.5 * len(modes)), layout="constrained")
    axes = fig.subplots(len(modes), 2, squeeze=False)
    for row, mode in enumerate(modes):
        panels = (("seconds", "time per call (s)"), ("peak_bytes", "peak memory (MiB)"))
        for column, (field, label) in enumerate(panels):
            ax = axes[row, column]
            for i, layer in enumerate(dict.fromkeys(m.layer for m in measurements)):
                done = [m for m in measurements if (m.layer, m.mode) == (layer, mode) and m.seconds is not None]
                if not done:
                    continue
                scale = 1.0 if field == "seconds" else 2.0**-20
                values = [getattr(m, field) * scale for m in done]
                if not any(v > 0 for v in values):
                    continue
                slope = fits[layer, mode][column]
                style = "--" if layer in ("rnn", "gru", "lstm", "ssm_recurrent") else "-"
                ax.loglog([m.length for m in done], values, style, marker="o", ms=3, color=f"C{i}")
                ax.lines[-1].set_label(f"{layer} (slope {slope:.2f})")
            ax.set_xscale("log", base=2)
            ax.set(xlabel="sequence length T (steps)", ylabel=label, title=f"{mode}: {label.split(' (')[0]}")
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path, dpi=110)


def cost_table(measurements: Sequence[Measurement]) -> list[list[str]]:
    """The seeds' cost table with the measured exponents beside the asymptotic ones: per layer, its complexity,
    sequential operations, path length, expected T exponent, then per mode the fitted time and memory exponents
    and the time at the longest T measured."""
    fits = fitted_exponents(measurements)
    modes = list(dict.fromkeys(m.mode for m in measurements))
    rows = []
    for layer in dict.fromkeys(m.layer for m in measurements):
        cost = COST_TABLE[layer]
        row = [layer, cost.complexity, cost.sequential, cost.path_length, str(cost.exponent)]
        for mode in modes:
            done = [m for m in measurements if (m.layer, m.mode) == (layer, mode) and m.seconds is not None]
            time_slope, memory_slope = fits[layer, mode]
            last = f"{done[-1].seconds * 1e3:.3g} ms, T={done[-1].length}" if done else "none measured"
            row += [f"{time_slope:.2f}", f"{memory_slope:.2f}", last]
        rows.append(row)
    return rows


def cost_table_headers(modes: Sequence[str]) -> list[str]:
    """Column names of ``cost_table`` for the modes measured, in their order."""
    headers = ["layer", "complexity", "sequential", "path", "T exponent"]
    for mode in modes:
        headers += [f"{mode} time exp.", f"{mode} mem exp.", f"{mode} at longest T"]
    return headers
