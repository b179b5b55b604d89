"""The g2p recipe's configuration: the ``[model]`` and ``[decode]`` sections and the whole ``Config``.

``[data]`` is ``seqlab.data.pronunciations.G2PDataConfig`` (shared with ``t5-g2p``), ``[train]`` a ``TrainConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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
from seqlab.recipes.g2p_rescoring import TARGET_ORDERS, TargetOrder
from seqlab.training.trainer import TrainConfig
from seqlab.validation import MAX_DEPTH, MAX_WIDTH, check_bool, check_choice, check_int, check_probability, check_real

__all__ = ["DEFAULT_STEPS", "DEFAULT_TRAIN", "MAX_DECODE", "Config", "G2PDecodeConfig", "G2PModelConfig"]

# The largest values a config may set: beyond them a run would only run out of memory or time.
MAX_DECODE = {"beam_size": 1_000, "max_length": 10_000, "batch_size": 100_000}


_RNN_FIELDS = ("embedding_size", "hidden_size", "cell", "bidirectional", "attention", "attention_placement")
_TRANSFORMER_FIELDS = ("d_model", "num_heads", "d_ff", "norm_first", "positional", "attention_kind", "window")


@dataclass(frozen=True)
class G2PModelConfig:
    """Architecture of the encoder-decoder: arch "rnn" (seqlab.models.seq2seq) or "transformer"
    (seqlab.models.seq2seq.transformer). Layers, dropout and label smoothing apply to both."""

    arch: Literal["rnn", "transformer"] = "rnn"  # attention RNN seq2seq or Transformer
    encoder_layers: int = 2  # stacked encoder layers
    decoder_layers: int = 1  # stacked decoder layers
    dropout: float = 0.1  # embeddings, between layers / sublayers, before the output layer
    label_smoothing: float = 0.0  # eps of the smoothed cross-entropy
    embedding_size: int = 64  # rnn: E, letter and phoneme embeddings
    hidden_size: int = 128  # rnn: H, per encoder direction and in the decoder
    cell: CellName = "lstm"  # rnn: rnn | gru | lstm
    bidirectional: bool = True  # rnn: bidirectional encoder
    attention: AttentionName = "additive"  # rnn: additive | dot | scaled_dot | bilinear | none (fixed context)
    attention_placement: PlacementName = "luong"  # rnn: luong | luong_input_feeding | bahdanau
    d_model: int = 256  # transformer: D
    num_heads: int = 4  # transformer: N
    d_ff: int = 1024  # transformer: feed-forward inner size
    norm_first: bool = True  # transformer: pre-LN (False: post-LN as in Vaswani et al.)
    positional: PositionalName = "rotary"  # transformer: sinusoidal | learned | rotary
    attention_kind: AttentionKind = "full"  # transformer self-attention: full | local | linear
    window: int | None = None  # transformer: keys per query when attention_kind is local
    target_order: TargetOrder = "left_to_right"  # right_to_left: learn reversed pronunciations (for --rescore)

    def __post_init__(self) -> None:
        # Every field is checked, whichever arch is chosen, so a bad --set fails before any data is read.
        check_choice("arch", self.arch, ("rnn", "transformer"))
        for name in ("encoder_layers", "decoder_layers", "num_heads"):
            check_int(name, getattr(self, name), maximum=MAX_DEPTH)
        for name in ("embedding_size", "hidden_size", "d_model", "d_ff"):
            check_int(name, getattr(self, name), maximum=MAX_WIDTH)
        check_probability("dropout", self.dropout)
        check_probability("label_smoothing", self.label_smoothing)
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_bool("bidirectional", self.bidirectional)
        check_choice("attention", self.attention, ATTENTION_NAMES)
        check_choice("attention_placement", self.attention_placement, ATTENTION_PLACEMENTS)
        check_bool("norm_first", self.norm_first)
        check_choice("positional", self.positional, ("sinusoidal", "learned", "rotary"))
        check_choice("attention_kind", self.attention_kind, ("full", "local", "linear"))
        check_int("window", self.window, optional=True)
        check_choice("target_order", self.target_order, TARGET_ORDERS)
        if self.d_model % self.num_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        if self.positional == "rotary" and (self.d_model // self.num_heads) % 2:
            raise ConfigError(f"rotary positions need an even head_dim, got {self.d_model // self.num_heads}")
        if (self.attention_kind == "local") != (self.window is not None):
            raise ConfigError(f"window ({self.window}) must be set exactly when attention_kind is 'local'")

    @property
    def model_class(self) -> type[RNNSeq2Seq] | type[TransformerSeq2Seq]:
        return TransformerSeq2Seq if self.arch == "transformer" else RNNSeq2Seq

    def model_config(self, *, src_vocab_size: int, tgt_vocab_size: int) -> RNNSeq2SeqConfig | TransformerSeq2SeqConfig:
        """The model config of these hyperparameters for the given vocabulary sizes."""
        shared = ("encoder_layers", "decoder_layers", "dropout")
        own = _TRANSFORMER_FIELDS if self.arch == "transformer" else _RNN_FIELDS
        fields = {k: getattr(self, k) for k in (*shared, *own)}
        return self.model_class.config_class(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **fields)


@dataclass(frozen=True)
class G2PDecodeConfig:
    """How test words are decoded."""

    beam_size: int = 5  # 1 = greedy search
    length_penalty: float = 0.0  # score = log p / length**length_penalty; 0 ranks by log p itself
    max_length: int = 32  # most phonemes per word, EOS included (CMUdict has up to 28)
    batch_size: int = 256  # words decoded together

    def __post_init__(self) -> None:
        for name, maximum in MAX_DECODE.items():
            check_int(name, getattr(self, name), maximum=maximum)
        check_real("length_penalty", self.length_penalty)


DEFAULT_STEPS = 20_000
DEFAULT_TRAIN = TrainConfig(
    lr=2e-3,
    batch_size=64,
    time_budget=540.0,
    schedule="cosine",
    max_steps=DEFAULT_STEPS,
    checkpoint_every=500,
)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train, decode.

    The default training fits ten minutes of a 2-core CPU: Adam at 2e-3 and a cosine decay to 0 at step
    ``DEFAULT_STEPS`` (Loshchilov & Hutter 2017), without warmup so that ``--set train.max_steps=N`` works for
    any N. A quiet machine ran 20,000 steps in 474-528 s (38-42 steps/s); ``time_budget`` (540 s) stops a slower
    machine earlier, where the cosine is low already (past 83% of the steps the valid loss is within 0.001 nats of
    its end). Test decoding and set-up add under a minute. At a constant rate the valid loss stalls at the noise
    floor of the step size: the decay took the test WER from 30.7% to 28.4%, and ending it at 16,000 steps rather
    than 13,000 to 27.4%, at 20,000 to 26.9% (issue 12's levers table). Training checkpoints every 500 steps
    (each writes 13 MB).
    """

    data: G2PDataConfig = field(default_factory=G2PDataConfig)
    model: G2PModelConfig = field(default_factory=G2PModelConfig)
    train: TrainConfig = field(default_factory=lambda: DEFAULT_TRAIN)
    decode: G2PDecodeConfig = field(default_factory=G2PDecodeConfig)
