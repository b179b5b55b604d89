"""The graphs a model is exported as: pure functions of named tensors, each a small ``nn.Module`` over the model.

A decoder cannot be exported whole: its loop, its search and its state objects are Python. What is exported is the
step that the decoding engine calls (``seqlab.models.interfaces``), with the state flattened into tensors that go in
and come out of the graph:

- GPT (``gpt``): ``prefill`` (left-padded prompts -> the next token's logits and the KV caches) and ``step`` (one
  token per row over the caches -> logits and the caches one step longer). The caches are graph inputs and outputs,
  ``past.{l}.key`` / ``past.{l}.value`` (B, N, S, Dh) in and ``present.{l}.*`` (B, N, S + 1, Dh) out, as in
  Hugging Face's ONNX exports; ``keep_mask`` (B, S) always travels (all True when every token is real).
- RNN seq2seq (``rnn_seq2seq``): ``encoder`` (source ids and lengths -> the decoder's first state) and ``step``
  (the previous token and the state -> logits and the recurrent part of the state). The state's tensors are named
  after ``RNNDecoderState``'s fields (``hidden.h``, ``hidden.c``, ``memory``, ``keys``, ``src_keep_mask``,
  ``context``, ``feed``); the fields a model does not use (None) are left out.
- Transformer seq2seq (``transformer_seq2seq``): ``encoder`` (source ids and lengths -> ``src_keep_mask`` (B, S)
  and every decoder layer's cross-attention keys and values, ``memory.{l}.key`` / ``memory.{l}.value``
  (B, N, S, Dh), computed once per source), ``prefill`` (``tgt_in`` (B, T), the first T target tokens, over the
  memory -> the next token's logits and the self-attention caches ``present.{l}.*`` (B, N, T, Dh)) and ``step``
  (one token per row over the memory and the caches ``past.{l}.*`` -> logits and ``present.{l}.*``, one step
  longer).
- T5 (``t5``): the same three graphs with the same names, Dh being ``d_kv``; the relative position biases are
  computed inside the graphs from the cached length, as ``T5.step`` computes them.

Whole models (classifiers, BERT, the tagger, the forecaster) are one graph each: ``seqlab.export.whole_models``.
Each graph calls the model's own ``forward`` / ``encode`` / ``step``, so the exported equations are the modules'.
Batch and sequence axes are dynamic (``torch.export.Dim``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.models.language_model.gpt import GPT, GPTState
from seqlab.models.seq2seq.rnn import RNNDecoderState, RNNSeq2Seq
from seqlab.models.seq2seq.transformer import TransformerDecoderState, TransformerSeq2Seq
from seqlab.models.t5 import T5, T5DecoderState
from seqlab.nn.cells import LSTMState
from seqlab.nn.kv_cache import KVCache

# The encoder-decoders with a self-attention KV cache, and their decoding states (same fields: memory_kv,
# src_keep_mask, caches).
EncoderDecoder = TransformerSeq2Seq | T5
EncoderDecoderState = TransformerDecoderState | T5DecoderState

# The state fields of RNNDecoderState that a decoder step changes; the others are the encoder's, fixed per source.
RECURRENT_FIELDS = ("hidden.h", "hidden.c", "feed")


class Graph(NamedTuple):
    """One graph to export: its module, example inputs, tensor names and dynamic axes.

    Attributes:
        name: the graph's name (``prefill``, ``step``, ``encoder``); its file is NAME.onnx.
        module: an ``nn.Module`` whose forward takes ``example`` and returns a tuple of tensors.
        example: the inputs the graph is traced with.
        inputs, outputs: the tensors' names, in order (nested inputs flattened).
        dynamic_shapes: ``torch.export`` dynamic shapes, shaped like ``example``.
    """

    name: str
    module: nn.Module
    example: tuple[Any, ...]
    inputs: list[str]
    outputs: list[str]
    dynamic_shapes: tuple[Any, ...]


class GPTPrefill(nn.Module):
    """prefill(input_ids (B, T), keep_mask (B, T)) -> (logits (B, V) of the token after each row, next_position
    (B,), keep_mask (B, T), then per layer present key and value (B, N, T, Dh)), by ``GPT.forward``."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, keep_mask: Tensor) -> tuple[Tensor, ...]:
        logits, state = self.model(input_ids, keep_mask=keep_mask)
        return (logits[:, -1], *_gpt_state_tensors(state))


class GPTStep(nn.Module):
    """step(tokens (B,), next_position (B,), keep_mask (B, S), past ((B, N, S, Dh) per layer, key then value)) ->
    (logits (B, V), next_position (B,), keep_mask (B, S + 1), present (B, N, S + 1, Dh) per layer), by
    ``GPT.forward`` on one token per row."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, tokens: Tensor, next_position: Tensor, keep_mask: Tensor, past: tuple[Tensor, ...]
    ) -> tuple[Tensor, ...]:
        caches = [KVCache(past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2)]
        logits, state = self.model(tokens[:, None], GPTState(caches, next_position, keep_mask))
        return (logits[:, 0], *_gpt_state_tensors(state))


def _gpt_state_tensors(state: GPTState) -> tuple[Tensor, ...]:
    """next_position, keep_mask, then each layer's keys and values."""
    return (state.next_position, state.keep_mask, *(t for cache in state.caches for t in (cache.keys, cache.values)))


def gpt_graphs(model: GPT) -> list[Graph]:
    """GPT's ``prefill`` and ``step`` graphs (module docstring), traced on a batch of 2 and a few steps."""
    L, N, Dh = model.config.num_layers, model.config.num_heads, model.config.d_model // model.config.num_heads
    batch, steps, past = torch.export.Dim("batch"), torch.export.Dim("steps"), torch.export.Dim("past")
    B, T = 2, 3
    cache_names = [f"{{}}.{layer}.{part}" for layer in range(L) for part in ("key", "value")]
    state_out = ["next_position_out", "keep_mask_out", *(name.format("present") for name in cache_names)]
    prefill = Graph(
        "prefill",
        GPTPrefill(model),
        (torch.zeros(B, T, dtype=torch.long), torch.ones(B, T, dtype=torch.bool)),
        ["input_ids", "keep_mask"],
        ["logits", *state_out],
        ({0: batch, 1: steps}, {0: batch, 1: steps}),
    )
    caches = tuple(torch.zeros(B, N, T, Dh) for _ in range(2 * L))
    step = Graph(
        "step",
        GPTStep(model),
        (torch.zeros(B, dtype=torch.long), torch.full((B,), T), torch.ones(B, T, dtype=torch.bool), caches),
        ["tokens", "next_position", "keep_mask", *(name.format("past") for name in cache_names)],
        ["logits", *state_out],
        ({0: batch}, {0: batch}, {0: batch, 1: past}, tuple({0: batch, 2: past} for _ in caches)),
    )
    return [prefill, step]


def rnn_state_tensors(state: RNNDecoderState) -> dict[str, Tensor]:
    """The tensors of an ``RNNDecoderState`` by name (module docstring), None fields left out."""
    hidden = state.hidden
    named = {"hidden.h": hidden.h, "hidden.c": hidden.c} if isinstance(hidden, LSTMState) else {"hidden.h": hidden}
    for field in ("memory", "keys", "src_keep_mask", "context", "feed"):
        if getattr(state, field) is not None:
            named[field] = getattr(state, field)
    return named


def rnn_state_from(named: dict[str, Tensor]) -> RNNDecoderState:
    """The ``RNNDecoderState`` of ``rnn_state_tensors``' names (the inverse)."""
    hidden = LSTMState(named["hidden.h"], named["hidden.c"]) if "hidden.c" in named else named["hidden.h"]
    fields = ("memory", "keys", "src_keep_mask", "context", "feed")
    return RNNDecoderState(hidden, *(named.get(field) for field in fields))


class RNNEncoderGraph(nn.Module):
    """encoder(src (B, S), src_lengths (B,)) -> the tensors of ``RNNSeq2Seq.encode``'s state, in ``names`` order."""

    def __init__(self, model: RNNSeq2Seq, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, ...]:
        named = rnn_state_tensors(self.model.encode(src, src_lengths))
        return tuple(named[name] for name in self.names)


class RNNStepGraph(nn.Module):
    """step(tokens (B,), the state's tensors in ``names`` order) -> (logits (B, V), the recurrent fields
    (``RECURRENT_FIELDS`` the model has) after the step), by ``RNNSeq2Seq.step``."""

    def __init__(self, model: RNNSeq2Seq, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, tokens: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        logits, new = self.model.step(tokens, rnn_state_from(dict(zip(self.names, state, strict=True))))
        named = rnn_state_tensors(new)
        return (logits, *(named[name] for name in self.names if name in RECURRENT_FIELDS))


def rnn_seq2seq_graphs(model: RNNSeq2Seq) -> list[Graph]:
    """RNN seq2seq's ``encoder`` and ``step`` graphs (module docstring), traced on a batch of 2 sources of 3 and
    4 steps."""
    batch, source = torch.export.Dim("batch"), torch.export.Dim("source")
    src, lengths = torch.full((2, 4), model.config.bos_id), torch.tensor([4, 3])
    with torch.no_grad():
        named = rnn_state_tensors(model.encode(src, lengths))
    names = list(named)
    # Recurrent tensors have the batch at dimension 1 ((L, B, H)); the rest are batch-first, with the source's
    # steps at dimension 1 for memory, keys and the mask.
    axes: dict[str, dict[int, Any]] = {
        name: {1: batch} if name.startswith("hidden.") else {0: batch, 1: source}
        if name in ("memory", "keys", "src_keep_mask") else {0: batch}
        for name in names
    }  # fmt: skip
    encoder = Graph(
        "encoder",
        RNNEncoderGraph(model, names),
        (src, lengths),
        ["src", "src_lengths"],
        names,
        ({0: batch, 1: source}, {0: batch}),
    )
    recurrent = [name for name in names if name in RECURRENT_FIELDS]
    step = Graph(
        "step",
        RNNStepGraph(model, names),
        (torch.full((2,), model.config.bos_id), tuple(named.values())),
        ["tokens", *names],
        ["logits", *(f"{name}_out" for name in recurrent)],
        ({0: batch}, tuple(axes[name] for name in names)),
    )
    return [encoder, step]


def _pairs(flat: tuple[Tensor, ...]) -> list[tuple[Tensor, Tensor]]:
    """Per layer (key, value) of tensors flattened as layer 0's key, layer 0's value, layer 1's key, ..."""
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def _flat(pairs: list[tuple[Tensor, Tensor]] | list[KVCache]) -> tuple[Tensor, ...]:
    """The inverse of ``_pairs`` (a cache's buffer, if any, left out)."""
    return tuple(t for pair in pairs for t in pair[:2])


class TransformerEncoderGraph(nn.Module):
    """encoder(src (B, S), src_lengths (B,)) -> (src_keep_mask (B, S), then per decoder layer the cross-attention
    key and value (B, N, S, Dh)), by the model's ``encode`` (``TransformerSeq2Seq`` or ``T5``)."""

    def __init__(self, model: EncoderDecoder) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, ...]:
        state = self.model.encode(src, src_lengths)
        return (state.src_keep_mask, *_flat(state.memory_kv))


class TransformerPrefillGraph(nn.Module):
    """prefill(tgt_in (B, T), src_keep_mask (B, S), memory (per layer key then value, (B, N, S, Dh))) ->
    (logits (B, V) of the token after tgt_in, then per layer the self-attention key and value (B, N, T, Dh)), by
    the model's ``prefill`` from empty caches; ``state_class`` is the type of its ``encode``'s state."""

    def __init__(self, model: EncoderDecoder, state_class: type[EncoderDecoderState]) -> None:
        super().__init__()
        self.model, self.state_class = model, state_class

    def forward(self, tgt_in: Tensor, src_keep_mask: Tensor, memory: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        caches = self.model.decoder.empty_caches(tgt_in.shape[0], dtype=memory[0].dtype, device=memory[0].device)
        out = self.model.prefill(tgt_in, self.state_class(_pairs(memory), src_keep_mask, caches))
        return (out.logits, *_flat(out.state.caches))


class TransformerStepGraph(nn.Module):
    """step(tokens (B,), src_keep_mask (B, S), memory as ``prefill``'s, past (per layer key then value,
    (B, N, T, Dh))) -> (logits (B, V), present (B, N, T + 1, Dh) per layer), by the model's ``step``."""

    def __init__(self, model: EncoderDecoder, state_class: type[EncoderDecoderState]) -> None:
        super().__init__()
        self.model, self.state_class = model, state_class

    def forward(
        self, tokens: Tensor, src_keep_mask: Tensor, memory: tuple[Tensor, ...], past: tuple[Tensor, ...]
    ) -> tuple[Tensor, ...]:
        caches = [KVCache(k, v) for k, v in _pairs(past)]
        out = self.model.step(tokens, self.state_class(_pairs(memory), src_keep_mask, caches))
        return (out.logits, *_flat(out.state.caches))


def transformer_seq2seq_graphs(model: TransformerSeq2Seq) -> list[Graph]:
    """The Transformer seq2seq's ``encoder``, ``prefill`` and ``step`` graphs (module docstring), traced on a batch
    of 2 sources of 4 and 3 steps and 3 target steps; sources and targets at most ``max_length`` long."""
    config = model.config
    return _encoder_decoder_graphs(
        model,
        TransformerDecoderState,
        shape=(config.decoder_layers, config.num_heads, config.d_model // config.num_heads),
        token=config.bos_id,
        max_length=config.max_length,
    )


def t5_graphs(model: T5) -> list[Graph]:
    """T5's ``encoder``, ``prefill`` and ``step`` graphs, named and shaped as the Transformer seq2seq's (module
    docstring; Dh is ``d_kv``), traced as those; the relative position biases are computed inside the graphs from
    the cached length, so sources and targets have no length limit."""
    config = model.config
    return _encoder_decoder_graphs(
        model,
        T5DecoderState,
        shape=(config.num_decoder_layers, config.num_heads, config.d_kv),
        token=config.eos_id,
        max_length=None,
    )


def _encoder_decoder_graphs(
    model: EncoderDecoder,
    state_class: type[EncoderDecoderState],
    *,
    shape: tuple[int, int, int],
    token: int,
    max_length: int | None,
) -> list[Graph]:
    """The ``encoder``, ``prefill`` and ``step`` graphs of an encoder-decoder whose decoder has ``shape`` (L, N, Dh),
    traced on sources and targets of ``token``; ``max_length`` bounds sources and targets (None: no bound)."""
    L, N, Dh = shape
    batch, source = torch.export.Dim("batch"), torch.export.Dim("source", max=max_length)
    steps = torch.export.Dim("steps", max=max_length)
    past = torch.export.Dim("past", max=None if max_length is None else max_length - 1)
    B, S, T = 2, 4, 3
    src, lengths = torch.full((B, S), token), torch.tensor([S, S - 1])
    with torch.no_grad():
        encoded = TransformerEncoderGraph(model)(src, lengths)
    names = [f"{{}}.{layer}.{part}" for layer in range(L) for part in ("key", "value")]
    memory_names = [name.format("memory") for name in names]
    present = [name.format("present") for name in names]
    mask_axes, memory_axes = {0: batch, 1: source}, tuple({0: batch, 2: source} for _ in memory_names)
    encoder = Graph(
        "encoder",
        TransformerEncoderGraph(model),
        (src, lengths),
        ["src", "src_lengths"],
        ["src_keep_mask", *memory_names],
        ({0: batch, 1: source}, {0: batch}),
    )
    prefill = Graph(
        "prefill",
        TransformerPrefillGraph(model, state_class),
        (torch.full((B, T), token), encoded[0], encoded[1:]),
        ["tgt_in", "src_keep_mask", *memory_names],
        ["logits", *present],
        ({0: batch, 1: steps}, mask_axes, memory_axes),
    )
    caches = tuple(torch.zeros(B, N, T, Dh) for _ in names)
    step = Graph(
        "step",
        TransformerStepGraph(model, state_class),
        (torch.full((B,), token), encoded[0], encoded[1:], caches),
        ["tokens", "src_keep_mask", *memory_names, *(name.format("past") for name in names)],
        ["logits", *present],
        ({0: batch}, mask_axes, memory_axes, tuple({0: batch, 2: past} for _ in caches)),
    )
    return [encoder, prefill, step]


# The decoding graphs of each model type that can be exported (whole models: ``whole_models.WHOLE_MODEL_GRAPHS``).
STEP_GRAPHS: dict[str, Callable[[Any], list[Graph]]] = {
    GPT.model_type: gpt_graphs,
    RNNSeq2Seq.model_type: rnn_seq2seq_graphs,
    TransformerSeq2Seq.model_type: transformer_seq2seq_graphs,
    T5.model_type: t5_graphs,
}
