"""Models for ``seqlab compare``: RNN, GRU, LSTM, a Transformer encoder and a TCN sized to the same parameter count.

Every model reads a long-range task (``seqlab.data.synthetic``) the same way: an input layer (an embedding of the
copy task's tokens, a linear map of the adding problem's two channels) to W features, the sequence core, and a
linear head from W features: logits at every step for the copy task, one number from the last step for the adding
problem. The core is seqlab's one-layer ``RNN`` / ``GRU`` / ``LSTM`` (fused torch kernels), with W = H, or a
pre-LN ``TransformerEncoder`` of ``TRANSFORMER_LAYERS`` layers with W = D, ``TRANSFORMER_HEADS`` heads,
d_ff = 4 D and sinusoidal positions (Vaswani et al., 2017), causal for the copy task (each output may only use
the inputs so far, as for the RNNs) and bidirectional for the adding problem (one answer after the whole input),
or a causal ``TemporalConvNet`` (Bai et al., 2018) of width W, kernel size ``TCN_KERNEL_SIZE`` and the fewest
levels whose receptive field covers the task's whole sequence (``tcn_levels``).

``matched_model`` picks the width whose parameter count is closest to a target, so the comparison is between
architectures, not sizes.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from seqlab.analysis.memory import PeakTensorMemory
from seqlab.data.synthetic import LongRangeTask
from seqlab.errors import ConfigError
from seqlab.nn import (
    GRU,
    LSTM,
    RNN,
    SinusoidalPositionalEncoding,
    TemporalConvNet,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from seqlab.nn.temporal_convolution import receptive_field, tcn_dilations
from seqlab.validation import check_choice, check_int, check_real

ARCHITECTURES = ("rnn", "gru", "lstm", "transformer", "tcn")
TRANSFORMER_LAYERS = 2
TRANSFORMER_HEADS = 2
TCN_KERNEL_SIZE = 3


def tcn_levels(length: int) -> int:
    """The fewest TCN levels whose receptive field 1 + 2 (k - 1)(2^L - 1), k = ``TCN_KERNEL_SIZE``, reaches
    ``length`` steps: the last output then reads the whole sequence."""
    levels = 1
    while receptive_field(TCN_KERNEL_SIZE, tcn_dilations(levels)) < length:
        levels += 1
    return levels


class SequenceModel(nn.Module):
    """Input layer, sequence core and output head for one long-range task (module docstring).

    Args:
        arch: "rnn", "gru", "lstm", "transformer" or "tcn".
        task: the task whose inputs and outputs the model reads and writes (its lag sets the positions cached).
        width: W, the hidden size H of a recurrent core or the TCN, or d_model D of the Transformer (even, and
            divisible by ``TRANSFORMER_HEADS``, for the Transformer).
    Inputs: x (B, T) token ids (copy) or (B, T, 2) (adding).
    Outputs: logits (B, T, 9) (copy) or predictions (B,) (adding).
    Raises:
        ConfigError: for an unknown arch or a width < 1; ValueError for a Transformer width that is odd or not
            divisible by the heads (from the layers).
    """

    def __init__(self, arch: str, task: LongRangeTask, width: int) -> None:
        super().__init__()
        check_choice("arch", arch, ARCHITECTURES)
        check_int("width", width)
        self.arch = arch
        self.width = width
        self.per_step = task.name == "copy"
        self.causal = task.causal
        if task.name == "copy":
            self.input: nn.Module = nn.Embedding(task.vocab_size, width)
        else:
            self.input = nn.Linear(task.input_size, width)
        if arch == "transformer":
            self.positions: nn.Module | None = SinusoidalPositionalEncoding(width, max_length=task.length)
            layers = [
                TransformerEncoderLayer(width, TRANSFORMER_HEADS, 4 * width, dropout=0.0, norm_first=True)
                for _ in range(TRANSFORMER_LAYERS)
            ]
            self.core: nn.Module = TransformerEncoder(layers, final_norm=nn.LayerNorm(width))
        elif arch == "tcn":
            self.positions = None
            levels = tcn_levels(task.length)
            self.core = TemporalConvNet(width, width, num_levels=levels, kernel_size=TCN_KERNEL_SIZE)
        else:
            self.positions = None
            self.core = {"rnn": RNN, "gru": GRU, "lstm": LSTM}[arch](width, width, batch_first=True)
        self.head = nn.Linear(width, task.num_outputs)

    @property
    def receptive_field(self) -> int | None:
        """The input steps that one output reads (the TCN's R), or None when it may read all of them (recurrent
        state, attention)."""
        return self.core.receptive_field if self.arch == "tcn" else None

    def forward(self, x: Tensor) -> Tensor:
        h = self.input(x)  # (B, T, W), then the core's (B, T, W)
        # A recurrent core or the TCN returns (outputs, final state); the Transformer its outputs alone.
        h = self.core(h).outputs if self.positions is None else self.core(self.positions(h), causal=self.causal)
        if self.per_step:
            return self.head(h)  # (B, T, 9)
        return self.head(h[:, -1]).squeeze(-1)  # (B,)


def parameter_count(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _count(arch: str, task: LongRangeTask, width: int) -> int:
    with torch.random.fork_rng():  # building a candidate must not move the global generator
        return parameter_count(SequenceModel(arch, task, width))


class MatchedModel(NamedTuple):
    """model: a fresh ``SequenceModel``; width: its W; parameters: its trainable parameter count."""

    model: SequenceModel
    width: int
    parameters: int


def matched_width(arch: str, task: LongRangeTask, target: int, *, tolerance: float = 0.1) -> int:
    """The width W of ``arch`` whose parameter count is closest to ``target`` (binary search: counts grow with W).

    Raises:
        ConfigError: for an unknown arch, target < 1, tolerance outside (0, 1), or when the closest count is
            more than ``tolerance`` (a fraction) away from ``target``; the message shows the closest count.
    """
    check_choice("arch", arch, ARCHITECTURES)
    check_int("target", target)
    check_real("tolerance", tolerance, greater_than=0, below=1)
    step = math.lcm(2, TRANSFORMER_HEADS) if arch == "transformer" else 1  # D even (sin, cos), divisible by N
    # Counts grow with the width: double until the target is reached, then bisect, so that no candidate is
    # much larger than the answer.
    hi = step
    while _count(arch, task, hi) < target:
        hi *= 2
    lo = hi // 2 if hi > step else 0  # the count at lo (a multiple of step) is below the target
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if _count(arch, task, mid) < target:
            lo = mid
        else:
            hi = mid
    candidates = [w for w in (lo, hi) if w > 0]
    width = min(candidates, key=lambda w: abs(_count(arch, task, w) - target))
    count = _count(arch, task, width)
    if abs(count - target) > tolerance * target:
        raise ConfigError(
            f"no {arch} width has about {target} parameters: the closest, width {width}, has {count} "
            f"(more than {tolerance:.0%} away)"
        )
    return width


def matched_model(arch: str, task: LongRangeTask, target: int, *, seed: int, tolerance: float = 0.1) -> MatchedModel:
    """A fresh ``SequenceModel`` of ``arch`` with about ``target`` parameters, initialised from ``seed``.

    Raises: ConfigError as ``matched_width``.
    """
    width = matched_width(arch, task, target, tolerance=tolerance)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = SequenceModel(arch, task, width)
    return MatchedModel(model, width, parameter_count(model))


def training_step_peak(model: nn.Module, task: LongRangeTask, inputs: Tensor, targets: Tensor) -> int:
    """Peak bytes of the tensors one training step creates (forward, loss, backward, gradients), measured with
    ``PeakTensorMemory`` on the CPU; the gradients are dropped after.

    Inputs: one batch of ``task`` (``TaskBatch`` fields).
    """
    with PeakTensorMemory() as tracker:
        task.loss(model(inputs), targets).backward()
    model.zero_grad(set_to_none=True)
    return tracker.peak


class RunSummary(NamedTuple):
    """One trained (arch, lag) of a comparison.

    arch, lag, width (W), parameters (trainable); tokens_per_s: input steps per second of training, validation
    excluded; peak_bytes: of one training step (``training_step_peak``); final_metric: the task's metric on the
    held-out set at the last validation; solved_at: the step of the first validation where the task counts as
    solved, or None; steps: optimizer steps taken; seconds: wall-clock time of the run, validation included;
    losses: [(step, training loss)] per step; validations: [(step, held-out loss, held-out metric)];
    receptive_field: input steps one output reads (TCN), None for all of them (recurrent, Transformer).
    """

    arch: str
    lag: int
    width: int
    parameters: int
    tokens_per_s: float
    peak_bytes: int
    final_metric: float
    solved_at: int | None
    steps: int
    seconds: float
    losses: list[tuple[int, float]]
    validations: list[tuple[int, float, float]]
    receptive_field: int | None = None
