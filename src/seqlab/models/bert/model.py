"""BERT: a bidirectional Transformer encoder (Devlin et al., 2019, sec. 3).

    h_0 = LN(W_tok[x] + W_pos[t] + W_seg[s])           (token + position + segment embeddings, sec. 3.2)
    h_l = layer_l(h_{l-1}),  l = 1..L                  (post-LN: self-attention, then a GELU feed-forward network)
    pooled = tanh(W_p h_L[CLS] + b_p)                  (the pooler over the first token, for sentence-level heads)

Layers are ``seqlab.nn.TransformerEncoderLayer`` with ``norm_first=False`` and the exact (erf) GELU; attention is
SDPA with a key padding ``keep_mask``. Sequences are right-padded: position t is the t-th token whether or not pads
follow it, and pads are never attended, so padding changes nothing at the real tokens.

Config field names follow seqlab's other Transformer configs (``d_model``, ``num_heads``, ``num_layers``, ``d_ff``);
``convert_hf.py`` maps them to Hugging Face's (``hidden_size``, ``num_attention_heads``, ``num_hidden_layers``,
``intermediate_size``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.bert import convert_hf
from seqlab.models.pretrained import PretrainedMixin
from seqlab.nn import TransformerEncoder, TransformerEncoderLayer
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real, check_token_id

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


@dataclass(frozen=True)
class BertConfig:
    """A BERT's shape. Defaults: a small model for CPU pre-training; ``bert_base()`` gives BERT-base's.

    Raises: ConfigError (a ValueError) for a value out of range or d_model not divisible by num_heads.
    """

    vocab_size: int = 8000  # V (WordPiece pieces, special tokens included)
    d_model: int = 128  # D (Hugging Face: hidden_size)
    num_heads: int = 4  # N; Dh = D / N
    num_layers: int = 2  # L
    d_ff: int = 512  # feed-forward inner size (Hugging Face: intermediate_size)
    max_positions: int = 128  # most tokens in one input, [CLS] and [SEP] included (max_position_embeddings)
    type_vocab_size: int = 2  # segments (token type ids): A and B
    dropout: float = 0.1  # on embeddings, attention weights and sublayer outputs while training
    activation: Literal["gelu", "gelu_tanh", "relu"] = "gelu"  # BERT uses the exact (erf) GELU
    layer_norm_eps: float = 1e-12  # epsilon of every layer norm (BERT's value)
    pad_id: int = 0  # [PAD]
    pooler: bool = True  # the tanh dense over [CLS]; BertForMaskedLM folders have none
    num_labels: int = 2  # classes of the sequence / token classification heads

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_positions", "type_vocab_size"):
            check_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_real("layer_norm_eps", self.layer_norm_eps, greater_than=0.0)
        check_token_id("pad_id", self.pad_id, self.vocab_size)
        check_bool("pooler", self.pooler)
        check_int("num_labels", self.num_labels)
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")


class BertOutput(NamedTuple):
    """last_hidden_state (B, T, D); pooled (B, D) tanh(W_p h_L[CLS] + b_p), or None without a pooler;
    hidden_states: L + 1 tensors (B, T, D), the embeddings' output then every layer's, when requested, else None."""

    last_hidden_state: Tensor
    pooled: Tensor | None
    hidden_states: tuple[Tensor, ...] | None


def check_inputs(
    input_ids: Tensor, keep_mask: Tensor | None, token_type_ids: Tensor | None, max_positions: int
) -> None:
    """Raise ValueError (one line with the shapes or numbers) for inputs a BERT cannot read."""
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
    B, T = input_ids.shape
    if max_positions < T:
        raise ValueError(f"an input of {T} tokens is longer than the {max_positions} positions of this BERT")
    for name, mask, dtype in (("keep_mask", keep_mask, torch.bool), ("token_type_ids", token_type_ids, torch.long)):
        if mask is not None and (mask.dtype != dtype or mask.shape != (B, T)):
            raise ValueError(f"{name} must be {dtype} (B, T) = ({B}, {T}), got {mask.dtype} {tuple(mask.shape)}")


class Bert(PretrainedMixin, nn.Module):
    """BERT's body (Devlin et al., 2019): embeddings, a post-LN Transformer encoder, and the [CLS] pooler.

    Args:
        config: a ``BertConfig``.
    Inputs (``forward``): input_ids (B, T) long, [CLS] first; keep_mask (B, T) bool, True at real tokens (pads
        on the right), or None when all are real; token_type_ids (B, T) long segment ids, zeros if None;
        output_hidden_states: also return the embeddings' and every layer's output.
    Outputs: ``BertOutput(last_hidden_state (B, T, D), pooled (B, D) or None, hidden_states or None)``.
    Raises: ValueError if T > ``config.max_positions`` or an input has the wrong shape or dtype (one line).
    """

    config_class: ClassVar[type] = BertConfig
    model_type: ClassVar[str] = "bert"

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        D = config.d_model
        self.word_embeddings = nn.Embedding(config.vocab_size, D, padding_idx=config.pad_id)  # W_tok
        self.position_embeddings = nn.Embedding(config.max_positions, D)  # W_pos
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, D)  # W_seg
        self.embedding_norm = nn.LayerNorm(D, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)
        layers = [
            TransformerEncoderLayer(
                D,
                config.num_heads,
                config.d_ff,
                dropout=config.dropout,
                activation=config.activation,
                norm_first=False,
                layer_norm_eps=config.layer_norm_eps,
            )
            for _ in range(config.num_layers)
        ]
        self.encoder = TransformerEncoder(layers)
        self.pooler = nn.Linear(D, D) if config.pooler else None  # W_p, b_p
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """BERT's initialisation: weights N(0, 0.02^2), biases 0, layer norms 1 and 0, the [PAD] embedding 0."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if isinstance(module, nn.Linear):
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()
        with torch.no_grad():
            self.word_embeddings.weight[self.config.pad_id].zero_()

    def forward(
        self,
        input_ids: Tensor,
        *,
        keep_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> BertOutput:
        check_inputs(input_ids, keep_mask, token_type_ids, self.config.max_positions)
        T = input_ids.shape[1]
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # every token in segment A
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)  # (B, T, D)
        x = x + self.token_type_embeddings(token_type_ids)
        h = self.drop(self.embedding_norm(x))
        # (Not while exporting: the graph must mask whatever padding its inputs hold.)
        if keep_mask is not None and not torch.compiler.is_exporting() and bool(keep_mask.all()):
            keep_mask = None  # SDPA without a mask: the same numbers, and the fused kernel's fastest path
        hidden = [h]
        for layer in self.encoder.layers:
            h = layer(h, keep_mask=keep_mask).output
            hidden.append(h)
        pooled = None if self.pooler is None else torch.tanh(self.pooler(h[:, 0]))  # (B, D)
        return BertOutput(h, pooled, tuple(hidden) if output_hidden_states else None)

    def sentence_embeddings(
        self, input_ids: Tensor, *, keep_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Mean-pooled, L2-normalised sentence embeddings (B, D), the sentence-transformers recipe (Reimers &
        Gurevych, 2019): e = m / ||m||_2, m = (1 / n) sum_{t real} h_L[t], special tokens included, pads not.

        Raises: ValueError as ``forward``.
        """
        h = self(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids).last_hidden_state  # (B, T, D)
        if keep_mask is None:
            mean = h.mean(dim=1)
        else:
            weights = keep_mask.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
            mean = (h * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return F.normalize(mean, p=2.0, dim=-1)  # (B, D)

    @classmethod
    def from_hf(cls, directory: str | Path) -> Bert:
        """Load the body of a Hugging Face BERT folder (``BertModel``, ``BertForMaskedLM``,
        ``BertForPreTraining``, ...: config.json + model.safetensors; pytorch_model.bin is not read, as it would
        unpickle); float32 parameters, eval mode. Heads in the folder are ignored; a folder without a pooler gives
        a model without one.

        Raises:
            CheckpointError: (one line) for a missing file, another architecture, an unsupported config field,
                or a missing or mis-shaped tensor (named).
        """
        return convert_hf.load_hf(cls, Path(directory))

    def save_hf(self, directory: str | Path) -> None:
        """Write a Hugging Face ``BertModel`` folder (config.json + model.safetensors) that
        ``transformers.BertModel.from_pretrained`` loads with the same hidden states."""
        convert_hf.save_hf(self, Path(directory))


def bert(
    *,
    vocab_size: int,
    d_model: int,
    num_heads: int,
    num_layers: int,
    d_ff: int,
    max_positions: int = 512,
    dropout: float = 0.1,
) -> Bert:
    """Component builder: a BERT body of any shape (the presets below only fill in numbers)."""
    config = BertConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=d_ff,
        max_positions=max_positions,
        dropout=dropout,
    )
    return Bert(config)


def bert_base(*, vocab_size: int = 30522) -> Bert:
    """BERT-base (110M parameters with V = 30522): 12 layers, 12 heads, D = 768, d_ff 3072, 512 positions."""
    return bert(vocab_size=vocab_size, d_model=768, num_heads=12, num_layers=12, d_ff=3072)


def bert_tiny(*, vocab_size: int = 8000) -> Bert:
    """A CPU-sized BERT: 2 layers, 4 heads, D = 128, d_ff 512, 128 positions (Turc et al., 2019's BERT-Tiny
    has 2 layers of D = 128 too)."""
    return bert(vocab_size=vocab_size, d_model=128, num_heads=4, num_layers=2, d_ff=512, max_positions=128)
