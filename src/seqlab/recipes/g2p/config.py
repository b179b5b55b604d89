"""The g2p recipe's configuration: the ``[model]`` section (a choice of ``RNNConfig`` and ``TransformerConfig``),
the default ``[train]`` section and the whole ``Config``.

``[data]`` is ``seqlab.data.pronunciations.G2PDataConfig`` (shared with ``t5-g2p``), ``[decode]`` a ``DecodeConfig``
(``seqlab.recipes.common.search.SearchDecodeConfig`` and the coverage penalty), ``[train]`` a
``ScheduledSamplingTrainConfig`` (g2p trains with teacher forcing, or scheduled sampling with
``train.teacher_forcing`` < 1 or a ``train.teacher_forcing_schedule``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Literal

from seqlab.data.pronunciations import G2PDataConfig
from seqlab.errors import ConfigError
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.models.seq2seq.rnn import (
    ATTENTION_NAMES,
    ATTENTION_PLACEMENTS,
    AttentionName,
    PlacementName,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
)
from seqlab.models.seq2seq.transformer import (
    AttentionKind,
    PositionalName,
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig,
)
from seqlab.recipes.common.search import SearchDecodeConfig
from seqlab.recipes.g2p.rescoring import TARGET_ORDERS, TargetOrder
from seqlab.training.train_config import ScheduledSamplingTrainConfig
from seqlab.validation import (
    MAX_DEPTH,
    MAX_WIDTH,
    check_bool,
    check_choice,
    check_int,
    check_probability,
    check_real,
)

__all__ = [
    "DEFAULT_STEPS",
    "DEFAULT_TRAIN",
    "Config",
    "DecodeConfig",
    "ModelConfig",
    "RNNConfig",
    "SharedModelConfig",
    "TransformerConfig",
]

# The model-config fields that the recipe's shared fields give to either model class.
_SHARED_MODEL_FIELDS = ("encoder_layers", "decoder_layers", "dropout")


@dataclass(frozen=True)
class SharedModelConfig:
    """The ``[model]`` fields of both architectures; each subclass names its ``arch`` and adds its own fields.

    Raises: ConfigError (a ValueError) for a value out of range, naming the field and the value.
    """

    arch: str  # set by each architecture's class
    encoder_layers: int = 2  # stacked encoder layers
    decoder_layers: int = 1  # stacked decoder layers
    dropout: float = 0.1  # embeddings, between layers / sublayers, before the output layer
    label_smoothing: float = 0.0  # eps of the smoothed cross-entropy
    target_order: TargetOrder = "left_to_right"  # right_to_left: learn reversed pronunciations (for --rescore)

    training_fields: ClassVar[tuple[str, ...]] = ()  # the subclass's fields that shape the loss, not the model

    def __post_init__(self) -> None:
        check_choice("arch", self.arch, (next(f.default for f in fields(self) if f.name == "arch"),))
        for name in ("encoder_layers", "decoder_layers"):
            check_int(name, getattr(self, name), maximum=MAX_DEPTH)
        check_probability("dropout", self.dropout)
        check_probability("label_smoothing", self.label_smoothing)
        check_choice("target_order", self.target_order, TARGET_ORDERS)

    def model_config(self, *, src_vocab_size: int, tgt_vocab_size: int) -> RNNSeq2SeqConfig | TransformerSeq2SeqConfig:
        """The model config (of the subclass's ``model_class``) of these hyperparameters for the given vocabulary
        sizes (letters, phonemes): the shared layers and dropout, and every field of the subclass's own."""
        shared = {f.name for f in fields(SharedModelConfig)} | set(self.training_fields)
        own = [f.name for f in fields(self) if f.name not in shared]
        values = {k: getattr(self, k) for k in (*_SHARED_MODEL_FIELDS, *own)}
        return self.model_class.config_class(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **values)


@dataclass(frozen=True)
class RNNConfig(SharedModelConfig):
    """``model.arch = "rnn"``: an attention RNN encoder-decoder (``seqlab.models.seq2seq.rnn.RNNSeq2Seq``).

    Raises: ConfigError (a ValueError) for a value out of range, naming the field and the value.
    """

    arch: Literal["rnn"] = "rnn"  # attention RNN seq2seq
    embedding_size: int = 64  # E, letter and phoneme embeddings
    hidden_size: int = 128  # H, per encoder direction and in the decoder
    cell: CellName = "lstm"  # rnn | gru | gru_textbook | lstm
    bidirectional: bool = True  # bidirectional encoder
    attention: AttentionName = "additive"  # additive | dot | scaled_dot | bilinear | none (fixed context)
    attention_placement: PlacementName = "luong"  # luong | luong_input_feeding | bahdanau

    @property
    def model_class(self) -> type[RNNSeq2Seq]:
        """The model class this section builds."""
        return RNNSeq2Seq

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embedding_size", "hidden_size"):
            check_int(name, getattr(self, name), maximum=MAX_WIDTH)
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_bool("bidirectional", self.bidirectional)
        check_choice("attention", self.attention, ATTENTION_NAMES)
        check_choice("attention_placement", self.attention_placement, ATTENTION_PLACEMENTS)


@dataclass(frozen=True)
class TransformerConfig(SharedModelConfig):
    """``model.arch = "transformer"``: a Transformer encoder-decoder
    (``seqlab.models.seq2seq.transformer.TransformerSeq2Seq``).

    Its training defaults differ from the RNN's: dropout 0, and (``SECTION_DEFAULTS``, which ``--set
    model.arch=transformer`` applies to the train section unless the user gives them) Adam at lr 1e-3 with
    betas (0.9, 0.98). With the RNN's dropout 0.1, lr 2e-3 and beta_2 0.999 the small Transformer of
    ``docs/recipes/g2p.md`` (d_model 64) was 17.5 WER points behind the RNN at 2,000 steps; with dropout 0, beta_2
    0.98 and lr 5e-3, 3.2. This default size (d_model 256) does not learn at lr 5e-3 without warmup and learns
    faster at 1e-3 than at 2e-3 (issue 25.1). A config built in Python, ``Config(model=TransformerConfig())``, gets
    them too (``Config``: a train section not given follows the model).

    Raises: ConfigError (a ValueError) for a value out of range, naming the field and the value, or for a d_model
        that num_heads does not divide, an odd head_dim with rotary positions, or a window set without local
        attention (or local attention without a window).
    """

    arch: Literal["transformer"] = "transformer"  # Transformer seq2seq
    dropout: float = 0.0  # embeddings, sublayer outputs, before the output layer (the RNN's 0.1 slows it down)
    d_model: int = 256  # D
    num_heads: int = 4  # N
    d_ff: int = 1024  # feed-forward inner size
    norm_first: bool = True  # pre-LN (False: post-LN as in Vaswani et al.)
    positional: PositionalName = "rotary"  # sinusoidal | learned | rotary
    attention_kind: AttentionKind = "full"  # self-attention: full | local | linear
    window: int | None = None  # keys per query when attention_kind is local
    cross_attention_alibi: float = 0.0  # m_1 of the monotonic cross-attention bias -m_h |j - i / r| (0: none)
    length_ratio: float = 1.0  # r: target tokens per source token for that bias; CMUdict: 0.85 phonemes per letter
    guided_attention_weight: float = 0.0  # lambda of the guided attention loss (Tachibana et al. 2018; 0: none)
    guided_attention_sigma: float = 0.2  # g, the band of the diagonal it leaves free
    guided_attention_heads: int | None = None  # first heads of each chosen layer it applies to; None = all
    guided_attention_layers: int | None = None  # last decoder layers it applies to; None = all

    # Its own training defaults (set unless given: by model.arch=transformer, ``seqlab.config.apply_overrides``, and
    # by ``Config(model=TransformerConfig())``): the RNN's lr 2e-3 and beta_2 0.999 train it far slower; measured in
    # docs/recipes/g2p.md (issue 25.1).
    SECTION_DEFAULTS: ClassVar[Mapping[str, Mapping[str, Any]]] = {"train": {"lr": 1e-3, "betas": (0.9, 0.98)}}
    # Runs saved before the Transformer had its own dropout default held the shared one; a file without it means it.
    OLDER_RUNS: ClassVar[Mapping[str, Any]] = {"dropout": 0.1}

    training_fields: ClassVar[tuple[str, ...]] = (
        "guided_attention_weight",
        "guided_attention_sigma",
        "guided_attention_heads",
        "guided_attention_layers",
    )

    @property
    def model_class(self) -> type[TransformerSeq2Seq]:
        """The model class this section builds."""
        return TransformerSeq2Seq

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_heads", self.num_heads, maximum=MAX_DEPTH)
        for name in ("d_model", "d_ff"):
            check_int(name, getattr(self, name), maximum=MAX_WIDTH)
        check_bool("norm_first", self.norm_first)
        check_choice("positional", self.positional, ("sinusoidal", "learned", "rotary"))
        check_choice("attention_kind", self.attention_kind, ("full", "local", "linear"))
        check_int("window", self.window, optional=True)
        if self.d_model % self.num_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        if self.positional == "rotary" and (self.d_model // self.num_heads) % 2:
            raise ConfigError(f"rotary positions need an even head_dim, got {self.d_model // self.num_heads}")
        if (self.attention_kind == "local") != (self.window is not None):
            raise ConfigError(f"window ({self.window}) must be set exactly when attention_kind is 'local'")
        check_real("cross_attention_alibi", self.cross_attention_alibi, at_least=0.0)
        check_real("length_ratio", self.length_ratio, greater_than=0.0)
        check_real("guided_attention_weight", self.guided_attention_weight, at_least=0.0)
        check_real("guided_attention_sigma", self.guided_attention_sigma, greater_than=0.0)
        check_int("guided_attention_heads", self.guided_attention_heads, optional=True, maximum=self.num_heads)
        check_int("guided_attention_layers", self.guided_attention_layers, optional=True, maximum=self.decoder_layers)


ModelConfig = RNNConfig | TransformerConfig

DEFAULT_STEPS = 20_000
DEFAULT_TRAIN = ScheduledSamplingTrainConfig(
    lr=2e-3,
    batch_size=64,
    time_budget=540.0,
    schedule="cosine",
    max_steps=DEFAULT_STEPS,
    checkpoint_every=500,
)


def _train_defaults(model_class: type[RNNConfig | TransformerConfig]) -> ScheduledSamplingTrainConfig:
    """``DEFAULT_TRAIN`` with the train keys of ``model_class.SECTION_DEFAULTS`` (the class's own training
    defaults; ``seqlab.config.apply_overrides``), or ``DEFAULT_TRAIN`` itself for a class without any."""
    own = getattr(model_class, "SECTION_DEFAULTS", {}).get("train", {})
    return replace(DEFAULT_TRAIN, **own) if own else DEFAULT_TRAIN


# The train section of each model class when the caller gives none: the one object per class that Config's
# __post_init__ recognises (by identity) as "not given".
_ARCH_TRAIN = {cls: _train_defaults(cls) for cls in (RNNConfig, TransformerConfig)}


@dataclass(frozen=True)
class DecodeConfig(SearchDecodeConfig):
    """The g2p ``[decode]`` section: beam search (``SearchDecodeConfig``) and the coverage penalty of Wu et al.
    (2016, eq. 14; ``seqlab.decoding.coverage``), which lowers the score of a finished hypothesis whose attention
    left letters unread (a dropped end).

    Raises: ConfigError (a ValueError) for a value out of range, naming the field and the value, or a coverage
        penalty with greedy search (it ranks finished beam hypotheses; one beam has nothing to rank).
    """

    coverage_penalty: float = 0.0  # beta of cp = beta * sum_i log min(attention on letter i, 1); 0 = none

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("coverage_penalty", self.coverage_penalty, at_least=0.0)
        if self.coverage_penalty > 0 and self.num_beams == 1:
            raise ConfigError("coverage_penalty ranks finished beam hypotheses; it needs num_beams > 1")


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train, decode.

    Raises: ConfigError for a guided attention loss (``model.guided_attention_weight`` > 0) with scheduled sampling.

    The default training fits ten minutes of a 2-core CPU: Adam at 2e-3 and a cosine decay to 0 at step
    ``DEFAULT_STEPS`` (Loshchilov & Hutter 2017), without warmup so that ``--set train.max_steps=N`` works for
    any N. A quiet machine ran 20,000 steps in 474-528 s (38-42 steps/s); on a slower one ``time_budget`` (540 s)
    ends the cosine instead: its progress is max(step / 20,000, elapsed / 540 s) (budgeted training, Li et al.
    2020), so every run ends at the bottom of its schedule (past 83% of the steps the valid loss is within 0.001
    nats of its end). Test decoding and set-up add under a minute. At a constant rate the valid loss stalls at the noise
    floor of the step size: the decay took the test WER from 30.7% to 28.4%, and ending it at 16,000 steps rather
    than 13,000 to 27.4%, at 20,000 to 26.9% (issue 12's levers table). Training checkpoints every 500 steps
    (each writes 13 MB).

    A train section not given follows the model, as ``--set model.arch=...`` and a TOML file do
    (``TransformerConfig.SECTION_DEFAULTS``): ``Config(model=TransformerConfig())`` trains at lr 1e-3 with betas
    (0.9, 0.98), ``Config()`` at the RNN's 2e-3 and (0.9, 0.999). A dataclass cannot tell a value given as the
    default from one not given, so "not given" is told by identity: the train section is one of the per-class
    default objects (``DEFAULT_TRAIN`` itself for the RNN, ``Config(model=TransformerConfig()).train`` for the
    Transformer), however it came: as the field's default, carried over by ``dataclasses.replace(config,
    model=...)`` (which therefore switches the defaults both ways), or passed as ``train=``. Any other train
    section is the caller's and is kept, even one equal to the RNN's defaults (``replace(DEFAULT_TRAIN)``), and so
    is every saved run's (``load_recipe_config`` builds its sections anew).
    """

    data: G2PDataConfig = field(default_factory=G2PDataConfig)
    model: RNNConfig | TransformerConfig = field(default_factory=RNNConfig)
    train: ScheduledSamplingTrainConfig = field(default_factory=lambda: DEFAULT_TRAIN)  # see __post_init__
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        if any(self.train is default for default in _ARCH_TRAIN.values()):  # not given: the model's own defaults
            object.__setattr__(self, "train", _ARCH_TRAIN.get(type(self.model), self.train))
        guided = isinstance(self.model, TransformerConfig) and self.model.guided_attention_weight > 0
        sampled = self.train.teacher_forcing < 1 or self.train.teacher_forcing_schedule != "constant"
        if guided and sampled:
            raise ConfigError(
                "model.guided_attention_weight needs teacher forcing (train.teacher_forcing = 1, a constant "
                "schedule): scheduled sampling's second pass forms no cross-attention weights to guide"
            )
