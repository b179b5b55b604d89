"""ELMo's bidirectional language model (Peters et al., 2018, section 3.1).

A forward and a backward LSTM language model share the token embedding and the softmax; each has its own L
stacked LSTM layers. For the n real tokens x_1..x_n of a sequence:

    e_t = E[x_t]                                                 (B, T, H), token embedding (E = H)
    ->h_{t,j} = LSTM_j(->h_{1..t, j-1})     ->h_{t,0} = e_t       forward layers j = 1..L, reading x_1..x_t
    <-h_{t,j} = LSTM_j(<-h_{t..n, j-1})     <-h_{t,0} = e_t       backward layers, reading x_t..x_n
    p(x_{t+1} | x_1..x_t) = softmax(W ->h_{t,L} + b)             p(x_{t-1} | x_t..x_n) = softmax(W <-h_{t,L} + b)

and the biLM maximises sum_t log p(x_t | x_<t) + log p(x_t | x_>t) (eq. 3); seqlab minimises the sum of the two
mean negative log-likelihoods. With ``residual``, layer j >= 2 adds its input to its output, as ELMo's biLM has
"a residual connection from the first to second layer" (section 3.4). The token representation is a plain
embedding, not ELMo's character CNN: on character-level data (names) the tokens are the characters.

``elmo_representations`` returns every layer's states R_k = {h_{k,j}}: layer 0 is the embedding duplicated,
[e_t; e_t] (as ELMo duplicates its context-insensitive layer), layers 1..L are [->h_{t,j}; <-h_{t,j}], all 2H wide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.pretrained import PretrainedMixin
from seqlab.nn.recurrent import LSTM
from seqlab.validation import check_bool, check_int, check_probability


@dataclass(frozen=True)
class ELMoConfig:
    """Hyperparameters of :class:`ELMo`; saved as ``config.json`` with every checkpoint."""

    vocab_size: int  # V
    hidden_size: int = 128  # H: embedding size and LSTM size per direction (ELMo's projection size, 512)
    num_layers: int = 2  # L biLSTM layers
    dropout: float = 0.1  # on the embedding, between layers and before the softmax
    residual: bool = True  # layer j >= 2 adds its input (Peters et al., 2018, section 3.4)
    tie_embeddings: bool = False  # the softmax matrix W is the embedding matrix E

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=2)
        check_int("hidden_size", self.hidden_size)
        check_int("num_layers", self.num_layers)
        check_probability("dropout", self.dropout)
        check_bool("residual", self.residual)
        check_bool("tie_embeddings", self.tie_embeddings)


class BiLMOutput(NamedTuple):
    """forward_logits (B, T, V): scores of x_{t+1} at position t; backward_logits (B, T, V): scores of x_{t-1}.

    Logits at padded positions are meaningless.
    """

    forward_logits: Tensor
    backward_logits: Tensor


class BiLMLoss(NamedTuple):
    """loss = forward_nll + backward_nll (scalar); each a mean over its num_predictions targets, in nats/token."""

    loss: Tensor
    forward_nll: Tensor
    backward_nll: Tensor
    num_predictions: int


class ELMoRepresentations(NamedTuple):
    """layers (L+1, B, T, 2H): layer 0 = [e; e], layer j = [->h_j; <-h_j], zero at padding; keep_mask (B, T)."""

    layers: Tensor
    keep_mask: Tensor


class ELMo(PretrainedMixin, nn.Module):
    """Bidirectional LSTM language model with shared embedding and softmax (module docstring).

    Every LSTM layer is a one-layer ``seqlab.nn.LSTM``, which runs PyTorch's fused kernel (packed sequences
    under padding); ``model.fused`` says so.

    Args:
        config: ELMoConfig.
    Inputs (forward, elmo_representations, language_model_loss):
        input_ids: (B, T) integer token ids.
        keep_mask: (B, T) bool, True at the real tokens, which come first in each row (right padding), at least
            one per row; None means all real. Padding changes nothing at the real positions.
    Outputs: forward -> BiLMOutput; elmo_representations -> ELMoRepresentations; language_model_loss -> BiLMLoss.
    Raises:
        ValueError: input_ids not (B, T) integers; keep_mask not (B, T) bool, a row without a real token, or real
            tokens after padding.
    """

    config_class: ClassVar[type] = ELMoConfig
    model_type: ClassVar[str] = "elmo"

    def __init__(self, config: ELMoConfig) -> None:
        super().__init__()
        self.config = config
        H = config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, H)
        self.forward_layers = nn.ModuleList(LSTM(H, H) for _ in range(config.num_layers))
        self.backward_layers = nn.ModuleList(LSTM(H, H) for _ in range(config.num_layers))
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(H, config.vocab_size)  # the softmax both directions share
        if config.tie_embeddings:
            self.output.weight = self.embedding.weight

    @property
    def fused(self) -> bool:
        """True when every LSTM layer runs PyTorch's fused kernel."""
        return all(layer.fused for layer in (*self.forward_layers, *self.backward_layers))

    def forward(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> BiLMOutput:
        keep_mask, lengths = self._check(input_ids, keep_mask)
        forward_states, backward_states = self._directional_states(input_ids, lengths)
        return BiLMOutput(self.output(self.dropout(forward_states[-1])), self.output(self.dropout(backward_states[-1])))

    def elmo_representations(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> ELMoRepresentations:
        """Every layer's states, (L+1, B, T, 2H) (module docstring), zero at padded positions."""
        keep_mask, lengths = self._check(input_ids, keep_mask)
        forward_states, backward_states = self._directional_states(input_ids, lengths)
        e = self.embedding(input_ids)  # (B, T, H)
        layers = [torch.cat([e, e], dim=-1)]
        layers += [torch.cat([f, b], dim=-1) for f, b in zip(forward_states, backward_states, strict=True)]
        stacked = torch.stack(layers) * keep_mask.unsqueeze(-1).to(e.dtype)  # (L+1, B, T, 2H)
        return ELMoRepresentations(stacked, keep_mask)

    def language_model_loss(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> BiLMLoss:
        """Forward NLL of x_2..x_n and backward NLL of x_1..x_{n-1} (mean nats/token each) and their sum.

        Raises: ValueError also if no row has two real tokens (nothing to predict).
        """
        keep_mask, _ = self._check(input_ids, keep_mask)
        logits = self(input_ids, keep_mask)
        pairs = keep_mask[:, 1:] & keep_mask[:, :-1]  # (B, T-1): positions t with x_{t+1} real
        count = int(pairs.sum())
        if count == 0:
            raise ValueError("language_model_loss needs a row with at least two real tokens")
        forward_nll = F.cross_entropy(logits.forward_logits[:, :-1][pairs], input_ids[:, 1:][pairs])
        backward_nll = F.cross_entropy(logits.backward_logits[:, 1:][pairs], input_ids[:, :-1][pairs])
        return BiLMLoss(forward_nll + backward_nll, forward_nll, backward_nll, count)

    def _directional_states(self, input_ids: Tensor, lengths: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """([->h_1..->h_L], [<-h_1..<-h_L]), each (B, T, H) in the original positions, zero past each length."""
        e = self.embedding(input_ids)  # (B, T, H)
        reverse = _reversal_index(lengths.to(input_ids.device), input_ids.shape[1])  # (B, T)
        forward_states = self._stack(self.forward_layers, e, lengths)
        backward_states = self._stack(self.backward_layers, _gather_steps(e, reverse), lengths)
        return forward_states, [_gather_steps(h, reverse) for h in backward_states]

    def _stack(self, layers: nn.ModuleList, e: Tensor, lengths: Tensor) -> list[Tensor]:
        states, h = [], e
        for j, lstm in enumerate(layers):
            out, _ = lstm(self.dropout(h), lengths.cpu())  # (B, T, H)
            h = out + h if self.config.residual and j > 0 else out
            states.append(h)
        return states

    @staticmethod
    def _check(input_ids: Tensor, keep_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """(keep_mask (B, T), lengths (B,)) after checking both."""
        if input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ValueError(
                f"input_ids must be (B, T) integer token ids, got shape {tuple(input_ids.shape)} and {input_ids.dtype}"
            )
        B, T = input_ids.shape
        if keep_mask is None:
            return torch.ones(B, T, dtype=torch.bool, device=input_ids.device), torch.full((B,), T)
        if keep_mask.dtype != torch.bool or keep_mask.shape != input_ids.shape:
            raise ValueError(
                f"keep_mask must be a bool tensor of shape {(B, T)} like input_ids, got "
                f"{tuple(keep_mask.shape)} and {keep_mask.dtype}"
            )
        lengths = keep_mask.sum(1)  # (B,)
        if bool((lengths == 0).any()):
            raise ValueError(f"keep_mask rows {lengths.eq(0).nonzero().flatten().tolist()} have no real token")
        prefix = torch.arange(T, device=keep_mask.device) < lengths.unsqueeze(1)  # (B, T)
        if not torch.equal(prefix, keep_mask):
            bad = (prefix != keep_mask).any(1).nonzero().flatten().tolist()
            raise ValueError(f"keep_mask rows {bad} have real tokens after padding (pad on the right)")
        return keep_mask, lengths


def _reversal_index(lengths: Tensor, T: int) -> Tensor:
    """(B, T) index that reverses each row's first lengths[b] steps and leaves its padding in place."""
    steps = torch.arange(T, device=lengths.device)
    lengths = lengths.unsqueeze(1)  # (B, 1)
    return torch.where(steps < lengths, lengths - 1 - steps, steps)  # (B, T); its own inverse


def _gather_steps(x: Tensor, index: Tensor) -> Tensor:
    """x (B, T, F) with step index[b, t] of row b at position t."""
    return x.gather(1, index.unsqueeze(2).expand_as(x))
