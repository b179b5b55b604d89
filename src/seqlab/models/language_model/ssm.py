"""State-space language model: a stack of S4D blocks over token embeddings (Gu et al., 2022, ``seqlab.nn.state_space``).

For token ids x_1..x_T:

    h^0_t = dropout(E[x_t])                                       (B, T, D)
    h^l = S4DBlock_l(h^{l-1})                                     l = 1 .. L, parallel form (FFT convolution)
    p(x_{t+1} | x_<=t) = softmax(W LayerNorm(h^L_t) + b)          (B, T, V)

Training reads blocks in the parallel form; generation reads the prompt in the parallel form (``prefill``), then
one token at a time in the recurrent form (``step``), carrying each block's state x (B, D, N/2): O(1) time and
memory per generated token whatever the length, so ``context_length`` is None (no bound). ``forward`` takes a
state and returns the one after the last token, so a stream can also be read chunk by chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from seqlab.models.interfaces import LanguageModelOutput, StepOutput, check_token_ids, select_rows
from seqlab.models.pretrained import PretrainedMixin
from seqlab.nn.state_space import INITS, S4DBlock, S4DStack, check_state_size
from seqlab.validation import check_choice, check_int, check_probability

SSMState = tuple[Tensor, ...]  # one complex (B, D, N/2) state per block


@dataclass(frozen=True)
class SSMLanguageModelConfig:
    """Hyperparameters of :class:`SSMLanguageModel`; saved as ``config.json`` with every checkpoint."""

    vocab_size: int  # V
    d_model: int = 128  # D, channels of every block
    num_layers: int = 4  # L, S4D blocks
    state_size: int = 64  # N, real state size per channel (N/2 complex modes)
    init: str = "lin"  # S4D-Lin or S4D-Inv imaginary parts of A
    dropout: float = 0.0  # on the embeddings and inside the blocks

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=2)
        for name in ("d_model", "num_layers"):
            check_int(name, getattr(self, name))
        check_state_size(self.state_size)
        check_choice("init", self.init, INITS)
        check_probability("dropout", self.dropout)


class SSMLanguageModel(PretrainedMixin, nn.Module):
    """State-space language model (module docstring): embedding -> dropout -> L S4D blocks -> LayerNorm -> W h + b.

    Args:
        config: SSMLanguageModelConfig.
    Inputs of forward:
        input_ids: (B, T) long token ids.
        state: the state returned by a previous call on the same streams (one complex (B, D, N/2) tensor per
            block), or None for zeros.
        keep_mask: (B, T) bool, True at real tokens, or None (all real); padding must be on the left (the one
            layout where the state after the last position is the state after the last real token), and only
            from a zero state.
    Outputs: LanguageModelOutput(logits (B, T, V), state after the last position).
    Raises:
        ValueError: input_ids not 2-D integer; keep_mask not (B, T) bool, not left padding, or with a state.
    """

    config_class: ClassVar[type] = SSMLanguageModelConfig
    model_type: ClassVar[str] = "ssm_language_model"
    context_length: int | None = None  # the recurrent form carries its state instead of a bounded context

    def __init__(self, config: SSMLanguageModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        blocks = [
            S4DBlock(config.d_model, config.state_size, dropout=config.dropout, init=config.init)
            for _ in range(config.num_layers)
        ]
        self.blocks = S4DStack(blocks, nn.LayerNorm(config.d_model))
        self.output = nn.Linear(config.d_model, config.vocab_size)

    def forward(
        self, input_ids: Tensor, state: SSMState | None = None, *, keep_mask: Tensor | None = None
    ) -> LanguageModelOutput:
        """Next-token logits (B, T, V) at every position and the state after the last (class docstring)."""
        if input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ValueError(
                f"input_ids must be (B, T) integer token ids, got shape {tuple(input_ids.shape)} and {input_ids.dtype}"
            )
        if keep_mask is not None:
            _check_left_padding(keep_mask, input_ids.shape)
            if bool(keep_mask.all()):
                keep_mask = None
            elif state is not None:
                raise ValueError("keep_mask with padding needs state None: a state would decay through the padding")
        hidden, state = self.blocks(self.dropout(self.embedding(input_ids)), state, keep_mask=keep_mask)
        return LanguageModelOutput(self.output(hidden), state)

    def prefill(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> StepOutput:
        """Read left-padded prompts input_ids (B, T) (keep_mask (B, T), True at real tokens; None = all real) in the
        parallel form. Returns StepOutput(logits (B, V) of the token after each prompt, state after it); each row
        equals its prompt alone.

        Raises: TypeError / ConfigError for ids that are not integers in [0, V) (``check_token_ids``); ValueError
            for a keep_mask that is not left padding.
        """
        check_token_ids(input_ids, self.config.vocab_size)
        logits, state = self(input_ids, keep_mask=keep_mask)
        return StepOutput(logits[:, -1], state)

    def step(self, tokens: Tensor, state: SSMState | None) -> StepOutput:
        """One token per row in the recurrent form: tokens (B,) -> StepOutput(logits (B, V), next state)."""
        h_t, state = self.blocks.step(self.dropout(self.embedding(tokens)), state)  # (B, D)
        return StepOutput(self.output(h_t), state)

    def reorder_state(self, state: SSMState, index: Tensor) -> SSMState:
        """Rows ``index`` (B',) of the state, whose tensors have the batch at dimension 0 ((B, D, N/2))."""
        return select_rows(state, index, dim=0)


def _check_left_padding(keep_mask: Tensor, shape: torch.Size) -> None:
    """Raise ValueError unless keep_mask is bool of ``shape`` with each row False* True+ (left padding)."""
    if keep_mask.dtype != torch.bool or keep_mask.shape != shape:
        raise ValueError(
            f"keep_mask must be a bool tensor of shape {tuple(shape)} like input_ids, got "
            f"{tuple(keep_mask.shape)} and {keep_mask.dtype}"
        )
    # Left padding: once a row is real it stays real, and its last position is real.
    bad = ((keep_mask[:, :-1] & ~keep_mask[:, 1:]).any(1) | ~keep_mask[:, -1]).nonzero().flatten().tolist()
    if bad:
        raise ValueError(f"keep_mask rows {bad} are not left-padded (False then True, ending with a real token)")
