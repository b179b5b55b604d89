"""Recurrent language model (Mikolov et al., 2010; regularised as in Zaremba et al., 2014).

For token ids x_1..x_T, with dropout on the non-recurrent connections only (Zaremba et al., 2014, section 3):

    e_t = dropout(E[x_t])                                   (B, T, E)
    h_t = RNN(e_1..e_t)                                     L stacked layers, dropout between them
    p(x_{t+1} | x_<=t) = softmax(W dropout(h_t) + b)        (B, T, V)

With ``tie_embeddings`` the output matrix W is the embedding matrix E (Press & Wolf, 2017; Inan et al., 2017).
The state (h, or (h, c) for an LSTM, batch at dimension -2) is an explicit value: ``forward`` takes it and
returns the state after the last real token, so windows of one stream continue where the previous one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.models.interfaces import LanguageModelOutput, StepOutput, check_token_ids, select_rows
from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real


@dataclass(frozen=True)
class RNNLanguageModelConfig:
    """Hyperparameters of :class:`RNNLanguageModel`; saved as ``config.json`` with every checkpoint."""

    vocab_size: int  # V
    embedding_size: int = 200  # E
    hidden_size: int = 200  # H
    num_layers: int = 2  # L stacked recurrent layers
    cell: CellName = "lstm"  # recurrent unit: rnn | gru | gru_textbook | lstm
    layer_norm: bool = False  # layer-normalised cells (Ba et al., 2016); gru and lstm only, reference path
    dropout: float = 0.0  # on the embeddings, between layers and before the softmax (Zaremba et al., 2014)
    tie_embeddings: bool = False  # W = E; needs embedding_size == hidden_size
    init_range: float | None = None  # r: every weight ~ U(-r, r) (Zaremba: 0.1 / 0.05 / 0.04); None: defaults

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=2)
        check_int("embedding_size", self.embedding_size)
        check_int("hidden_size", self.hidden_size)
        check_int("num_layers", self.num_layers)
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_bool("layer_norm", self.layer_norm)
        check_probability("dropout", self.dropout)
        check_bool("tie_embeddings", self.tie_embeddings)
        check_real("init_range", self.init_range, greater_than=0.0, optional=True)
        if self.layer_norm and self.cell == "rnn":
            raise ConfigError("layer_norm=True needs cell 'gru' or 'lstm'; the Elman 'rnn' has no layer-norm cell")
        if self.tie_embeddings and self.embedding_size != self.hidden_size:
            raise ConfigError(
                f"tie_embeddings=True needs embedding_size ({self.embedding_size}) == hidden_size "
                f"({self.hidden_size}): the output layer reuses the (V, E) embedding matrix on H features"
            )


@dataclass(frozen=True)
class ZarembaTraining:
    """The training settings of a preset, from Zaremba et al. (2014), section 4.1 (and their code, main.lua).

    SGD at ``lr`` for the first ``decay_after`` epochs, then lr divided by ``decay_factor`` after every further
    epoch (``lr_at``); gradients clipped to global norm ``clip_norm``; B = ``batch_size`` parallel streams
    unrolled for ``bptt_len`` steps; ``epochs`` in all.
    """

    lr: float
    decay_factor: float
    decay_after: int
    clip_norm: float
    bptt_len: int
    batch_size: int
    epochs: int

    def lr_at(self, epoch: int) -> float:
        """The learning rate of epoch ``epoch`` (1-based): lr / decay_factor ** max(0, epoch - decay_after)."""
        return self.lr / self.decay_factor ** max(0, epoch - self.decay_after)


class ZarembaPreset(NamedTuple):
    """A named preset: the model's config and the paper's training settings for it."""

    config: RNNLanguageModelConfig
    training: ZarembaTraining


def zaremba_small(vocab_size: int) -> ZarembaPreset:
    """Zaremba et al. (2014), small: 2 x 200 LSTM, no dropout, U(-0.1, 0.1), 20 steps, 13 epochs, lr / 2 after 4."""
    return _zaremba(
        vocab_size, 200, dropout=0.0, init_range=0.1, training=ZarembaTraining(1.0, 2.0, 4, 5.0, 20, 20, 13)
    )


def zaremba_medium(vocab_size: int) -> ZarembaPreset:
    """Zaremba et al. (2014), medium: 2 x 650 LSTM, dropout 0.5, U(-0.05, 0.05), 35 steps, 39 epochs, lr / 1.2
    after 6."""
    return _zaremba(
        vocab_size, 650, dropout=0.5, init_range=0.05, training=ZarembaTraining(1.0, 1.2, 6, 5.0, 35, 20, 39)
    )


def zaremba_large(vocab_size: int) -> ZarembaPreset:
    """Zaremba et al. (2014), large: 2 x 1500 LSTM, dropout 0.65, U(-0.04, 0.04), 35 steps, clip 10, 55 epochs,
    lr / 1.15 after 14."""
    return _zaremba(
        vocab_size, 1500, dropout=0.65, init_range=0.04, training=ZarembaTraining(1.0, 1.15, 14, 10.0, 35, 20, 55)
    )


def _zaremba(
    vocab_size: int, size: int, *, dropout: float, init_range: float, training: ZarembaTraining
) -> ZarembaPreset:
    config = RNNLanguageModelConfig(
        vocab_size=vocab_size,
        embedding_size=size,
        hidden_size=size,
        num_layers=2,
        cell="lstm",
        dropout=dropout,
        init_range=init_range,
    )
    return ZarembaPreset(config, training)


class RNNLanguageModel(PretrainedMixin, nn.Module):
    """Recurrent language model: embedding -> dropout -> stacked RNN/GRU/LSTM -> dropout -> W h_t + b.

    Equations in the module docstring. The recurrent layer runs PyTorch's fused kernel whenever its
    configuration allows (no layer_norm): ``model.fused`` says which path runs.

    Args:
        config: RNNLanguageModelConfig.
    Inputs of forward:
        input_ids: (B, T) long token ids.
        state: the state returned by a previous call on the same streams ((L, B, H), or LSTMState(h, c) each
            (L, B, H)); None means zeros.
        keep_mask: (B, T) bool, True at real tokens; each row's real tokens must be one contiguous run (left or
            right padding), at least one per row. Padding changes nothing: real positions' logits and the
            returned state are those of the real tokens alone. None means all real.
    Outputs: LanguageModelOutput(logits (B, T, V) of the next token at every position (padded positions'
        logits are meaningless), state after each row's last real token).
    Raises:
        ValueError: input_ids not 2-D integer; keep_mask not (B, T) bool, or a row with no real token or with
            real tokens that are not contiguous; a state of the wrong shape (the layer's message).
    """

    config_class: ClassVar[type] = RNNLanguageModelConfig
    model_type: ClassVar[str] = "rnn_language_model"
    context_length: int | None = None  # a recurrent model carries its state instead of a bounded context

    def __init__(self, config: RNNLanguageModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        options = {"layer_norm": config.layer_norm} if config.cell != "rnn" else {}
        self.rnn = RECURRENT_LAYERS[config.cell](
            config.embedding_size,
            config.hidden_size,
            num_layers=config.num_layers,
            dropout=config.dropout,
            **options,
        )
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.hidden_size, config.vocab_size)
        if config.tie_embeddings:
            self.output.weight = self.embedding.weight
        if config.init_range is not None:
            self.reset_parameters_uniform(config.init_range)

    def reset_parameters_uniform(self, init_range: float) -> None:
        """Every parameter ~ U(-r, r), as Zaremba et al. (2014) initialise; layer-norm gains keep 1."""
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if not name.rpartition(".")[2].startswith("gain"):
                    parameter.uniform_(-init_range, init_range)

    @property
    def fused(self) -> bool:
        """True when the recurrent layer runs PyTorch's fused kernel, False for the reference loop."""
        return self.rnn.fused

    def forward(self, input_ids: Tensor, state: Any = None, *, keep_mask: Tensor | None = None) -> LanguageModelOutput:
        """Next-token logits (B, T, V) at every position of input_ids (B, T) and the state after the last real
        token (class docstring)."""
        if input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ValueError(
                f"input_ids must be (B, T) integer token ids, got shape {tuple(input_ids.shape)} and {input_ids.dtype}"
            )
        if keep_mask is not None and (keep_mask.dtype != torch.bool or keep_mask.shape != input_ids.shape):
            raise ValueError(
                f"keep_mask must be a bool tensor of shape {tuple(input_ids.shape)} like input_ids, got "
                f"{tuple(keep_mask.shape)} and {keep_mask.dtype}"
            )
        if keep_mask is None or bool(keep_mask.all()):
            hidden, state = self.rnn(self.dropout(self.embedding(input_ids)), state=state)  # (B, T, H)
            return LanguageModelOutput(self.output(self.dropout(hidden)), state)
        start, lengths = _real_runs(keep_mask)
        # Rotate each row so its real tokens start at step 0: the layer then stops each row at its length
        # (packed on the fused path) and returns the state after its last real token.
        T = input_ids.shape[1]
        steps = torch.arange(T, device=input_ids.device)
        to_front = (steps + start.unsqueeze(1)) % T  # (B, T)
        embedded = self.embedding(input_ids.gather(1, to_front))  # (B, T, E)
        hidden, state = self.rnn(self.dropout(embedded), lengths.cpu(), state)  # (B, T, H), zero past lengths
        back = (steps - start.unsqueeze(1)) % T  # (B, T)
        hidden = hidden.gather(1, back.unsqueeze(2).expand_as(hidden))  # (B, T, H) in the original positions
        return LanguageModelOutput(self.output(self.dropout(hidden)), state)

    def prefill(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> StepOutput:
        """Read left-padded prompts input_ids (B, T) (keep_mask (B, T), True at real tokens; None = all real).

        Returns StepOutput(logits (B, V) of the token after each prompt, state after it); each row equals its
        prompt alone.
        Raises: TypeError / ConfigError for ids that are not integers in [0, V) (``check_token_ids``).
        """
        check_token_ids(input_ids, self.config.vocab_size)
        logits, state = self(input_ids, keep_mask=keep_mask)
        if keep_mask is None:
            return StepOutput(logits[:, -1], state)
        start, lengths = _real_runs(keep_mask)
        last = (start + lengths - 1).to(logits.device)  # (B,)
        return StepOutput(logits[torch.arange(logits.shape[0], device=logits.device), last], state)

    def step(self, tokens: Tensor, state: Any) -> StepOutput:
        """One token per row: tokens (B,) -> StepOutput(logits (B, V), next state); state None means zeros."""
        logits, state = self(tokens.unsqueeze(1), state)
        return StepOutput(logits.squeeze(1), state)

    def reorder_state(self, state: Any, index: Tensor) -> Any:
        """Rows ``index`` (B',) of the state, whose tensors have the batch at dimension -2 ((L, B, H))."""
        return select_rows(state, index, dim=-2)


def _real_runs(keep_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(start (B,), length (B,)) of each row's one contiguous run of True in keep_mask (B, T).

    Raises: ValueError if a row has no True or a row's True are not contiguous.
    """
    lengths = keep_mask.sum(1)  # (B,)
    if bool((lengths == 0).any()):
        raise ValueError(
            f"every row needs at least one real token; rows {lengths.eq(0).nonzero().flatten().tolist()} have none"
        )
    start = keep_mask.long().argmax(1)  # (B,) first True
    steps = torch.arange(keep_mask.shape[1], device=keep_mask.device)
    expected = (steps >= start.unsqueeze(1)) & (steps < (start + lengths).unsqueeze(1))  # (B, T)
    if not torch.equal(expected, keep_mask):
        bad = (expected != keep_mask).any(1).nonzero().flatten().tolist()
        raise ValueError(f"keep_mask rows {bad} have real tokens that are not contiguous (use left or right padding)")
    return start, lengths
