"""Transformer encoder-decoder (Vaswani et al. 2017) for sequence transduction, with KV-cached incremental decoding.

    e(x_s) = sqrt(D) E_src[x_s] (+ PE(s))          memory = Encoder(e(x), src_keep_mask)
    e(y_t) = sqrt(D) E_tgt[y_t] (+ PE(t))          h_t    = Decoder(e(y_<=t), memory)    (causal self-attention)
    p(y_{t+1} | y_<=t, x) = softmax(W_y h_t)       W_y = E_tgt when the output projection is tied (Press & Wolf 2017)

Positions are sinusoidal (Vaswani et al. sec. 3.5) or learned, added to the embeddings, or rotary (Su et al. 2021),
rotating the queries and keys of every self-attention. The cross-attention carries no position of its own; with
``cross_attention_alibi`` > 0 its scores get a monotonic prior, -m_h |j - i / length_ratio| for target step i and
source step j (``seqlab.nn.alignment.monotonic_alibi_bias``), in training and decoding alike.

Decoding implements the step interface of ``seqlab.decoding``: the state holds one ``KVCache`` per decoder layer
and the cross-attention keys and values of the source, computed once, so each step costs O(t) instead of
re-running the whole prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.models.interfaces import Seq2SeqOutput, StepOutput, select_rows
from seqlab.models.pretrained import PretrainedMixin
from seqlab.nn.alignment import alibi_slopes, monotonic_alibi_bias
from seqlab.nn.kv_cache import KVCache
from seqlab.nn.multi_head_attention import ATTENTION_KINDS
from seqlab.nn.positional import LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding
from seqlab.nn.transformer import (
    MemoryKV,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from seqlab.validation import (
    check_bool,
    check_choice,
    check_int,
    check_probability,
    check_real,
    check_special_ids,
)

PositionalName = Literal["sinusoidal", "learned", "rotary"]
POSITIONALS = ("sinusoidal", "learned", "rotary")
AttentionKind = Literal["full", "local", "linear"]


@dataclass(frozen=True)
class TransformerSeq2SeqConfig:
    """Hyperparameters of :class:`TransformerSeq2Seq`; saved as ``config.json`` with every checkpoint."""

    src_vocab_size: int  # V_src, including the special symbols
    tgt_vocab_size: int  # V_tgt, including the special symbols
    d_model: int = 256  # D
    num_heads: int = 4  # N; must divide D
    d_ff: int = 1024  # inner size of the feed-forward networks
    encoder_layers: int = 3  # L_enc
    decoder_layers: int = 3  # L_dec
    dropout: float = 0.1  # attention weights, feed-forward, sublayer outputs, embeddings
    activation: Literal["relu", "gelu"] = "relu"  # feed-forward nonlinearity
    norm_first: bool = True  # pre-LN (Xiong et al. 2020); False = post-LN as in Vaswani et al.
    positional: PositionalName = "rotary"  # sinusoidal | learned | rotary
    max_length: int = 256  # longest source or target with learned positions; the sin/cos tables cached
    attention_kind: AttentionKind = "full"  # self-attention: full | local (sliding window) | linear
    window: int | None = None  # keys per query for attention_kind="local"
    share_embeddings: bool = False  # one embedding table for source and target (needs equal vocabularies)
    tie_output: bool = True  # output projection W_y = E_tgt
    pad_id: int = 0  # padding symbol in both vocabularies
    bos_id: int = 1  # start-of-sequence symbol fed to the decoder first
    eos_id: int = 2  # end-of-sequence symbol the decoder emits last
    cross_attention_alibi: float = 0.0  # m_1 of the monotonic cross-attention bias (0: none); see the module doc
    length_ratio: float = 1.0  # r, expected target tokens per source token, where the bias centres target step i

    def __post_init__(self) -> None:
        sizes = ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff", "encoder_layers")
        for name in (*sizes, "decoder_layers", "max_length"):
            check_int(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        check_choice("positional", self.positional, POSITIONALS)
        if self.positional == "rotary" and (self.d_model // self.num_heads) % 2:
            raise ConfigError(f"rotary positions need an even head_dim, got {self.d_model // self.num_heads}")
        check_choice("attention_kind", self.attention_kind, ATTENTION_KINDS)
        check_choice("activation", self.activation, ("relu", "gelu"))
        check_int("window", self.window, optional=True)
        if (self.attention_kind == "local") != (self.window is not None):
            raise ConfigError(f"window ({self.window}) must be set exactly when attention_kind is 'local'")
        check_probability("dropout", self.dropout)
        check_real("cross_attention_alibi", self.cross_attention_alibi, at_least=0.0)
        check_real("length_ratio", self.length_ratio, greater_than=0.0)
        for name in ("norm_first", "share_embeddings", "tie_output"):
            check_bool(name, getattr(self, name))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"share_embeddings needs equal vocabularies, got {self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        check_special_ids(
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            pad_id=self.pad_id,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
        )


class TransformerDecoderState(NamedTuple):
    """What one decoding step needs, every tensor batch-first (so ``select_rows`` reorders beams).

    memory_kv: per decoder layer, the cross-attention keys and values (B, N, S, Dh). src_keep_mask: (B, S), True at
    real source steps. caches: per decoder layer, the self-attention KVCache; caches[0].length is the number of
    target positions consumed so far.
    """

    memory_kv: list[MemoryKV]
    src_keep_mask: Tensor
    caches: list[KVCache]


class TransformerSeq2Seq(PretrainedMixin, nn.Module):
    """Transformer encoder-decoder; trained with teacher forcing, decoded through the step interface.

    Args:
        config: TransformerSeq2SeqConfig.
    Inputs of forward: src (B, S) ids, src_lengths (B,), tgt_in (B, T) = [BOS] + target (teacher forcing);
        need_weights: also return the cross-attention weights.
    Outputs: Seq2SeqOutput(logits (B, T, V), attention (B, T, S): the last decoder layer's cross-attention weights
        averaged over heads, zero at padded source steps, when need_weights; None otherwise).
    Raises: ValueError (from the layers) for sequences longer than the positional table or mismatched shapes.
    """

    config_class: ClassVar[type] = TransformerSeq2SeqConfig
    model_type: ClassVar[str] = "transformer_seq2seq"

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        D, N = config.d_model, config.num_heads
        self.src_embedding = nn.Embedding(config.src_vocab_size, D, padding_idx=config.pad_id)
        self.tgt_embedding = (
            self.src_embedding
            if config.share_embeddings
            else nn.Embedding(config.tgt_vocab_size, D, padding_idx=config.pad_id)
        )
        for embedding in dict.fromkeys((self.src_embedding, self.tgt_embedding)):  # in order, once if shared
            nn.init.normal_(embedding.weight, std=D**-0.5)  # with the sqrt(D) scale, inputs start near unit size
            with torch.no_grad():
                embedding.weight[config.pad_id].zero_()
        self.positions = _additive_positions(config)
        rotary = RotaryEmbedding(D // N, max_length=config.max_length) if config.positional == "rotary" else None
        layer_options = {
            "dropout": config.dropout,
            "activation": config.activation,
            "norm_first": config.norm_first,
            "attention_kind": config.attention_kind,
            "window": config.window,
            "rotary": rotary,
        }
        final_norm = nn.LayerNorm if config.norm_first else None
        self.encoder = TransformerEncoder(
            [TransformerEncoderLayer(D, N, config.d_ff, **layer_options) for _ in range(config.encoder_layers)],
            final_norm=final_norm(D) if final_norm else None,
        )
        self.decoder = TransformerDecoder(
            [TransformerDecoderLayer(D, N, config.d_ff, **layer_options) for _ in range(config.decoder_layers)],
            final_norm=final_norm(D) if final_norm else None,
        )
        self.dropout = nn.Dropout(config.dropout)
        slopes = alibi_slopes(N, config.cross_attention_alibi) if config.cross_attention_alibi > 0 else None
        self.register_buffer("alibi_slopes", slopes, persistent=False)  # (N,) m_h, or None
        self.output = nn.Linear(D, config.tgt_vocab_size, bias=False)  # W_y
        if config.tie_output:
            self.output.weight = self.tgt_embedding.weight

    def _embed(self, embedding: nn.Embedding, tokens: Tensor, offset: int) -> Tensor:
        x = embedding(tokens) * math.sqrt(self.config.d_model)  # (B, T, D)
        if self.positions is not None:
            x = self.positions(x, offset=offset)
        return self.dropout(x)

    def _cross_attn_bias(self, offset: int, T: int, S: int) -> Tensor | None:
        """The monotonic cross-attention bias (1, N, T, S) of target positions offset..offset+T-1, or None."""
        if self.alibi_slopes is None:
            return None
        positions = torch.arange(offset, offset + T, device=self.alibi_slopes.device)
        return monotonic_alibi_bias(self.alibi_slopes, positions, S, self.config.length_ratio).unsqueeze(0)

    def _encode_source(self, src: Tensor, src_lengths: Tensor) -> tuple[list[MemoryKV], Tensor]:
        S = src.shape[1]
        src_keep_mask = torch.arange(S, device=src.device) < src_lengths.to(src.device).unsqueeze(1)  # (B, S)
        memory = self.encoder(self._embed(self.src_embedding, src, 0), keep_mask=src_keep_mask)  # (B, S, D)
        return self.decoder.project_memory(memory), src_keep_mask

    def encode(self, src: Tensor, src_lengths: Tensor) -> TransformerDecoderState:
        """Run the encoder once: src (B, S), src_lengths (B,) -> the state that starts decoding (empty caches)."""
        memory_kv, src_keep_mask = self._encode_source(src, src_lengths)
        k = memory_kv[0][0]
        caches = self.decoder.empty_caches(src.shape[0], dtype=k.dtype, device=k.device)
        return TransformerDecoderState(memory_kv, src_keep_mask, caches)

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *, need_weights: bool = False) -> Seq2SeqOutput:
        """Teacher-forced logits; with need_weights, also the last decoder layer's cross-attention weights averaged
        over its N heads (as torch.nn.MultiheadAttention's default), one (T, S) map per sequence."""
        memory_kv, src_keep_mask = self._encode_source(src, src_lengths)
        out = self.decoder(
            self._embed(self.tgt_embedding, tgt_in, 0),
            memory_kv,
            memory_keep_mask=src_keep_mask,
            need_weights=need_weights,
            cross_attn_bias=self._cross_attn_bias(0, tgt_in.shape[1], src.shape[1]),
        )
        attention = out.cross_weights[-1].mean(dim=1) if need_weights else None  # (B, N, T, S) -> (B, T, S)
        return Seq2SeqOutput(self.output(out.output), attention)

    def forward_with_cross_weights(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor
    ) -> tuple[Tensor, list[Tensor]]:
        """Teacher-forced logits (B, T, V) and every decoder layer's cross-attention weights (B, N, T, S), first
        layer first, with their gradients (for an alignment loss such as
        ``seqlab.nn.alignment.guided_attention_loss``). In training they are the weights after attention dropout,
        as ``need_weights`` returns them."""
        memory_kv, src_keep_mask = self._encode_source(src, src_lengths)
        out = self.decoder(
            self._embed(self.tgt_embedding, tgt_in, 0),
            memory_kv,
            memory_keep_mask=src_keep_mask,
            need_weights=True,
            cross_attn_bias=self._cross_attn_bias(0, tgt_in.shape[1], src.shape[1]),
        )
        return self.output(out.output), out.cross_weights

    def prefill(self, tgt_in: Tensor, state: TransformerDecoderState) -> StepOutput:
        """Decode T given tokens at once after the state's cached positions: tgt_in (B, T) -> StepOutput(logits
        (B, V) of the token after the last, state with caches + T). ``step`` is the case T = 1."""
        position = state.caches[0].length
        x = self._embed(self.tgt_embedding, tgt_in, position)  # (B, T, D)
        bias = self._cross_attn_bias(position, tgt_in.shape[1], state.src_keep_mask.shape[1])
        out = self.decoder(
            x, state.memory_kv, memory_keep_mask=state.src_keep_mask, caches=state.caches, cross_attn_bias=bias
        )
        return StepOutput(self.output(out.output[:, -1]), state._replace(caches=out.caches))

    def step(self, tokens: Tensor, state: TransformerDecoderState) -> StepOutput:
        """One decoding step: tokens (B,) previous outputs -> StepOutput(logits (B, V), state with caches + 1)."""
        return self.prefill(tokens.unsqueeze(1), state)

    def attention_step(self, tokens: Tensor, state: TransformerDecoderState) -> tuple[StepOutput, Tensor]:
        """``step`` with the last decoder layer's cross-attention weights averaged over heads (B, S), as
        ``forward(need_weights=True)`` gives them, for the coverage penalty (``seqlab.decoding.coverage``)."""
        position = state.caches[0].length
        x = self._embed(self.tgt_embedding, tokens.unsqueeze(1), position)  # (B, 1, D)
        out = self.decoder(
            x,
            state.memory_kv,
            memory_keep_mask=state.src_keep_mask,
            caches=state.caches,
            need_weights=True,
            cross_attn_bias=self._cross_attn_bias(position, 1, state.src_keep_mask.shape[1]),
        )
        weights = out.cross_weights[-1].mean(dim=1).squeeze(1)  # (B, N, 1, S) -> (B, S)
        return StepOutput(self.output(out.output).squeeze(1), state._replace(caches=out.caches)), weights

    def reorder_state(self, state: TransformerDecoderState, index: Tensor) -> TransformerDecoderState:
        """Rows ``index`` (B',) of the state (copies, so beams never share cache buffers)."""
        return select_rows(state, index)


def _additive_positions(config: TransformerSeq2SeqConfig) -> nn.Module | None:
    if config.positional == "sinusoidal":
        return SinusoidalPositionalEncoding(config.d_model, max_length=config.max_length)
    if config.positional == "learned":
        return LearnedPositionalEncoding(config.max_length, config.d_model)
    return None
