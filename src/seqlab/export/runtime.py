"""Models over exported graphs, run by onnxruntime: what ``--backend onnxruntime`` predicts and decodes with.

``OnnxGPT``, ``OnnxRNNSeq2Seq`` and ``OnnxTransformerSeq2Seq`` implement the decoding step interface
(``seqlab.models.interfaces``: ``step(tokens, state) -> StepOutput(logits, state)``, ``reorder_state``; ``prefill``
and ``context_length`` for the language model, ``encode`` for the encoder-decoders), so seqlab's one decoding engine
(greedy, beam search, sampling, ``seqlab.decoding.generate``) drives them unchanged. Their state is a named tuple or
dict of torch tensors (the graphs' state inputs, ``seqlab.export.graphs``), handed to onnxruntime as NumPy views
without a copy. ``OnnxModel`` runs a whole-model graph (``seqlab.export.whole_models``) called as the module it was
exported from.

``load_step_model(run)`` and ``load_onnx_model(run)`` read the export in ``RUN/onnx`` (``seqlab export RUN --format
onnx`` makes it) and refuse one made from other weights than the run's. onnxruntime is an optional dependency (the
``[export]`` extra), imported when a session is made. Sessions use as many threads as torch
(``torch.get_num_threads()``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from seqlab.errors import CheckpointError
from seqlab.export.graphs import RECURRENT_FIELDS
from seqlab.export.onnx import EXPORT_DIRECTORY, read_manifest, require_modules, weights_digest
from seqlab.export.whole_models import MODEL_CALLS
from seqlab.models.interfaces import StepOutput, select_rows


def _session(path: Path) -> Any:
    """An onnxruntime ``InferenceSession`` on the CPU for the graph file ``path``, with torch's thread count."""
    import onnxruntime  # the optional [export] extra: imported only when a session is made

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: not the optimiser's notes on unused initializers
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class _Graph:
    """One exported graph: ``run(**inputs)`` takes torch tensors and returns its outputs by name, as tensors."""

    def __init__(self, path: Path) -> None:
        self.session = _session(path)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        arrays = {name: np.ascontiguousarray(feeds[name].numpy()) for name in self.inputs}
        values = self.session.run(None, arrays)
        return {name: torch.from_numpy(value) for name, value in zip(self.outputs, values, strict=True)}


class OnnxGPTState(NamedTuple):
    """A GPT's decoding state as the graphs take it: next_position (B,) long, keep_mask (B, S) bool, caches: per
    layer keys then values, each (B, N, S, Dh). Batch dimension 0 everywhere (``select_rows`` reorders it)."""

    next_position: Tensor
    keep_mask: Tensor
    caches: tuple[Tensor, ...]


class OnnxGPT:
    """A GPT's ``prefill`` and ``step`` graphs as a ``LanguageModelStepModel``.

    Args:
        directory: the export directory (``prefill.onnx``, ``step.onnx``, ``export.json``).
        manifest: its manifest (``read_manifest``).
    Inputs and outputs: as ``GPT.prefill`` / ``GPT.step`` (logits (B, V) float32), with an ``OnnxGPTState``.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        self.prefill_graph = _Graph(directory / manifest["graphs"]["prefill"]["file"])
        self.step_graph = _Graph(directory / manifest["graphs"]["step"]["file"])
        self.context_length: int | None = manifest["context_length"]

    def prefill(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> StepOutput:
        """Prompts input_ids (B, T), left-padded (keep_mask (B, T), True at real tokens, or None: all real)."""
        keep_mask = torch.ones_like(input_ids, dtype=torch.bool) if keep_mask is None else keep_mask
        return self._output(self.prefill_graph.run({"input_ids": input_ids, "keep_mask": keep_mask}), "present")

    def step(self, tokens: Tensor, state: OnnxGPTState) -> StepOutput:
        """tokens (B,), one per row, over the caches of ``state``."""
        feeds = {"tokens": tokens, "next_position": state.next_position, "keep_mask": state.keep_mask}
        feeds.update(zip(self.step_graph.inputs[3:], state.caches, strict=True))
        return self._output(self.step_graph.run(feeds), "present")

    def reorder_state(self, state: OnnxGPTState, index: Tensor) -> OnnxGPTState:
        """The state of rows ``index`` (B',), in that order."""
        return select_rows(state, index)

    @staticmethod
    def _output(outputs: dict[str, Tensor], prefix: str) -> StepOutput:
        caches = tuple(value for name, value in outputs.items() if name.startswith(prefix))
        state = OnnxGPTState(outputs["next_position_out"], outputs["keep_mask_out"], caches)
        return StepOutput(outputs["logits"], state)


class OnnxRNNSeq2Seq:
    """An RNN encoder-decoder's ``encoder`` and ``step`` graphs as a ``StepModel`` with ``encode``.

    Its arguments, directory and manifest, are as ``OnnxGPT``'s (here ``encoder.onnx`` and ``step.onnx``).

    State: a dict of the graphs' state tensors by name (``seqlab.export.graphs``): ``hidden.*`` (L, B, H), the
    others batch-first.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        self.encoder_graph = _Graph(directory / manifest["graphs"]["encoder"]["file"])
        self.step_graph = _Graph(directory / manifest["graphs"]["step"]["file"])

    def encode(self, src: Tensor, src_lengths: Tensor) -> dict[str, Tensor]:
        """The state before the first step: src (B, S) ids, src_lengths (B,)."""
        return self.encoder_graph.run({"src": src, "src_lengths": src_lengths})

    def step(self, tokens: Tensor, state: dict[str, Tensor]) -> StepOutput:
        """tokens (B,), the previous output of each row (BOS first)."""
        outputs = self.step_graph.run({"tokens": tokens, **state})
        updated = {name: outputs[f"{name}_out"] for name in state if name in RECURRENT_FIELDS}
        return StepOutput(outputs["logits"], {**state, **updated})

    def reorder_state(self, state: dict[str, Tensor], index: Tensor) -> dict[str, Tensor]:
        """Rows ``index`` (B',) of the state: batch at dimension 1 of ``hidden.*``, 0 of the others."""
        return {
            name: select_rows(value, index, dim=1 if name.startswith("hidden.") else 0) for name, value in state.items()
        }


class OnnxTransformerSeq2SeqState(NamedTuple):
    """A Transformer encoder-decoder's decoding state as the graphs take it, batch at dimension 0 everywhere.

    Attributes:
        src_keep_mask: (B, S) bool, True at real source steps.
        memory: per decoder layer the cross-attention key then value, each (B, N, S, Dh).
        caches: per decoder layer the self-attention key then value, each (B, N, T, Dh); empty before the first
            step (which then runs the ``prefill`` graph).
    """

    src_keep_mask: Tensor
    memory: tuple[Tensor, ...]
    caches: tuple[Tensor, ...]


class OnnxTransformerSeq2Seq:
    """A Transformer encoder-decoder's (``TransformerSeq2Seq`` or ``T5``) ``encoder``, ``prefill`` and ``step``
    graphs as a ``StepModel`` with ``encode``. Its arguments, directory and manifest, are as ``OnnxGPT``'s.

    Inputs and outputs: as the model's ``encode`` / ``prefill`` / ``step``, with an
    ``OnnxTransformerSeq2SeqState``.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        graphs = manifest["graphs"]
        self.encoder_graph, self.prefill_graph, self.step_graph = (
            _Graph(directory / graphs[name]["file"]) for name in ("encoder", "prefill", "step")
        )

    def encode(self, src: Tensor, src_lengths: Tensor) -> OnnxTransformerSeq2SeqState:
        """The state before the first step: src (B, S) ids, src_lengths (B,)."""
        outputs = self.encoder_graph.run({"src": src, "src_lengths": src_lengths})
        memory = tuple(outputs[name] for name in self.encoder_graph.outputs[1:])
        return OnnxTransformerSeq2SeqState(outputs["src_keep_mask"], memory, ())

    def prefill(self, tgt_in: Tensor, state: OnnxTransformerSeq2SeqState) -> StepOutput:
        """The first T target tokens tgt_in (B, T) at once, from a state with no caches (``encode``'s)."""
        feeds = {"tgt_in": tgt_in, **self._source(state)}
        return self._output(self.prefill_graph.run(feeds), state)

    def step(self, tokens: Tensor, state: OnnxTransformerSeq2SeqState) -> StepOutput:
        """tokens (B,), the previous output of each row (BOS first, through ``prefill``)."""
        if not state.caches:
            return self.prefill(tokens[:, None], state)
        feeds = {"tokens": tokens, **self._source(state)}
        feeds.update(zip(self.step_graph.inputs[-len(state.caches) :], state.caches, strict=True))
        return self._output(self.step_graph.run(feeds), state)

    def reorder_state(self, state: OnnxTransformerSeq2SeqState, index: Tensor) -> OnnxTransformerSeq2SeqState:
        """The state of rows ``index`` (B',), in that order."""
        return select_rows(state, index)

    def _source(self, state: OnnxTransformerSeq2SeqState) -> dict[str, Tensor]:
        """The source's feeds: ``src_keep_mask`` and the memory under the encoder's output names."""
        names = self.encoder_graph.outputs
        return {names[0]: state.src_keep_mask, **dict(zip(names[1:], state.memory, strict=True))}

    @staticmethod
    def _output(outputs: dict[str, Tensor], state: OnnxTransformerSeq2SeqState) -> StepOutput:
        caches = tuple(value for name, value in outputs.items() if name.startswith("present"))
        return StepOutput(outputs["logits"], state._replace(caches=caches))


class OnnxModel:
    """A whole-model graph (``model.onnx``) called as the module it was exported from: the same arguments and the
    same output type (``seqlab.export.whole_models.MODEL_CALLS``), e.g. ``ClassifierOutput(logits, attention)``
    for ``OnnxModel(...)(x, lengths)``. Its arguments, directory and manifest, are as ``OnnxGPT``'s.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        self.graph = _Graph(directory / manifest["graphs"]["model"]["file"])
        self.call = MODEL_CALLS[manifest["model_type"]]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        feeds = dict(zip(self.graph.inputs, self.call.inputs(*args, **kwargs), strict=True))
        outputs = self.graph.run(feeds)
        return self.call.output([outputs[name] for name in self.graph.outputs])


STEP_MODELS = {
    "gpt": OnnxGPT,
    "rnn_seq2seq": OnnxRNNSeq2Seq,
    "transformer_seq2seq": OnnxTransformerSeq2Seq,
    "t5": OnnxTransformerSeq2Seq,  # the same three graphs (``seqlab.export.graphs``)
}


def load_step_model(run: Path) -> OnnxGPT | OnnxRNNSeq2Seq | OnnxTransformerSeq2Seq:
    """The onnxruntime step model of run directory ``run``, from its export in ``run/onnx``.

    Raises:
        ConfigError: onnxruntime is not installed.
        CheckpointError: no export there, one of another model type, or one made from other weights (the run was
            trained further or replaced since): one line saying how to make it afresh.
    """
    directory, manifest = _current_export(run, STEP_MODELS)
    return STEP_MODELS[manifest["model_type"]](directory, manifest)


def load_onnx_model(run: Path) -> OnnxModel:
    """The whole-model graph of run directory ``run`` under onnxruntime, from its export in ``run/onnx``.

    Raises: as ``load_step_model``.
    """
    directory, manifest = _current_export(run, MODEL_CALLS)
    return OnnxModel(directory, manifest)


def _current_export(run: Path, model_types: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The export directory of ``run`` and its manifest, checked to be of one of ``model_types`` and made from the
    run's weights. Raises: as ``load_step_model``."""
    require_modules("onnxruntime", purpose="--backend onnxruntime")
    directory = run / EXPORT_DIRECTORY
    manifest = read_manifest(directory)
    model_type = manifest.get("model_type")
    if model_type not in model_types:
        runs = ", ".join(model_types)
        raise CheckpointError(f"{directory}: an export of a {model_type} model; --backend onnxruntime runs {runs}")
    if manifest.get("model_sha256") != weights_digest(run):
        raise CheckpointError(
            f"{directory}: exported from other weights than {run / 'model.safetensors'}; "
            f"make it afresh with `seqlab export {run} --format onnx --overwrite`"
        )
    return directory, manifest
