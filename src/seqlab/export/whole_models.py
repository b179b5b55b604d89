"""Whole-model graphs: a model without a decoding loop exported as one ``model`` graph, and how a call maps to it.

- Seq2vec classifier (``seq2vec_classifier``): ``input_ids`` (B, T), or ``features`` (B, T, E) for continuous
  input, and ``lengths`` (B,) -> ``logits`` (B, C), and ``attention`` (B, T) under attention pooling.
- BERT (``bert``, its classification heads ``bert_sequence_classification``, ``bert_mean_pooled_classification``,
  ``bert_token_classification``, and the pre-training heads ``bert_mlm`` and ``bert_pretraining``): ``input_ids``,
  ``keep_mask`` (padding on the right) and ``token_type_ids``, all (B, T) -> ``logits`` (B, C), (B, T, C) or, for
  the MLM head, (B, T, V) at every position; ``mlm_logits`` (B, T, V) and ``nsp_logits`` (B, 2) for pre-training;
  the body gives ``last_hidden_state`` (B, T, D) and, with a pooler, ``pooled`` (B, D). T is at most the model's
  ``max_positions``.
- Sequence tagger (``rnn_sequence_tagger``): ``input_ids`` (B, T), ``lengths`` (B,) -> ``logits`` (B, T, K),
  ``keep_mask`` (B, T).
- Forecaster (``forecaster``): ``window`` (B, T, C), the last T steps -> ``forecast`` (B, H, C), the next H; T is at
  most ``max_length`` for the Transformer encoder. The autoregressive head's H steps are unrolled in the graph.
- Sequence denoiser (``sequence_denoiser``): ``x`` (B, T, C) -> ``denoised`` (B, T, C); T is a multiple of the
  frame size F (the time axis is F times a dynamic frame count).
- A recurrent layer of ``seqlab.nn`` (``RNN``, ``GRU``, ``LSTM``; not a run's model, so it is exported with
  ``export_graph(recurrent_layer_graph(layer), directory)``): ``x`` (B, T, E) (or (T, B, E) unless batch-first),
  ``lengths`` (B,), ``h_0`` (and ``c_0`` for an LSTM), (L*C, B, H) -> ``outputs``, ``h_n`` (and ``c_n``).

Each graph calls the model's own ``forward``, so the exported equations are the modules'; batch and sequence axes are
dynamic (``torch.export.Dim``). ``MODEL_CALLS`` says, per model type, which graph inputs a call of the module gives
(``inputs(*args, **kwargs)``, the module's own signature and defaults) and how the graph's outputs become the
module's output type (``output(values)``): so an ``OnnxModel`` (``seqlab.export.runtime``) is called as the module.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.export.graphs import Graph
from seqlab.models.bert import (
    Bert,
    BertForMaskedLM,
    BertForMeanPooledClassification,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from seqlab.models.bert.heads import MaskedLMOutput, PreTrainingOutput
from seqlab.models.bert.model import BertOutput
from seqlab.models.classifier import ClassifierOutput, Seq2VecClassifier
from seqlab.models.denoiser import SequenceDenoiser
from seqlab.models.forecaster import Forecaster
from seqlab.models.tagger import RNNSequenceTagger, TaggerOutput
from seqlab.nn.cells import LSTMState
from seqlab.nn.recurrent import GRU, LSTM, RNN


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


BertModel = (
    Bert
    | BertForSequenceClassification
    | BertForMeanPooledClassification
    | BertForTokenClassification
    | BertForMaskedLM
    | BertForPreTraining
)


class BertGraph(nn.Module):
    """model(input_ids, keep_mask, token_type_ids, all (B, T)) -> the body's (last_hidden_state (B, T, D),
    pooled (B, D) with a pooler), a classification or MLM head's (logits,), or pre-training's (mlm_logits,
    nsp_logits), by the model's ``forward``."""

    def __init__(self, model: BertModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, keep_mask: Tensor, token_type_ids: Tensor) -> tuple[Tensor, ...]:
        out = self.model(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids)
        if isinstance(self.model, Bert):
            return (out.last_hidden_state,) if out.pooled is None else (out.last_hidden_state, out.pooled)
        if isinstance(self.model, BertForPreTraining):
            return (out.mlm_logits, out.nsp_logits)
        return (out.logits,)


def bert_graphs(model: BertModel) -> list[Graph]:
    """BERT's ``model`` graph (module docstring), traced on 2 sequences of 4 and 3 tokens."""
    config = model.config
    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens", max=config.max_positions)
    if isinstance(model, Bert):
        outputs = ["last_hidden_state", "pooled"] if config.pooler else ["last_hidden_state"]
    elif isinstance(model, BertForPreTraining):
        outputs = ["mlm_logits", "nsp_logits"]
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


class DenoiserGraph(nn.Module):
    """model(x (B, T, C)) -> (denoised (B, T, C),), by ``SequenceDenoiser.forward``."""

    def __init__(self, model: SequenceDenoiser) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> tuple[Tensor]:
        return (self.model(x),)


def denoiser_graphs(model: SequenceDenoiser) -> list[Graph]:
    """The sequence denoiser's ``model`` graph (module docstring), traced on 2 series of 4 frames; the time axis
    is F times a dynamic frame count, so the module's check that T is a multiple of F holds for every T traced."""
    config = model.config
    batch, frames = torch.export.Dim("batch"), torch.export.Dim("frames")
    return [
        Graph(
            "model",
            DenoiserGraph(model),
            (torch.zeros(2, 4 * config.frame_size, config.channels),),
            ["x"],
            ["denoised"],
            ({0: batch, 1: config.frame_size * frames},),
        )
    ]


class RecurrentLayerGraph(nn.Module):
    """layer(x, lengths (B,), state: (h_0,) or, for an LSTM, (h_0, c_0), each (L*C, B, H)) -> (outputs, h_n) or
    (outputs, h_n, c_n), by the layer's ``forward``."""

    def __init__(self, layer: RNN | GRU | LSTM) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor, lengths: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        outputs, final = self.layer(x, lengths, LSTMState(*state) if isinstance(self.layer, LSTM) else state[0])
        return (outputs, *final) if isinstance(final, LSTMState) else (outputs, final)


def recurrent_layer_graph(layer: RNN | GRU | LSTM, *, name: str = "layer") -> Graph:
    """A recurrent layer's graph (module docstring): a float32 copy of ``layer`` in eval mode (``layer`` itself is
    left as it is), traced on 2 sequences of 4 and 3 steps, with dynamic batch and time axes."""
    layer = copy.deepcopy(layer).float().eval()
    batch, steps = torch.export.Dim("batch"), torch.export.Dim("steps")
    B, T, LC = 2, 4, layer.num_layers * layer.num_directions
    x = torch.zeros(B, T, layer.input_size) if layer.batch_first else torch.zeros(T, B, layer.input_size)
    x_axes = {0: batch, 1: steps} if layer.batch_first else {0: steps, 1: batch}
    state = (torch.zeros(LC, B, layer.output_size),)
    names = ["h_0"]
    if isinstance(layer, LSTM):
        state, names = (*state, torch.zeros(LC, B, layer.hidden_size)), ["h_0", "c_0"]
    return Graph(
        name,
        RecurrentLayerGraph(layer),
        (x, torch.tensor([T, T - 1]), state),
        ["x", "lengths", *names],
        ["outputs", *(n.replace("_0", "_n") for n in names)],
        (x_axes, {0: batch}, tuple({1: batch} for _ in state)),
    )


BERT_MODELS = (
    Bert,
    BertForSequenceClassification,
    BertForMeanPooledClassification,
    BertForTokenClassification,
    BertForMaskedLM,
    BertForPreTraining,
)

# The whole-model graphs of each model type that can be exported.
WHOLE_MODEL_GRAPHS: dict[str, Callable[[Any], list[Graph]]] = {
    Seq2VecClassifier.model_type: classifier_graphs,
    RNNSequenceTagger.model_type: tagger_graphs,
    Forecaster.model_type: forecaster_graphs,
    SequenceDenoiser.model_type: denoiser_graphs,
    **{bert.model_type: bert_graphs for bert in BERT_MODELS},
}


class ModelCall(NamedTuple):
    """A module call in terms of its whole-model graph (module docstring).

    Attributes:
        inputs: the module's ``forward`` arguments -> the graph's inputs, in order (defaults filled as the module
            fills them).
        output: the graph's outputs, in order -> what the module's ``forward`` returns.
    """

    inputs: Callable[..., tuple[Tensor, ...]]
    output: Callable[[Sequence[Tensor]], Any]


def _same(*tensors: Tensor) -> tuple[Tensor, ...]:
    return tensors


def _bert_inputs(
    input_ids: Tensor, *, keep_mask: Tensor | None = None, token_type_ids: Tensor | None = None
) -> tuple[Tensor, ...]:
    """BERT's inputs with its defaults made explicit: every token real, every token of segment 0."""
    keep_mask = torch.ones_like(input_ids, dtype=torch.bool) if keep_mask is None else keep_mask
    token_type_ids = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    return input_ids, keep_mask, token_type_ids


def _bert_output(values: Sequence[Tensor]) -> BertOutput:
    return BertOutput(values[0], values[1] if len(values) > 1 else None, None)


# How each model type's module call maps to its graph: the types whose systems predict through an OnnxModel.
MODEL_CALLS: dict[str, ModelCall] = {
    Seq2VecClassifier.model_type: ModelCall(_same, lambda values: ClassifierOutput(*values)),
    RNNSequenceTagger.model_type: ModelCall(_same, lambda values: TaggerOutput(*values)),
    Forecaster.model_type: ModelCall(_same, lambda values: values[0]),
    SequenceDenoiser.model_type: ModelCall(_same, lambda values: values[0]),
    Bert.model_type: ModelCall(_bert_inputs, _bert_output),
    # The MLM head's logits at every position (no ``select``); the body's states are not graph outputs.
    BertForMaskedLM.model_type: ModelCall(_bert_inputs, lambda values: MaskedLMOutput(values[0], None)),
    BertForPreTraining.model_type: ModelCall(_bert_inputs, lambda values: PreTrainingOutput(*values)),
    **{
        head.model_type: ModelCall(_bert_inputs, lambda values: ClassifierOutput(values[0]))
        for head in (BertForSequenceClassification, BertForMeanPooledClassification, BertForTokenClassification)
    },
}
