"""``TrainConfig``: the optimisation settings of one training run, saved with every checkpoint.

Every field is settable from the command line as ``--set train.KEY=VALUE``. Fields are only ever added, with
defaults that keep the behaviour of older runs, so a ``recipe.json`` written by an earlier seqlab still loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seqlab.config import refuse_set
from seqlab.data.batching import BATCH_TYPES, BatchType
from seqlab.errors import ConfigError
from seqlab.nn.lora import check_lora_settings
from seqlab.training.scheduled_sampling import TeacherForcingSchedule, TeacherForcingScheduleName
from seqlab.training.schedules import SCHEDULES, ScheduleName
from seqlab.validation import MAX_BATCH_SIZE, MAX_STEPS, check_bool, check_choice, check_int, check_real, is_real

OptimizerName = Literal["adam", "adamw", "sgd"]
OPTIMIZERS: tuple[OptimizerName, ...] = ("adam", "adamw", "sgd")
DeviceName = Literal["auto", "cpu", "cuda", "mps"]
DEVICES: tuple[DeviceName, ...] = ("auto", "cpu", "cuda", "mps")
PrecisionName = Literal["fp32", "bf16", "fp16", "auto"]
PRECISIONS: tuple[PrecisionName, ...] = ("fp32", "bf16", "fp16", "auto")
# No optimizer here trains at a learning rate above 10 (Adam's steps are ~lr in size, SGD's lr times the gradient);
# a larger one is a typo (1e3 for 1e-3) that would only diverge.
MAX_LR = 10.0


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of one training run; a recipe saves them with its checkpoint.

    Training stops at the first of: ``max_epochs`` epochs, ``max_steps`` optimizer steps, ``time_budget``
    seconds, or ``patience`` validations in a row without improvement of the monitored metric.

    One optimizer step reads ``batch_size`` sequences as ``grad_accumulation_steps`` = k micro-batches of
    ``batch_size // k`` sequences; each micro-batch's mean loss is weighted by its share of the step's
    tokens, so the step's gradient is that of the token mean over all k micro-batches (equal to one batch of
    ``batch_size`` when the loss is a token mean).

    A step whose loss or gradient norm is NaN or infinite is skipped and counted; ``max_nonfinite_steps`` of them
    in a row stop the run with a ``DivergenceError`` (the best checkpoint so far is kept).

    Gradient clipping happens in this order: first by global norm (``clip_norm``), then by value
    (``clip_value``) on the norm-clipped gradient; the logged ``grad_norm`` is the norm before both.

    ``lr`` is the peak learning rate; ``schedule`` and ``warmup_steps`` choose its multiplier per step (see
    ``seqlab.training.schedules``): a linear warmup over ``warmup_steps`` steps, then constant, inverse-sqrt
    ("Noam"), cosine decay to ``min_lr_ratio`` * lr (0 by default; nanoGPT decays to lr / 10), or "epoch_decay":
    lr divided by ``decay_factor`` after every epoch past ``decay_after`` (Zaremba et al. 2014). The cosine ends
    at ``max_steps`` or when ``time_budget`` runs out, whichever comes first: its progress is
    max((step - w) / (max_steps - w), elapsed / time_budget) (budgeted training, Li et al. 2020), so a slow
    machine's run still ends at the bottom of the schedule. A cosine with a time budget therefore depends on the
    clock; without one, a run is repeatable bit for bit. ``cycles`` = M > 1 cuts that progress into M equal
    cosines with warm restarts (SGDR, Loshchilov & Hutter 2017; warmup before the first only), and a recipe saves
    the weights at the end of each cycle as a run directory ``snapshots/cycle-K`` that ``--ensemble`` takes
    (snapshot ensembles, Huang et al. 2017).

    ``betas`` are Adam's and AdamW's (beta_1, beta_2), the decay rates of the gradient's running mean and mean
    square (Kingma & Ba 2015); ``--set train.betas=0.9,0.95``.

    A recipe that trains with scheduled sampling takes ``ScheduledSamplingTrainConfig`` instead, which adds the
    ``teacher_forcing*`` fields; the others have none, so ``train.teacher_forcing`` is refused there.

    ``weight_decay`` applies to the weight matrices only (parameters with two or more dimensions that are not
    embeddings; see ``seqlab.training.optim``): as an L2 term added to the gradient for "adam" and "sgd"
    (as ``torch.optim.Adam``/``SGD`` do), decoupled from the gradient for "adamw" (Loshchilov & Hutter, 2019).

    ``average_last`` = k makes a recipe's final model the average of the weights at the last k validations
    (checkpoint averaging, Vaswani et al. 2017; ``seqlab.training.averaging``) instead of the best validated ones.

    A run given a checkpoint writer (``seqlab train`` always is) saves its whole training state every
    ``checkpoint_every`` steps and after every validation, so ``seqlab train --resume`` loses at most that many
    steps (see ``seqlab.training.checkpoint``).
    ``freeze`` names parameters by prefix (a module path: "rnn" covers "rnn.cells.0.weight_ih"); they get
    ``requires_grad=False`` and stay out of the optimizer. ``body_lr_scale`` multiplies the learning rate of the
    pretrained parameters a trainer is given (those a recipe's ``model.init_from`` loaded), so a pretrained body
    can be fine-tuned more gently than a new head (e.g. 0.1).

    ``lora_rank`` = r fine-tunes with LoRA (Hu et al. 2021; ``seqlab.training.lora``): the pretrained body is
    frozen, each of its Linear layers named by ``lora_targets`` (comma-separated module names, matched as the
    last parts of a layer's qualified name: "q_proj" or "encoder.layers.0.self_attn.q_proj") gets a trainable
    update (``lora_alpha`` / r) B A with ``lora_dropout`` on its input, and the parameters that are not pretrained
    (a new task head) train in full. ``lora_alpha``, ``lora_dropout`` and ``lora_targets`` are refused without
    ``lora_rank``, and ``body_lr_scale`` with it (the body it would scale is frozen).

    Raises:
        ConfigError: (a ValueError) for a value of the wrong type or out of range; the message shows it.
    """

    lr: float = 1e-3  # peak learning rate
    batch_size: int = 64  # sequences per optimizer step, over all its micro-batches
    max_epochs: int = 30  # passes over the training batches
    max_steps: int | None = None  # optimizer-step budget; None = unlimited
    time_budget: float | None = None  # wall-clock seconds, validation included; None = unlimited
    clip_norm: float | None = 1.0  # clip the global gradient norm to this (None = no clipping)
    clip_value: float | None = None  # then clamp each gradient entry to [-clip_value, clip_value] (None = no)
    patience: int | None = 5  # early stopping: validations without improvement (one per epoch by default)
    weight_decay: float = 0.0  # on weight matrices only: L2 for adam and sgd, decoupled for adamw
    seed: int = 0  # seeds Python, NumPy and torch when fit() starts, and the data-shuffling generator
    validate_every: int | None = None  # also validate every this many steps; None = at epoch ends only
    schedule: ScheduleName = "constant"  # after warmup: constant, inverse_sqrt (Noam), cosine to 0, epoch_decay
    warmup_steps: int = 0  # linear warmup: step s < warmup_steps uses lr * s / warmup_steps
    min_lr_ratio: float = 0.0  # cosine only: the decay ends at min_lr_ratio * lr (nanoGPT: 0.1)
    cycles: int = 1  # cosine only: M equal cosine cycles with warm restarts, a snapshot at each one's end (SGDR)
    decay_factor: float = 1.0  # epoch_decay only: lr divided by this after each epoch past decay_after
    decay_after: int = 0  # epoch_decay only: epochs at the peak lr before the decay starts
    optimizer: OptimizerName = "adam"  # adam, adamw (decoupled weight decay) or sgd
    betas: tuple[float, float] = (0.9, 0.999)  # adam and adamw: decay rates of the gradient's mean and mean square
    momentum: float = 0.0  # sgd only: heavy-ball momentum in [0, 1)
    nesterov: bool = False  # sgd only: Nesterov momentum (needs momentum > 0)
    device: DeviceName = "auto"  # auto = cuda if available, else mps if available, else cpu
    precision: PrecisionName = "fp32"  # autocast dtype of forward and loss: fp32 (off), bf16, fp16 (scaled), auto
    # (bf16 where the device multiplies bf16 natively, else fp32: ``seqlab.training.device.resolve_precision``)
    grad_accumulation_steps: int = 1  # micro-batches per optimizer step; must divide batch_size
    checkpoint_every: int | None = 100  # training checkpoint every this many steps, and at each validation
    freeze: str = ""  # comma-separated parameter-name prefixes kept fixed (e.g. "embedding,rnn.cells.0")
    body_lr_scale: float = 1.0  # lr multiplier of the pretrained body (the parameters model.init_from loaded)
    max_nonfinite_steps: int = 20  # stop (exit 3) after this many steps in a row with a non-finite loss or grad
    average_last: int | None = None  # final model = mean weights of the last k validations; None = the best one
    lora_rank: int | None = None  # r of LoRA fine-tuning: frozen pretrained body + rank-r adapters; None = off
    lora_alpha: float = 8.0  # LoRA updates are scaled by lora_alpha / lora_rank (Hu et al.: alpha = the first r)
    lora_dropout: float = 0.0  # dropout on the input of each LoRA adapter
    lora_targets: str = "q_proj,v_proj"  # the pretrained Linear layers adapted (Hu et al. sec. 7.1: W_q, W_v)

    def __post_init__(self) -> None:
        check_real("lr", self.lr, greater_than=0, at_most=MAX_LR)
        check_int("batch_size", self.batch_size, maximum=MAX_BATCH_SIZE)
        check_int("max_epochs", self.max_epochs, maximum=MAX_STEPS)
        for name in ("max_steps", "patience", "validate_every", "checkpoint_every", "average_last"):
            check_int(name, getattr(self, name), optional=True, maximum=MAX_STEPS)
        for name in ("time_budget", "clip_norm", "clip_value"):
            check_real(name, getattr(self, name), greater_than=0, optional=True)
        check_real("weight_decay", self.weight_decay, at_least=0)
        check_int("seed", self.seed, minimum=0, maximum=2**32 - 1)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_int("warmup_steps", self.warmup_steps, minimum=0, maximum=MAX_STEPS)
        check_real("min_lr_ratio", self.min_lr_ratio, at_least=0.0, at_most=1.0)
        if self.schedule == "cosine":
            if self.max_steps is None and self.time_budget is None:
                raise ConfigError("schedule 'cosine' needs max_steps or time_budget, where its decay ends")
            if self.max_steps is not None and self.warmup_steps >= self.max_steps:
                raise ConfigError(
                    f"warmup_steps ({self.warmup_steps}) must be < max_steps ({self.max_steps}) for schedule 'cosine'"
                )
        self._check_cycles()
        self._check_epoch_decay()
        self._check_optimizer()
        check_choice("device", self.device, DEVICES)
        check_choice("precision", self.precision, PRECISIONS)
        check_int("grad_accumulation_steps", self.grad_accumulation_steps, maximum=MAX_BATCH_SIZE)
        check_real("body_lr_scale", self.body_lr_scale, greater_than=0)
        if not isinstance(self.freeze, str):
            raise ConfigError(f"freeze must be a string of comma-separated prefixes, got {self.freeze!r}")
        check_int("max_nonfinite_steps", self.max_nonfinite_steps, maximum=MAX_STEPS)
        self._check_lora()
        if self.batch_size % self.grad_accumulation_steps != 0:
            raise ConfigError(
                f"batch_size ({self.batch_size}) must be divisible by grad_accumulation_steps "
                f"({self.grad_accumulation_steps})"
            )

    def _check_lora(self) -> None:
        if self.lora_rank is None:
            for name in ("lora_alpha", "lora_dropout", "lora_targets"):
                value, default = getattr(self, name), getattr(TrainConfig, name)
                if value != default:
                    raise ConfigError(f"{name} ({value!r}) applies to LoRA fine-tuning only; set lora_rank as well")
            return
        check_lora_settings(rank=self.lora_rank, alpha=self.lora_alpha, dropout=self.lora_dropout)
        if not isinstance(self.lora_targets, str) or not self.lora_targets.strip(" ,"):
            raise ConfigError(f"lora_targets ({self.lora_targets!r}) must name Linear layers, e.g. 'q_proj,v_proj'")
        if self.body_lr_scale != 1.0:
            raise ConfigError(
                f"body_lr_scale ({self.body_lr_scale!r}) has nothing to scale: lora_rank freezes the pretrained body"
            )

    def _check_cycles(self) -> None:
        check_int("cycles", self.cycles, maximum=MAX_STEPS)
        if self.schedule != "cosine":
            refuse_set(self, ("cycles",), f"is used by schedule 'cosine' only, not {self.schedule!r}")
        elif self.max_steps is not None and self.cycles > self.max_steps - self.warmup_steps:
            decay_steps = self.max_steps - self.warmup_steps
            raise ConfigError(
                f"cycles ({self.cycles}) must be <= max_steps - warmup_steps ({decay_steps}): each cycle needs a step"
            )

    def _check_epoch_decay(self) -> None:
        check_real("decay_factor", self.decay_factor, at_least=1)
        check_int("decay_after", self.decay_after, minimum=0, maximum=MAX_STEPS)
        if self.schedule != "epoch_decay":
            refuse_set(
                self, ("decay_factor", "decay_after"), f"is used by schedule 'epoch_decay' only, not {self.schedule!r}"
            )

    def _check_optimizer(self) -> None:
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        if not (
            isinstance(self.betas, tuple)
            and len(self.betas) == 2
            and all(is_real(b) and 0 <= b < 1 for b in self.betas)
        ):
            raise ConfigError(f"betas ({self.betas!r}) must be two numbers in [0, 1) (beta_1, beta_2), e.g. 0.9,0.999")
        if self.optimizer == "sgd" and self.betas != TrainConfig.betas:
            raise ConfigError(f"betas ({self.betas!r}) are used by optimizers 'adam' and 'adamw' only, not 'sgd'")
        check_real("momentum", self.momentum, at_least=0, below=1)
        check_bool("nesterov", self.nesterov)
        if self.optimizer != "sgd":
            refuse_set(self, ("momentum", "nesterov"), f"is used by optimizer 'sgd' only, not {self.optimizer!r}")
        if self.nesterov and self.momentum == 0:
            raise ConfigError(f"nesterov (True) needs momentum > 0, got momentum ({self.momentum!r})")


# The fields older runs' recipe.json files hold in every recipe's train section, with the only value a recipe
# without scheduled sampling could have had (it refused any other); ``load_recipe_config`` drops them there.
LEGACY_TEACHER_FORCING = {
    "teacher_forcing": 1.0,
    "teacher_forcing_schedule": "constant",
    "teacher_forcing_k": None,
    "teacher_forcing_c": None,
    "teacher_forcing_epsilon_min": 0.0,
}


@dataclass(frozen=True)
class Seq2SeqTrainConfig(TrainConfig):
    """``TrainConfig`` plus the unit of ``batch_size``, the train section of the sequence-to-sequence recipes
    (``seqlab.data.batching.batch_iterator``): ``batch_type`` "sentence" makes ``batch_size`` count pairs per
    optimizer step, "token" target tokens at most (EOS included; JoeyNMT's ``batch_type``, fairseq's
    ``--max-tokens``), so that each token weighs about the same in the gradient whatever the length of its pair (a
    step's loss is the mean over its tokens, and batches are grouped by length). Under gradient accumulation each
    of the k micro-batches holds at most ``batch_size // k`` tokens.

    Raises: ConfigError for a bad value of any field.
    """

    batch_type: BatchType = "sentence"  # what batch_size counts: sentence (pairs) or token (target tokens, EOS incl.)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("batch_type", self.batch_type, BATCH_TYPES)


@dataclass(frozen=True)
class ScheduledSamplingTrainConfig(Seq2SeqTrainConfig):
    """``Seq2SeqTrainConfig`` plus scheduled sampling (Bengio et al. 2015; ``seqlab.training.scheduled_sampling``), the
    train section of the recipes that use it: the probability eps_i of feeding the gold previous token at
    optimizer step i, constant (1.0 = teacher forcing) or decaying.

    Raises: ConfigError for a bad value of any field (``TrainConfig``'s or the schedule's).
    """

    teacher_forcing: float = 1.0  # probability of feeding the gold previous token (schedule constant)
    teacher_forcing_schedule: TeacherForcingScheduleName = "constant"  # or linear, exponential, inverse_sigmoid
    teacher_forcing_k: float | None = None  # k of Bengio et al. (2015): linear offset, exponential base, inv. sigmoid
    teacher_forcing_c: float | None = None  # c of Bengio et al.: the linear schedule's slope per step
    teacher_forcing_epsilon_min: float = 0.0  # epsilon of Bengio et al.: the linear schedule's floor

    def __post_init__(self) -> None:
        super().__post_init__()
        self.teacher_forcing_probability(0)  # builds, so validates, the schedule

    def teacher_forcing_probability(self, step: int) -> float:
        """eps_i of scheduled sampling at optimizer step ``step`` (from 0); see ``TeacherForcingSchedule``."""
        return TeacherForcingSchedule(
            self.teacher_forcing_schedule,
            self.teacher_forcing,
            k=self.teacher_forcing_k,
            c=self.teacher_forcing_c,
            epsilon_min=self.teacher_forcing_epsilon_min,
        ).probability(step)
