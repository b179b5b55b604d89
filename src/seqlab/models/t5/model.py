"""T5, the text-to-text encoder-decoder (Raffel et al., 2020), equivalent to Hugging Face's
``T5ForConditionalGeneration``, with KV-cached decoding through seqlab's step interface.

    memory = RMSNorm(Encoder(Drop(E[x])))                   bidirectional relative position buckets
    h_t    = RMSNorm(Decoder(Drop(E[y_<=t]), memory))         causal buckets, cross-attention to memory
    p(y_{t+1} | y_<=t, x) = softmax(W h_t),   W h_t = E (D ** -0.5 h_t) when tied (v1.0), W_lm h_t untied (v1.1)

One embedding table E is shared by encoder, decoder and (when tied) the output layer. The decoder starts from
``decoder_start_id`` (T5: the padding symbol). Decoding state: the cross-attention keys and values of every
decoder layer (computed once per source), the source keep-mask and one ``KVCache`` per decoder layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.models.interfaces import Seq2SeqOutput, StepOutput, select_rows
from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.t5.config import T5Config
from seqlab.models.t5.convert_hf import read_t5_config, read_t5_weights, write_t5_folder
from seqlab.models.t5.layers import GatedFeedForward, RelativePositionBias, T5Attention, T5Layer
from seqlab.nn.functional.attention import causal_keep_mask
from seqlab.nn.kv_cache import KVCache
from seqlab.nn.transformer_sublayers import FeedForward, drop


def additive_mask(keep_mask: Tensor) -> Tensor:
    """keep_mask (bool, any shape) -> float 0 where True, -inf where False, to add to attention logits."""
    return torch.zeros(keep_mask.shape, device=keep_mask.device).masked_fill(~keep_mask, float("-inf"))


class T5Stack(nn.Module):
    """The encoder or the decoder of T5: dropout on the embeddings, layers sharing the first layer's relative
    position bias, a final RMS norm and dropout.

    Args: config: T5Config.  decoder: causal self-attention with causal buckets, plus cross-attention.
    Inputs: x (B, T, D) embedded tokens; keep_mask (B, T) bool, True at real tokens (encoder; None = all real);
        memory_kv: per layer, cross-attention keys and values (decoder); memory_keep_mask (B, S) (decoder);
        caches: per layer, the self-attention ``KVCache`` of earlier decoder steps, or None.
    Outputs: (hidden states (B, T, D), the caches with x appended, or None).
    """

    def __init__(self, config: T5Config, *, decoder: bool) -> None:
        super().__init__()
        self.decoder = decoder
        self.relative_bias = RelativePositionBias(
            config.num_heads,
            num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
            bidirectional=not decoder,
        )
        depth = config.num_decoder_layers if decoder else config.num_layers
        self.layers = nn.ModuleList(
            T5Layer(
                config.d_model,
                config.num_heads,
                config.d_kv,
                config.d_ff,
                dropout=config.dropout,
                layer_norm_eps=config.layer_norm_eps,
                feed_forward_proj=config.feed_forward_proj,
                cross_attention=decoder,
            )
            for _ in range(depth)
        )
        self.final_norm = nn.RMSNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        *,
        keep_mask: Tensor | None = None,
        memory_kv: list[tuple[Tensor, Tensor]] | None = None,
        memory_keep_mask: Tensor | None = None,
        caches: list[KVCache] | None = None,
    ) -> tuple[Tensor, list[KVCache] | None]:
        T = x.shape[1]
        offset = caches[0].length if caches is not None else 0
        self_bias = self.relative_bias(T, offset + T, offset=offset)  # (1, N, T, S)
        if self.decoder:
            self_bias = self_bias + additive_mask(causal_keep_mask(T, offset + T, device=x.device))
        if keep_mask is not None:
            self_bias = self_bias + additive_mask(keep_mask)[:, None, None, :]  # (B, N, T, S)
        cross_bias = additive_mask(memory_keep_mask)[:, None, None, :] if memory_keep_mask is not None else None
        x = drop(self.dropout, x)
        new_caches = []
        for i, layer in enumerate(self.layers):
            x, cache = layer(
                x,
                self_bias,
                memory_kv=memory_kv[i] if memory_kv is not None else None,
                cross_bias=cross_bias,
                cache=caches[i] if caches is not None else None,
            )
            new_caches.append(cache)
        return drop(self.dropout, self.final_norm(x)), new_caches if caches is not None else None

    def empty_caches(
        self, batch_size: int, *, dtype: torch.dtype | None = None, device: torch.device | None = None
    ) -> list[KVCache]:
        """One empty self-attention ``KVCache`` per layer (S = 0), batch_size rows."""
        attention = self.layers[0].self_attn
        return [
            KVCache.empty(batch_size, attention.num_heads, attention.d_kv, dtype=dtype, device=device)
            for _ in self.layers
        ]


class T5DecoderState(NamedTuple):
    """What one decoding step needs, every tensor batch-first (so ``select_rows`` reorders beams).

    memory_kv: per decoder layer, the cross-attention keys and values (B, N, S, Dh). src_keep_mask: (B, S), True at
    real source tokens. caches: per decoder layer, the self-attention ``KVCache``; caches[0].length is the number
    of decoder positions consumed so far.
    """

    memory_kv: list[tuple[Tensor, Tensor]]
    src_keep_mask: Tensor
    caches: list[KVCache]


class T5(PretrainedMixin, nn.Module):
    """T5 encoder-decoder (``T5ForConditionalGeneration``); trained with teacher forcing, decoded by
    ``seqlab.decoding`` through ``encode`` / ``step`` / ``reorder_state``.

    Args:
        config: T5Config.
    Inputs of forward: src (B, S) ids, right-padded; src_lengths (B,) real source tokens; tgt_in (B, T) decoder
        inputs, [decoder_start_id] + target (teacher forcing).
    Outputs: Seq2SeqOutput(logits (B, T, V), attention None).
    Raises: RuntimeError (from torch) for ids outside the vocabulary.
    """

    config_class: ClassVar[type] = T5Config
    model_type: ClassVar[str] = "t5"

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)  # E
        self.encoder = T5Stack(config, decoder=False)
        self.decoder = T5Stack(config, decoder=True)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """Mesh TensorFlow's initialisation, as Hugging Face's T5 (initializer_factor 1): normal with std
        (D * Dh) ** -0.5 for W^Q (the folded 1 / sqrt(Dh)), D ** -0.5 for W^K, W^V and the feed-forward inputs,
        (N * Dh) ** -0.5 for W^O, d_ff ** -0.5 for the feed-forward output, 1 for the embeddings."""
        D, N, Dh, d_ff = self.config.d_model, self.config.num_heads, self.config.d_kv, self.config.d_ff
        if isinstance(module, T5Attention):
            nn.init.normal_(module.q_proj.weight, std=(D * Dh) ** -0.5)
            nn.init.normal_(module.k_proj.weight, std=D**-0.5)
            nn.init.normal_(module.v_proj.weight, std=D**-0.5)
            nn.init.normal_(module.out_proj.weight, std=(N * Dh) ** -0.5)
        elif isinstance(module, (FeedForward, GatedFeedForward)):
            inputs = (module.linear1, module.gate) if isinstance(module, GatedFeedForward) else (module.linear1,)
            for linear in inputs:
                nn.init.normal_(linear.weight, std=D**-0.5)
            nn.init.normal_(module.linear2.weight, std=d_ff**-0.5)
        elif isinstance(module, RelativePositionBias):
            nn.init.normal_(module.embedding.weight, std=D**-0.5)
        elif module is self:
            nn.init.normal_(self.shared.weight, std=1.0)
            if self.lm_head is not None:
                nn.init.normal_(self.lm_head.weight, std=1.0)

    def _output(self, h: Tensor) -> Tensor:
        """Decoder states (..., D) -> logits (..., V)."""
        if self.lm_head is None:
            return (h * self.config.d_model**-0.5) @ self.shared.weight.T  # the tied form rescales (Mesh TF)
        return self.lm_head(h)

    def _encode_source(self, src: Tensor, src_lengths: Tensor) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
        S = src.shape[1]
        src_keep_mask = torch.arange(S, device=src.device) < src_lengths.to(src.device).unsqueeze(1)  # (B, S)
        memory, _ = self.encoder(self.shared(src), keep_mask=src_keep_mask)  # (B, S, D)
        memory_kv = [layer.cross_attn.project_key_value(memory) for layer in self.decoder.layers]
        return memory_kv, src_keep_mask

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Seq2SeqOutput:
        memory_kv, src_keep_mask = self._encode_source(src, src_lengths)
        h, _ = self.decoder(self.shared(tgt_in), memory_kv=memory_kv, memory_keep_mask=src_keep_mask)
        return Seq2SeqOutput(self._output(h), None)

    def encode(self, src: Tensor, src_lengths: Tensor) -> T5DecoderState:
        """Run the encoder once: src (B, S), src_lengths (B,) -> the state that starts decoding (empty caches)."""
        memory_kv, src_keep_mask = self._encode_source(src, src_lengths)
        k = memory_kv[0][0]
        caches = self.decoder.empty_caches(src.shape[0], dtype=k.dtype, device=k.device)
        return T5DecoderState(memory_kv, src_keep_mask, caches)

    def prefill(self, tgt_in: Tensor, state: T5DecoderState) -> StepOutput:
        """Decode T given tokens at once after the state's cached positions: tgt_in (B, T) -> StepOutput(logits
        (B, V) of the token after the last, state with every cache T positions longer). ``step`` is T = 1."""
        h, caches = self.decoder(
            self.shared(tgt_in),  # (B, T, D)
            memory_kv=state.memory_kv,
            memory_keep_mask=state.src_keep_mask,
            caches=state.caches,
        )
        return StepOutput(self._output(h[:, -1]), state._replace(caches=caches))

    def step(self, tokens: Tensor, state: T5DecoderState) -> StepOutput:
        """One decoding step: tokens (B,) previous outputs (decoder_start_id first) -> StepOutput(logits (B, V),
        state with every cache one position longer)."""
        return self.prefill(tokens.unsqueeze(1), state)

    def reorder_state(self, state: T5DecoderState, index: Tensor) -> T5DecoderState:
        """Rows ``index`` (B',) of the state, in that order (beam expansion and reordering)."""
        return select_rows(state, index)

    @classmethod
    def from_hf(cls, directory: str | Path) -> T5:
        """A T5 from a Hugging Face ``T5ForConditionalGeneration`` folder (config.json, model.safetensors), in
        float32 and eval mode.

        Raises:
            CheckpointError: (one line) for a missing file, another architecture, an unsupported setting, or a
                missing, unexpected or mis-shaped tensor (named).
        """
        directory = Path(directory)
        model = cls(read_t5_config(directory))
        model.load_state_dict(read_t5_weights(directory, model.state_dict(), model.config))
        return model.eval()

    def save_hf(self, directory: str | Path) -> None:
        """Write a Hugging Face ``T5ForConditionalGeneration`` folder (config.json, model.safetensors) that
        transformers loads with the same logits."""
        write_t5_folder(Path(directory), self.config, self.state_dict())
