"""Long-range memory tasks: the copy task and the adding problem, generated on the fly from a ``torch.Generator``.

Both come from Hochreiter & Schmidhuber (1997, experiments 2 and 4); seqlab uses the standard modern forms of
Arjovsky, Shah & Bengio (2016, "Unitary evolution recurrent neural networks", sec. 4.1 and 4.2), also used by
Le, Jaitly & Hinton (2015) for the adding problem. Each task is a frozen dataclass holding its lag; ``batch``
draws a fresh ``TaskBatch`` from the generator (the same generator state gives the same batch), and the task
also defines its loss, its held-out metric and when it counts as solved, so every model is judged alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor
from torch.nn import functional as F

from seqlab.errors import ConfigError
from seqlab.validation import check_int


class TaskBatch(NamedTuple):
    """inputs: (B, T) token ids (copy) or (B, T, 2) floats (adding); targets: (B, T) ids (copy) or (B,) floats."""

    inputs: Tensor
    targets: Tensor


class TaskMetrics(NamedTuple):
    """loss: the training objective on the batch (nats/token for copy, squared units for adding); metric: the
    task's held-out measure (``CopyTask.metric_name`` / ``AddingTask.metric_name``)."""

    loss: float
    metric: float


@dataclass(frozen=True)
class CopyTask:
    """The copy task (Hochreiter & Schmidhuber, 1997; form of Arjovsky et al., 2016, sec. 4.1).

    Ten categories a_0..a_9: the input is S symbols drawn uniformly with replacement from a_0..a_7, then
    lag - 1 blanks a_8, one delimiter a_9 and S more blanks (T = lag + 2S steps). The target is a_8 at the first
    lag + S steps, then the S input symbols in order. Loss: cross-entropy over all T steps (nats/token); the
    memoryless baseline, blanks everywhere and a uniform guess over the 8 symbols at the last S steps, scores
    S ln 8 / T. Metric: accuracy on the S recalled symbols (%), solved at >= 99%.

    Args:
        lag: steps between the last symbol and the first recalled one (Arjovsky's T), >= 1.
        num_symbols: S, symbols to remember (10 in Arjovsky et al.).
    Raises: ConfigError if lag or num_symbols < 1.
    """

    lag: int
    num_symbols: int = 10

    name: ClassVar[str] = "copy"
    vocab_size: ClassVar[int] = 10  # inputs: 8 symbols, blank, delimiter
    num_outputs: ClassVar[int] = 9  # targets: 8 symbols and blank
    blank: ClassVar[int] = 8
    delimiter: ClassVar[int] = 9
    causal: ClassVar[bool] = True  # each output depends on the inputs so far
    metric_name: ClassVar[str] = "symbol_accuracy"
    metric_unit: ClassVar[str] = "%"
    higher_is_better: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int("lag", self.lag)
        check_int("num_symbols", self.num_symbols)

    @property
    def length(self) -> int:
        """T, steps of one sequence."""
        return self.lag + 2 * self.num_symbols

    @property
    def baseline(self) -> float:
        """Symbol accuracy of a uniform guess (%)."""
        return 100.0 / 8

    @property
    def baseline_loss(self) -> float:
        """Cross-entropy of the memoryless baseline (nats/token): S ln 8 / T."""
        return self.num_symbols * math.log(8) / self.length

    def batch(self, batch_size: int, *, generator: torch.Generator) -> TaskBatch:
        """B fresh sequences: inputs (B, T) and targets (B, T), int64."""
        S = self.num_symbols
        symbols = torch.randint(0, 8, (batch_size, S), generator=generator)  # (B, S)
        inputs = torch.full((batch_size, self.length), self.blank, dtype=torch.long)
        inputs[:, :S] = symbols
        inputs[:, S + self.lag - 1] = self.delimiter
        targets = torch.full((batch_size, self.length), self.blank, dtype=torch.long)
        targets[:, -S:] = symbols
        return TaskBatch(inputs, targets)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy (nats/token) of logits (B, T, 9) against targets (B, T)."""
        return F.cross_entropy(outputs.flatten(0, 1), targets.flatten())

    def evaluate(self, outputs: Tensor, targets: Tensor) -> TaskMetrics:
        """Loss and accuracy on the recalled symbols (%) of logits (B, T, 9)."""
        S = self.num_symbols
        correct = outputs[:, -S:].argmax(-1) == targets[:, -S:]
        return TaskMetrics(self.loss(outputs, targets).item(), 100.0 * correct.double().mean().item())

    def solved(self, metric: float) -> bool:
        return metric >= 99.0


@dataclass(frozen=True)
class AddingTask:
    """The adding problem (Hochreiter & Schmidhuber, 1997; form of Le et al., 2015 and Arjovsky et al., 2016).

    Two channels of T = lag steps: values drawn uniformly from [0, 1], and markers, 0 except for exactly two 1s,
    one at a uniform position in the first half (t < T // 2) and one in the second. The target is the sum of the
    two marked values; loss and metric are the mean squared error. Predicting 1 whatever the input scores the
    variance of the sum, 2/12 = 0.167 (the baseline); solved at MSE <= 0.01.

    Args:
        lag: T, steps of the sequence, >= 2 (one marker per half).
    Raises: ConfigError if lag < 2.
    """

    lag: int

    name: ClassVar[str] = "adding"
    input_size: ClassVar[int] = 2  # value, marker
    num_outputs: ClassVar[int] = 1
    causal: ClassVar[bool] = False  # one answer after the whole sequence
    metric_name: ClassVar[str] = "mse"
    metric_unit: ClassVar[str] = ""
    higher_is_better: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_int("lag", self.lag, minimum=2)

    @property
    def length(self) -> int:
        """T, steps of one sequence."""
        return self.lag

    @property
    def baseline(self) -> float:
        """MSE of always predicting 1: Var(u_1 + u_2) = 2/12."""
        return 2.0 / 12.0

    @property
    def baseline_loss(self) -> float:
        return self.baseline

    def batch(self, batch_size: int, *, generator: torch.Generator) -> TaskBatch:
        """B fresh sequences: inputs (B, T, 2) float32 (values, markers) and targets (B,) float32."""
        T, half = self.lag, self.lag // 2
        values = torch.rand(batch_size, T, generator=generator)  # (B, T)
        first = torch.randint(0, half, (batch_size,), generator=generator)
        second = torch.randint(half, T, (batch_size,), generator=generator)
        markers = torch.zeros(batch_size, T)
        rows = torch.arange(batch_size)
        markers[rows, first] = 1.0
        markers[rows, second] = 1.0
        targets = values[rows, first] + values[rows, second]
        return TaskBatch(torch.stack((values, markers), dim=-1), targets)  # (B, T, 2)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Mean squared error of predictions (B,) against targets (B,)."""
        return F.mse_loss(outputs, targets)

    def evaluate(self, outputs: Tensor, targets: Tensor) -> TaskMetrics:
        mse = self.loss(outputs, targets).item()
        return TaskMetrics(mse, mse)

    def solved(self, metric: float) -> bool:
        return metric <= 0.01


LongRangeTask = CopyTask | AddingTask
TASKS = ("copy", "adding")


def make_task(name: str, lag: int, *, num_symbols: int = 10) -> LongRangeTask:
    """The task called ``name`` ("copy" or "adding") at ``lag``; num_symbols is the copy task's S.

    Raises: ConfigError for an unknown name or a bad lag / num_symbols.
    """
    if name == "copy":
        return CopyTask(lag, num_symbols)
    if name == "adding":
        return AddingTask(lag)
    raise ConfigError(f"task ({name!r}) must be one of {', '.join(TASKS)}")
