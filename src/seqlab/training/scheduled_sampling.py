"""Scheduled sampling (Bengio et al. 2015, "Scheduled Sampling for Sequence Prediction with Recurrent Neural
Networks"): teacher forcing whose probability eps_i decays with the training step i.

Sec. 2.4 of the paper gives three decays, with its parameter names:

    linear:           eps_i = max(epsilon_min, k - c i)       0 <= epsilon_min < 1, 0 < k <= 1 the offset, c > 0
    exponential:      eps_i = k^i                             0 < k < 1
    inverse_sigmoid:  eps_i = k / (k + exp(i / k))            k >= 1 (eps_i = 1/2 at i = k ln k)

and "constant" keeps eps_i = ``teacher_forcing`` (1.0: plain teacher forcing). Here i counts optimizer steps from
0 (the first step uses eps_0). The loss feeds, per target position, the gold previous token with probability eps_i
and the model's own previous argmax prediction otherwise (``seqlab.models.seq2seq.unroll``): step by step for
decoders with a ``step`` interface that is cheap to run (the RNN seq2seq), in two passes for the Transformer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.batching import Seq2SeqBatch
from seqlab.errors import ConfigError
from seqlab.models.seq2seq.unroll import mix_inputs, unroll
from seqlab.training.objectives import LossOutput, teacher_forcing_loss
from seqlab.validation import check_choice, check_real

TeacherForcingScheduleName = Literal["constant", "linear", "exponential", "inverse_sigmoid"]
TEACHER_FORCING_SCHEDULES: tuple[TeacherForcingScheduleName, ...] = (
    "constant",
    "linear",
    "exponential",
    "inverse_sigmoid",
)
_PARAMETERS = {"constant": (), "linear": ("k", "c", "epsilon_min"), "exponential": ("k",), "inverse_sigmoid": ("k",)}
_K_BOUNDS: dict[str, dict[str, float]] = {
    "linear": {"greater_than": 0.0, "at_most": 1.0},
    "exponential": {"greater_than": 0.0, "below": 1.0},
    "inverse_sigmoid": {"at_least": 1.0},
}


@dataclass(frozen=True)
class TeacherForcingSchedule:
    """eps_i, the probability of feeding the gold previous token at training step i (formulas in the module
    docstring). ``probability(i)`` is a pure function of i.

    Args:
        schedule: constant | linear | exponential | inverse_sigmoid.
        teacher_forcing: eps of "constant", in [0, 1]; must stay 1.0 with the other schedules (they set eps).
        k: the paper's k; needed by linear (offset, 0 < k <= 1), exponential (0 < k < 1) and inverse_sigmoid
            (k >= 1).
        c: the slope of linear (c > 0); only linear uses it.
        epsilon_min: the floor of linear, in [0, 1); only linear uses it.
    Raises:
        ConfigError: a value out of range, a parameter the schedule needs missing, or one it does not use set.
    """

    schedule: TeacherForcingScheduleName = "constant"
    teacher_forcing: float = 1.0
    k: float | None = None
    c: float | None = None
    epsilon_min: float = 0.0

    def __post_init__(self) -> None:
        check_choice("teacher_forcing_schedule", self.schedule, TEACHER_FORCING_SCHEDULES)
        check_real("teacher_forcing", self.teacher_forcing, at_least=0.0, at_most=1.0)
        check_real("teacher_forcing_epsilon_min", self.epsilon_min, at_least=0.0, below=1.0)
        if self.schedule != "constant" and self.teacher_forcing != 1.0:
            raise ConfigError(
                f"teacher_forcing ({self.teacher_forcing!r}) is the constant schedule's probability; "
                f"schedule {self.schedule!r} sets it from teacher_forcing_k"
            )
        uses = _PARAMETERS[self.schedule]
        given = {"k": self.k, "c": self.c, "epsilon_min": None if self.epsilon_min == 0.0 else self.epsilon_min}
        for name, value in given.items():
            if value is None and name in uses and name != "epsilon_min":
                raise ConfigError(f"teacher_forcing_schedule {self.schedule!r} needs teacher_forcing_{name}")
            if value is not None and name not in uses:
                raise ConfigError(
                    f"teacher_forcing_{name} ({value!r}) is not used by teacher_forcing_schedule {self.schedule!r}"
                )
        if self.k is not None:
            check_real("teacher_forcing_k", self.k, **_K_BOUNDS[self.schedule])
        check_real("teacher_forcing_c", self.c, greater_than=0.0, optional=True)

    def probability(self, step: int) -> float:
        """eps_i for optimizer step i >= 0 (0 = the first step)."""
        if self.schedule == "constant":
            return self.teacher_forcing
        if self.schedule == "linear":
            return max(self.epsilon_min, self.k - self.c * step)
        if self.schedule == "exponential":
            return self.k**step
        return self.k / (self.k + math.exp(min(step / self.k, 700.0)))  # exp overflows past ~709


def scheduled_sampling_loss(
    model: nn.Module,
    batch: Seq2SeqBatch,
    *,
    teacher_forcing: float,
    two_pass: bool,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
    generator: torch.Generator | None = None,
) -> LossOutput:
    """Mean token cross-entropy (nats per real target token) with inputs mixed by scheduled sampling.

    Args:
        model: a seq2seq model: ``model(src, src_lengths, tgt_in).logits`` (B, T, V), and for ``two_pass=False``
            also ``encode`` and the ``StepModel`` interface.
        batch: a Seq2SeqBatch.
        teacher_forcing: eps in [0, 1] for this step; 1 is exactly ``teacher_forcing_loss``.
        two_pass: False: unroll step by step, each prediction made from the mixed prefix (Bengio et al.);
            True: predictions from a teacher-forced pass without gradient, then a second pass on the mixed inputs
            (the Transformer's approximation, see ``seqlab.models.seq2seq.unroll``).
        pad_id, label_smoothing: as for ``teacher_forcing_loss``.
        generator: for the coins; None = torch's global generator.
    Returns: LossOutput(loss, num_tokens).
    Raises:
        ConfigError: teacher_forcing outside [0, 1].
    """
    check_real("teacher_forcing", teacher_forcing, at_least=0.0, at_most=1.0)
    if teacher_forcing == 1.0:
        return teacher_forcing_loss(model, batch, pad_id=pad_id, label_smoothing=label_smoothing)
    if two_pass:
        with torch.no_grad():
            first = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
        tgt_in = mix_inputs(batch.tgt_in, first, teacher_forcing=teacher_forcing, generator=generator)
        logits = model(batch.src, batch.src_lengths, tgt_in).logits
    else:
        state = model.encode(batch.src, batch.src_lengths)
        logits = unroll(model, state, batch.tgt_in, teacher_forcing=teacher_forcing, generator=generator).logits
    loss = F.cross_entropy(
        logits.flatten(0, 1),  # (B*T, V)
        batch.tgt_out.flatten(),  # (B*T,)
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )
    return LossOutput(loss, int((batch.tgt_out != pad_id).sum()))


class ScheduledSampling:
    """Scheduled sampling as a training strategy (``seqlab.training.strategies``): it counts the micro-batches to
    know the step i, and owns the generator of the coins, so both go into training checkpoints and a resumed run
    flips the same coins as one never interrupted.

    Each micro-batch's loss is ``loss_fn(model, batch, teacher_forcing=eps_i, generator=coins)``, with i = the
    number of micro-batches before it // ``grad_accumulation_steps`` (with accumulation, an epoch's short last
    step makes i run ahead by less than one step per epoch).

    Args:
        probability: eps_i of step i, e.g. ``TrainConfig.teacher_forcing_probability``.
        grad_accumulation_steps: micro-batches per optimizer step (>= 1).
        seed: seed of the coins' ``torch.Generator``.
    """

    def __init__(self, probability: Callable[[int], float], *, grad_accumulation_steps: int, seed: int) -> None:
        self.probability = probability
        self.grad_accumulation_steps = grad_accumulation_steps
        self.micro_batches = 0
        self.coins = torch.Generator().manual_seed(seed)

    def loss(self, model: nn.Module, batch: Any, loss_fn: Callable[..., LossOutput]) -> LossOutput:
        step = self.micro_batches // self.grad_accumulation_steps
        self.micro_batches += 1
        return loss_fn(model, batch, teacher_forcing=self.probability(step), generator=self.coins)

    def state_dict(self) -> dict[str, Any]:
        return {"micro_batches": self.micro_batches, "coins": self.coins.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.micro_batches = int(state["micro_batches"])
        self.coins.set_state(state["coins"].cpu())

    def __repr__(self) -> str:
        return f"ScheduledSampling(micro_batches={self.micro_batches})"
