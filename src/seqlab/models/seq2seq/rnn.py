"""RNN encoder-decoder with attention (Bahdanau et al. 2015; Luong et al. 2015) or a fixed context (Cho et al. 2014).

Encoder: embeddings -> a (by default bidirectional, stacked) RNN/GRU/LSTM giving the memory m_1..m_S.
Decoder, in one of three attention placements (``attention_placement``); score and alpha are masked so that padded
source steps get weight 0, context_t = sum_j alpha_tj m_j, and in every placement

    h~_t = tanh(W_c [s_t; context_t]),    p(y_t | y_<t, x) = softmax(W_y h~_t + b_y)

- "luong" (Luong et al. 2015, Sec. 3, without input feeding; the default): s_t = RNN(s_{t-1}, [e(y_{t-1}); c]) (c
  only in the fixed-context model), then alpha_t = softmax_j score(s_t, m_j). The recurrence does not depend on the
  attention, so teacher-forced training runs the recurrent layer over the whole target at once, on the fused kernel
  where there is one.
- "luong_input_feeding" (Luong et al. 2015, Sec. 3.3): s_t = RNN(s_{t-1}, [e(y_{t-1}); h~_{t-1}]) with h~_0 = 0, then
  alpha_t = softmax_j score(s_t, m_j): the previous attentional vector is fed to the next step.
- "bahdanau" (Bahdanau et al. 2015, appendix A.2.2, as the seeds write it): alpha_t = softmax_j score(s_{t-1}, m_j)
  with the previous state (the top layer's h), then s_t = RNN(s_{t-1}, [e(y_{t-1}); context_t]). The read-out is
  the h~_t above rather than Bahdanau's maxout deep output, so the placements differ only in where attention sits.

The last two run the decoder one step at a time, in training as in decoding.

The decoder's initial state is a learned bridge from the encoder's final state: s_0 = tanh(W_b [h_S fwd; h_1 bwd] + b_b)
in every decoder layer (LSTM cell state c_0 = 0), as in Bahdanau et al. (2015, appendix A.2.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.models.interfaces import Seq2SeqOutput, StepOutput, select_rows
from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.nn.attention import AdditiveAttention, BilinearAttention, DotProductAttention
from seqlab.nn.cells import LSTMState
from seqlab.nn.recurrent import GRU, LSTM, RNN
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_special_ids

AttentionName = Literal["additive", "dot", "scaled_dot", "bilinear", "none"]
ATTENTION_NAMES = ("additive", "dot", "scaled_dot", "bilinear", "none")
PlacementName = Literal["luong", "luong_input_feeding", "bahdanau"]
ATTENTION_PLACEMENTS: tuple[PlacementName, ...] = ("luong", "luong_input_feeding", "bahdanau")


@dataclass(frozen=True)
class RNNSeq2SeqConfig:
    """Hyperparameters of :class:`RNNSeq2Seq`; saved as ``config.json`` with every checkpoint."""

    src_vocab_size: int  # V_src, including the special symbols
    tgt_vocab_size: int  # V_tgt, including the special symbols
    embedding_size: int = 128  # E, source and target embeddings
    hidden_size: int = 256  # H, per direction in the encoder; the decoder's size
    cell: CellName = "lstm"  # recurrent unit of encoder and decoder
    encoder_layers: int = 2  # stacked encoder layers
    decoder_layers: int = 1  # stacked decoder layers
    bidirectional: bool = True  # bidirectional encoder
    attention: AttentionName = "additive"  # score function, or "none" for the fixed-context baseline
    dropout: float = 0.2  # on embeddings, between layers and before the output layer
    pad_id: int = 0  # padding symbol in both vocabularies
    bos_id: int = 1  # start-of-sequence symbol fed to the decoder first
    eos_id: int = 2  # end-of-sequence symbol the decoder emits last
    attention_placement: PlacementName = "luong"  # luong | luong_input_feeding | bahdanau (module docstring)

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "embedding_size", "hidden_size"):
            check_int(name, getattr(self, name))
        check_int("encoder_layers", self.encoder_layers)
        check_int("decoder_layers", self.decoder_layers)
        check_special_ids(
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            pad_id=self.pad_id,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
        )
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_bool("bidirectional", self.bidirectional)
        check_choice("attention", self.attention, ATTENTION_NAMES)
        check_probability("dropout", self.dropout)
        check_choice("attention_placement", self.attention_placement, ATTENTION_PLACEMENTS)
        if self.attention == "none" and self.attention_placement != "luong":
            raise ConfigError(
                f"attention_placement ({self.attention_placement!r}) needs an attention; attention is 'none'"
            )


class EncoderOutput(NamedTuple):
    """memory (B, S, C*H): per-step outputs, zero past each length; final (B, C*H): top layer [h_S fwd; h_1 bwd]."""

    memory: Tensor
    final: Tensor


class RNNDecoderState(NamedTuple):
    """What one decoding step needs: the decoder's recurrent state and the encoded source.

    hidden: (L, B, H), or LSTMState of two such tensors. memory: (B, S, C*H). keys: (B, S, Hk), the memory as the
    score function sees it. src_keep_mask: (B, S), True at real source steps. context: (B, C*H) fixed context, or None.
    feed: (B, H) the previous attentional vector h~_{t-1} under input feeding, else None.
    """

    hidden: Tensor | LSTMState
    memory: Tensor
    keys: Tensor
    src_keep_mask: Tensor
    context: Tensor | None
    feed: Tensor | None = None


class RNNEncoder(nn.Module):
    """Embeddings and a recurrent layer over the source.

    Inputs: src (B, S) token ids, src_lengths (B,).
    Outputs: EncoderOutput(memory (B, S, C*H), final (B, C*H)).
    """

    def __init__(self, embedding: nn.Embedding, rnn: RNN | GRU | LSTM, *, dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding = embedding
        self.rnn = rnn
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        memory, state = self.rnn(self.dropout(self.embedding(src)), src_lengths)
        h_n = state.h if isinstance(state, LSTMState) else state  # (L*C, B, H)
        C = 2 if self.rnn.bidirectional else 1
        top = h_n[-C:]  # (C, B, H), forward then backward direction of the top layer
        return EncoderOutput(memory, top.transpose(0, 1).reshape(src.shape[0], -1))  # (B, C*H)


class AttentionDecoder(nn.Module):
    """Recurrent decoder that attends over the encoder memory, or conditions on a fixed context when attention is None.

    Equations in the module docstring; ``placement`` is one of ATTENTION_PLACEMENTS (with attention None, "luong").
    Inputs of forward: tgt_in (B, T) previous tokens (teacher forcing) and an RNNDecoderState. Outputs:
    Seq2SeqOutput(logits (B, T, V), attention (B, T, S) or None) and the state after the last step.
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        rnn: RNN | GRU | LSTM,
        attention: nn.Module | None,
        *,
        memory_size: int,
        vocab_size: int,
        key_projection: nn.Module | None = None,
        dropout: float = 0.0,
        placement: PlacementName = "luong",
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.rnn = rnn
        self.attention = attention
        self.key_projection = key_projection
        self.placement = placement
        self.dropout = nn.Dropout(dropout)
        hidden_size = rnn.hidden_size
        self.bridge = nn.Linear(memory_size, rnn.num_layers * hidden_size)
        self.combine = nn.Linear(hidden_size + memory_size, hidden_size, bias=False)  # W_c
        self.output = nn.Linear(hidden_size, vocab_size)  # W_y, b_y

    def init_state(self, encoded: EncoderOutput, src_keep_mask: Tensor) -> RNNDecoderState:
        """s_0 from the encoder's final state; keys computed once per source; h~_0 = 0 under input feeding."""
        B = encoded.final.shape[0]
        L, H = self.rnn.num_layers, self.rnn.hidden_size
        s_0 = torch.tanh(self.bridge(encoded.final)).view(B, L, H).transpose(0, 1).contiguous()  # (L, B, H)
        hidden = LSTMState(s_0, torch.zeros_like(s_0)) if isinstance(self.rnn, LSTM) else s_0
        keys = encoded.memory if self.key_projection is None else self.key_projection(encoded.memory)
        context = encoded.final if self.attention is None else None
        feed = s_0.new_zeros(B, H) if self.placement == "luong_input_feeding" else None
        return RNNDecoderState(hidden, encoded.memory, keys, src_keep_mask, context, feed)

    def forward(self, tgt_in: Tensor, state: RNNDecoderState) -> tuple[Seq2SeqOutput, RNNDecoderState]:
        embedded = self.dropout(self.embedding(tgt_in))  # (B, T, E)
        if self.placement == "luong":
            h_tilde, weights, state = self._luong(embedded, state)
        else:
            step = self._bahdanau_step if self.placement == "bahdanau" else self._input_feeding_step
            steps = []
            for t in range(tgt_in.shape[1]):
                h_tilde_t, weights_t, state = step(embedded[:, t : t + 1], state)
                steps.append((h_tilde_t, weights_t))
            h_tilde = torch.cat([h for h, _ in steps], dim=1)  # (B, T, H)
            weights = torch.cat([w for _, w in steps], dim=1)  # (B, T, S)
        logits = self.output(self.dropout(h_tilde))  # (B, T, V)
        return Seq2SeqOutput(logits, weights), state

    def _attend(self, query: Tensor, state: RNNDecoderState) -> tuple[Tensor, Tensor]:
        """context (B, T, C*H) and alpha (B, T, S) for queries (B, T, H)."""
        context, weights, _ = self.attention(query, state.keys, state.memory, keep_mask=state.src_keep_mask)
        return context, weights

    def _luong(self, embedded: Tensor, state: RNNDecoderState) -> tuple[Tensor, Tensor | None, RNNDecoderState]:
        """All T steps at once: the recurrence reads no attention. embedded (B, T, E)."""
        fixed = None
        if state.context is not None:
            fixed = state.context.unsqueeze(1).expand(-1, embedded.shape[1], -1)  # (B, T, C*H)
            embedded = torch.cat([embedded, fixed], dim=-1)
        s, hidden = self.rnn(embedded, state=state.hidden)  # (B, T, H)
        context, weights = (fixed, None) if self.attention is None else self._attend(s, state)
        h_tilde = torch.tanh(self.combine(torch.cat([s, context], dim=-1)))  # (B, T, H)
        return h_tilde, weights, state._replace(hidden=hidden)

    def _input_feeding_step(self, e_t: Tensor, state: RNNDecoderState) -> tuple[Tensor, Tensor, RNNDecoderState]:
        """One step, e_t (B, 1, E): s_t from [e(y_{t-1}); h~_{t-1}], then attention with s_t."""
        s, hidden = self.rnn(torch.cat([e_t, state.feed.unsqueeze(1)], dim=-1), state=state.hidden)  # (B, 1, H)
        context, weights = self._attend(s, state)
        h_tilde = torch.tanh(self.combine(torch.cat([s, context], dim=-1)))  # (B, 1, H)
        return h_tilde, weights, state._replace(hidden=hidden, feed=h_tilde.squeeze(1))

    def _bahdanau_step(self, e_t: Tensor, state: RNNDecoderState) -> tuple[Tensor, Tensor, RNNDecoderState]:
        """One step, e_t (B, 1, E): attention with s_{t-1}, then s_t from [e(y_{t-1}); context_t]."""
        top = state.hidden.h if isinstance(state.hidden, LSTMState) else state.hidden  # (L, B, H)
        context, weights = self._attend(top[-1].unsqueeze(1), state)  # (B, 1, C*H), (B, 1, S)
        s, hidden = self.rnn(torch.cat([e_t, context], dim=-1), state=state.hidden)  # (B, 1, H)
        h_tilde = torch.tanh(self.combine(torch.cat([s, context], dim=-1)))  # (B, 1, H)
        return h_tilde, weights, state._replace(hidden=hidden)


class RNNSeq2Seq(PretrainedMixin, nn.Module):
    """RNN encoder-decoder for sequence transduction (e.g. grapheme-to-phoneme), trained with teacher forcing.

    Implements the decoding step interface (``step`` / ``reorder_state``), so ``seqlab.decoding.greedy_search``
    and ``beam_search`` decode it: ``state = model.encode(src, src_lengths)`` then search from ``bos_id``.

    Args:
        config: RNNSeq2SeqConfig.
    Inputs of forward: src (B, S) ids, src_lengths (B,), tgt_in (B, T) = [BOS] + target (teacher forcing).
    Outputs: Seq2SeqOutput(logits (B, T, V), attention (B, T, S) or None).
    """

    config_class: ClassVar[type] = RNNSeq2SeqConfig
    model_type: ClassVar[str] = "rnn_seq2seq"

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        H, E = config.hidden_size, config.embedding_size
        C = 2 if config.bidirectional else 1
        layer = RECURRENT_LAYERS[config.cell]
        self.encoder = RNNEncoder(
            nn.Embedding(config.src_vocab_size, E, padding_idx=config.pad_id),
            layer(
                E,
                H,
                num_layers=config.encoder_layers,
                bidirectional=config.bidirectional,
                dropout=config.dropout,
            ),
            dropout=config.dropout,
        )
        memory_size = C * H
        attention, key_projection = _make_attention(config.attention, query_size=H, memory_size=memory_size)
        fed = {"luong": 0 if attention is not None else memory_size, "luong_input_feeding": H, "bahdanau": memory_size}
        decoder_input = E + fed[config.attention_placement]
        self.decoder = AttentionDecoder(
            nn.Embedding(config.tgt_vocab_size, E, padding_idx=config.pad_id),
            layer(decoder_input, H, num_layers=config.decoder_layers, dropout=config.dropout),
            attention,
            memory_size=memory_size,
            vocab_size=config.tgt_vocab_size,
            key_projection=key_projection,
            dropout=config.dropout,
            placement=config.attention_placement,
        )

    def encode(self, src: Tensor, src_lengths: Tensor) -> RNNDecoderState:
        """Run the encoder; the returned state starts decoding. src (B, S), src_lengths (B,)."""
        S = src.shape[1]
        src_keep_mask = torch.arange(S, device=src.device) < src_lengths.to(src.device).unsqueeze(1)  # (B, S)
        return self.decoder.init_state(self.encoder(src, src_lengths), src_keep_mask)

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Seq2SeqOutput:
        output, _ = self.decoder(tgt_in, self.encode(src, src_lengths))
        return output

    def step(self, tokens: Tensor, state: RNNDecoderState) -> StepOutput:
        """One decoding step: tokens (B,) previous outputs -> StepOutput(logits (B, V), next state)."""
        output, state = self.decoder(tokens.unsqueeze(1), state)
        return StepOutput(output.logits.squeeze(1), state)

    def attention_step(self, tokens: Tensor, state: RNNDecoderState) -> tuple[StepOutput, Tensor]:
        """``step`` with the step's attention weights (B, S) over the source (zero at padded steps), for the
        coverage penalty (``seqlab.decoding.coverage``).

        Raises: ValueError for the fixed-context model (attention "none"), which attends nowhere.
        """
        output, state = self.decoder(tokens.unsqueeze(1), state)
        if output.attention is None:
            raise ValueError("a model with attention 'none' has no attention weights to sum")
        return StepOutput(output.logits.squeeze(1), state), output.attention.squeeze(1)

    def reorder_state(self, state: RNNDecoderState, index: Tensor) -> RNNDecoderState:
        """Rows ``index`` (B',) of the state: hidden is (L, B, H) (batch at -2), everything else batch-first."""
        return state._replace(
            hidden=select_rows(state.hidden, index, dim=-2),
            memory=select_rows(state.memory, index),
            keys=select_rows(state.keys, index),
            src_keep_mask=select_rows(state.src_keep_mask, index),
            context=select_rows(state.context, index),
            feed=select_rows(state.feed, index),
        )


def _make_attention(name: str, *, query_size: int, memory_size: int) -> tuple[nn.Module | None, nn.Module | None]:
    """The score module, and for dot scores a key projection W_k m_j when the memory and decoder sizes differ."""
    if name == "none":
        return None, None
    if name == "additive":
        return AdditiveAttention(query_size, memory_size, query_size), None
    if name == "bilinear":
        return BilinearAttention(query_size, memory_size), None
    key_projection = None if memory_size == query_size else nn.Linear(memory_size, query_size, bias=False)
    return DotProductAttention(scaled=name == "scaled_dot"), key_projection
