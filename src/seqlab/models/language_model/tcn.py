"""Convolutional language model: a causal temporal convolutional network over token embeddings (Bai, Kolter &
Koltun, 2018, section 4, the character- and word-level language models; WaveNet's causal dilated stack, van den
Oord et al., 2016).

For token ids x_1..x_T, with dropout on the embeddings, inside the TCN's blocks and before the softmax:

    e_t = dropout(E[x_t])                                   (B, T, E)
    h_t = TCN(e_{t-R+1}..e_t)                               (B, T, H), L levels, receptive field R
    p(x_{t+1} | x_<=t) = softmax(W dropout(h_t) + b)        (B, T, V)

R = 1 + 2 (k - 1)(2^L - 1) tokens (``seqlab.nn.TemporalConvNet``): the prediction after x_t reads x_{t-R+1..t}.
The state is each convolution's last (k - 1) d inputs (``seqlab.nn.temporal_convolution``), an explicit value as
for a recurrent model: ``forward`` takes it and returns the state after the last token, so a stream can be read in
windows (truncated BPTT in training, one stream in evaluation) and generation steps one token at a time at a
constant cost per token (the cached activations of fast WaveNet, Paine et al., 2016) instead of recomputing the
last R tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from seqlab.models.interfaces import LanguageModelOutput, StepOutput, check_token_ids, select_rows
from seqlab.models.pretrained import PretrainedMixin
from seqlab.nn.temporal_convolution import TemporalConvNet, check_tcn_sizes
from seqlab.validation import check_bool, check_int, check_probability


@dataclass(frozen=True)
class TCNLanguageModelConfig:
    """Hyperparameters of :class:`TCNLanguageModel`; saved as ``config.json`` with every checkpoint."""

    vocab_size: int  # V
    embedding_size: int = 128  # E
    hidden_size: int = 256  # H, channels of every level
    num_levels: int = 6  # L residual blocks, dilations 1, 2, ..., 2^(L-1)
    kernel_size: int = 3  # k of every causal convolution
    dropout: float = 0.0  # on the embeddings, inside the blocks and before the softmax
    weight_norm: bool = False  # weight-normalised convolutions (Bai et al. use them)

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=2)
        for name in ("embedding_size", "hidden_size"):
            check_int(name, getattr(self, name))
        check_tcn_sizes(self.kernel_size, self.num_levels)
        check_probability("dropout", self.dropout)
        check_bool("weight_norm", self.weight_norm)

    @property
    def receptive_field(self) -> int:
        """R = 1 + 2 (k - 1)(2^L - 1), the tokens each prediction reads."""
        return check_tcn_sizes(self.kernel_size, self.num_levels)


class TCNLanguageModel(PretrainedMixin, nn.Module):
    """Convolutional language model: embedding -> dropout -> causal TCN -> dropout -> W h_t + b (module
    docstring), a ``LanguageModelStepModel`` with a cached state instead of a bounded context.

    Args:
        config: TCNLanguageModelConfig.
    Inputs of forward:
        input_ids: (B, T) long token ids.
        state: the state returned by a previous call on the same streams (one pair of (P, B, C) tensors per
            level), or None: the streams start here.
        keep_mask: (B, T) bool, True at real tokens, pads on the left only, at least one real token per row;
            padding changes nothing (each row's logits and state are those of its real tokens alone). None
            means all real.
    Outputs: LanguageModelOutput(logits (B, T, V) of the next token at every position, state after the last).
    Raises:
        ValueError: input_ids not 2-D integer; keep_mask not (B, T) bool, or with a row that has no real token
            or a pad after a real token; a state of the wrong shape (the TCN's message).
    """

    config_class: ClassVar[type] = TCNLanguageModelConfig
    model_type: ClassVar[str] = "tcn_language_model"
    context_length: int | None = None  # unbounded: the state carries the last R - 1 tokens' activations

    def __init__(self, config: TCNLanguageModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        self.tcn = TemporalConvNet(
            config.embedding_size,
            config.hidden_size,
            num_levels=config.num_levels,
            kernel_size=config.kernel_size,
            dropout=config.dropout,
            weight_norm=config.weight_norm,
        )
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.hidden_size, config.vocab_size)

    @property
    def receptive_field(self) -> int:
        """R, the tokens each prediction reads (``TemporalConvNet.receptive_field``)."""
        return self.tcn.receptive_field

    def forward(self, input_ids: Tensor, state: Any = None, *, keep_mask: Tensor | None = None) -> LanguageModelOutput:
        """Next-token logits (B, T, V) at every position of input_ids (B, T) and the state after the last token
        (class docstring)."""
        if input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ValueError(
                f"input_ids must be (B, T) integer token ids, got shape {tuple(input_ids.shape)} and {input_ids.dtype}"
            )
        if keep_mask is not None:
            if keep_mask.dtype != torch.bool or keep_mask.shape != input_ids.shape:
                raise ValueError(
                    f"keep_mask must be a bool tensor of shape {tuple(input_ids.shape)} like input_ids, got "
                    f"{tuple(keep_mask.shape)} and {keep_mask.dtype}"
                )
            # Left padding: False then True along each row, ending in a real token.
            bad = (keep_mask[:, 1:] < keep_mask[:, :-1]).any(1) | ~keep_mask[:, -1]  # (B,)
            if bool(bad.any()):
                raise ValueError(f"keep_mask rows {bad.nonzero().flatten().tolist()} are not left-padded real tokens")
        hidden, state = self.tcn(self.dropout(self.embedding(input_ids)), state, keep_mask=keep_mask)  # (B, T, H)
        return LanguageModelOutput(self.output(self.dropout(hidden)), state)

    def prefill(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> StepOutput:
        """Read left-padded prompts input_ids (B, T) (keep_mask (B, T), True at real tokens; None = all real).

        Returns StepOutput(logits (B, V) of the token after each prompt, state after it); each row equals its
        prompt alone.
        Raises: TypeError / ConfigError for ids that are not integers in [0, V) (``check_token_ids``); ValueError
            as ``forward`` for a keep_mask that is not left padding.
        """
        check_token_ids(input_ids, self.config.vocab_size)
        logits, state = self(input_ids, keep_mask=keep_mask)
        return StepOutput(logits[:, -1], state)

    def step(self, tokens: Tensor, state: Any) -> StepOutput:
        """One token per row: tokens (B,) -> StepOutput(logits (B, V), next state); state None means a new stream."""
        logits, state = self(tokens.unsqueeze(1), state)
        return StepOutput(logits.squeeze(1), state)

    def reorder_state(self, state: Any, index: Tensor) -> Any:
        """Rows ``index`` (B',) of the state, whose tensors have the batch at dimension -2 ((P, B, C))."""
        return select_rows(state, index, dim=-2)
