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
- Seq2vec classifier (``seq2vec_classifier``): ``model`` (``input_ids`` (B, T), or ``features`` (B, T, E) for
  continuous input, and ``lengths`` (B,) -> ``logits`` (B, C), and ``attention`` (B, T) under attention pooling).
- BERT (``bert`` and its classification heads ``bert_sequence_classification``, ``bert_mean_pooled_classification``,
  ``bert_token_classification``): ``model`` (``input_ids``, ``keep_mask`` (padding on the right) and
  ``token_type_ids``, all (B, T) -> ``logits`` (B, C) or (B, T, C); the body gives ``last_hidden_state`` (B, T, D)
  and, with a pooler, ``pooled`` (B, D)). T is at most the model's ``max_positions``.
- Sequence tagger (``rnn_sequence_tagger``): ``model`` (``input_ids`` (B, T), ``lengths`` (B,) -> ``logits``
  (B, T, K), ``keep_mask`` (B, T)).
- Forecaster (``forecaster``): ``model`` (``window`` (B, T, C), the last T steps -> ``forecast`` (B, H, C), the
  next H); T is at most ``max_length`` for the Transformer encoder. The autoregressive head's H steps are unrolled
  in the graph.

Each graph calls the model's own ``forward`` / ``encode`` / ``step``, so the exported equations are the modules'.
Batch and sequence axes are dynamic (``torch.export.Dim``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.models.bert import (
    Bert,
    BertForMeanPooledClassification,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from seqlab.models.classifier import Seq2VecClassifier
from seqlab.models.forecaster import Forecaster
from seqlab.models.language_model.gpt import GPT, GPTState
from seqlab.models.seq2seq.rnn import RNNDecoderState, RNNSeq2Seq
from seqlab.models.tagger import RNNSequenceTagger
from seqlab.nn.cells import LSTMState
from seqlab.nn.kv_cache import KVCache

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


class ClassifierGraph(nn.Module):
    """model(x (B, T) ids or (B, T, E) features, lengths (B,)) -> (logits (B, C), and the attention pooling's
    weights (B, T) if it has them), by ``Seq2VecClassifier.forward``."""

    def __init__(self, model: Seq2VecClassifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, ...]:
        logits, attention = self.model(x, lengths)
        return (logits,) if attention is None else (logits, attention)


def classifier_graphs(model: Seq2VecClassifier) -> list[Graph]:
    """The seq2vec classifier's ``model`` graph (module docstring), traced on 2 sequences of 4 and 3 steps."""
    config = model.config
    batch, steps = torch.export.Dim("batch"), torch.export.Dim("steps")
    if config.token_input:
        x, name, axes = torch.full((2, 4), 1), "input_ids", {0: batch, 1: steps}
    else:
        x, name, axes = torch.zeros(2, 4, config.input_size), "features", {0: batch, 1: steps}
    outputs = ["logits", "attention"] if config.pooling == "attention" else ["logits"]
    return [
        Graph(
            "model",
            ClassifierGraph(model),
            (x, torch.tensor([4, 3])),
            [name, "lengths"],
            outputs,
            (axes, {0: batch}),
        )
    ]


BertModel = Bert | BertForSequenceClassification | BertForMeanPooledClassification | BertForTokenClassification


class BertGraph(nn.Module):
    """model(input_ids, keep_mask, token_type_ids, all (B, T)) -> the body's (last_hidden_state (B, T, D),
    pooled (B, D) with a pooler) or a head's (logits,), by the model's ``forward``."""

    def __init__(self, model: BertModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, keep_mask: Tensor, token_type_ids: Tensor) -> tuple[Tensor, ...]:
        out = self.model(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids)
        if isinstance(self.model, Bert):
            return (out.last_hidden_state,) if out.pooled is None else (out.last_hidden_state, out.pooled)
        return (out.logits,)


def bert_graphs(model: BertModel) -> list[Graph]:
    """BERT's ``model`` graph (module docstring), traced on 2 sequences of 4 and 3 tokens."""
    config = model.config
    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens", max=config.max_positions)
    if isinstance(model, Bert):
        outputs = ["last_hidden_state", "pooled"] if config.pooler else ["last_hidden_state"]
    else:
        outputs = ["logits"]
    keep_mask = torch.arange(4) < torch.tensor([4, 3])[:, None]
    return [
        Graph(
            "model",
            BertGraph(model),
            (torch.full((2, 4), 1), keep_mask, torch.zeros(2, 4, dtype=torch.long)),
            ["input_ids", "keep_mask", "token_type_ids"],
            outputs,
            tuple({0: batch, 1: tokens} for _ in range(3)),
        )
    ]


class TaggerGraph(nn.Module):
    """model(input_ids (B, T), lengths (B,)) -> (logits (B, T, K), keep_mask (B, T)), by
    ``RNNSequenceTagger.forward``."""

    def __init__(self, model: RNNSequenceTagger) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return tuple(self.model(input_ids, lengths))


def tagger_graphs(model: RNNSequenceTagger) -> list[Graph]:
    """The sequence tagger's ``model`` graph (module docstring), traced on 2 sequences of 4 and 3 steps."""
    batch, steps = torch.export.Dim("batch"), torch.export.Dim("steps")
    return [
        Graph(
            "model",
            TaggerGraph(model),
            (torch.full((2, 4), 1), torch.tensor([4, 3])),
            ["input_ids", "lengths"],
            ["logits", "keep_mask"],
            ({0: batch, 1: steps}, {0: batch}),
        )
    ]


class ForecasterGraph(nn.Module):
    """model(window (B, T, C)) -> (forecast (B, H, C),), by ``Forecaster.forward``."""

    def __init__(self, model: Forecaster) -> None:
        super().__init__()
        self.model = model

    def forward(self, window: Tensor) -> tuple[Tensor]:
        return (self.model(window),)


def forecaster_graphs(model: Forecaster) -> list[Graph]:
    """The forecaster's ``model`` graph (module docstring), traced on 2 windows of 4 steps.

    Raises: ConfigError for the ssm encoder, whose S4D kernel is computed in complex numbers that ONNX lacks.
    """
    config = model.config
    if config.encoder == "ssm":
        raise ConfigError("a forecaster with the ssm encoder cannot be exported yet: ONNX has no complex numbers")
    longest = config.max_length if config.encoder == "transformer" else None
    batch, steps = torch.export.Dim("batch"), torch.export.Dim("steps", max=longest)
    return [
        Graph(
            "model",
            ForecasterGraph(model),
            (torch.zeros(2, 4, config.channels),),
            ["window"],
            ["forecast"],
            ({0: batch, 1: steps},),
        )
    ]


# The graphs of each model type that can be exported.
GRAPH_BUILDERS: dict[str, Callable[[Any], list[Graph]]] = {
    GPT.model_type: gpt_graphs,
    RNNSeq2Seq.model_type: rnn_seq2seq_graphs,
    Seq2VecClassifier.model_type: classifier_graphs,
    RNNSequenceTagger.model_type: tagger_graphs,
    Forecaster.model_type: forecaster_graphs,
    **{
        bert.model_type: bert_graphs
        for bert in (Bert, BertForSequenceClassification, BertForMeanPooledClassification, BertForTokenClassification)
    },
}
