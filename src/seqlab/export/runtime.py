"""Step models over exported graphs, run by onnxruntime: what ``--backend onnxruntime`` decodes with.

``OnnxGPT`` and ``OnnxRNNSeq2Seq`` implement the decoding step interface (``seqlab.models.interfaces``:
``step(tokens, state) -> StepOutput(logits, state)``, ``reorder_state``; ``prefill`` and ``context_length`` for the
language model, ``encode`` for the encoder-decoder), so seqlab's one decoding engine (greedy, beam search,
sampling, ``seqlab.decoding.generate``) drives them unchanged. Their state is a named tuple of torch tensors (the
graphs' state inputs, ``seqlab.export.graphs``), handed to onnxruntime as NumPy views without a copy.

``load_step_model(run)`` reads the export in ``RUN/onnx`` (``seqlab export RUN --format onnx`` makes it) and refuses
one made from other weights than the run's. onnxruntime is an optional dependency (the ``[export]`` extra),
imported when a session is made. Sessions use as many threads as torch (``torch.get_num_threads()``).
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


STEP_MODELS = {"gpt": OnnxGPT, "rnn_seq2seq": OnnxRNNSeq2Seq}


def load_step_model(run: Path) -> OnnxGPT | OnnxRNNSeq2Seq:
    """The onnxruntime step model of run directory ``run``, from its export in ``run/onnx``.

    Raises:
        ConfigError: onnxruntime is not installed.
        CheckpointError: no export there, one of another model type, or one made from other weights (the run was
            trained further or replaced since): one line saying how to make it afresh.
    """
    require_modules("onnxruntime", purpose="--backend onnxruntime")
    directory = run / EXPORT_DIRECTORY
    manifest = read_manifest(directory)
    model_type = manifest.get("model_type")
    if model_type not in STEP_MODELS:
        runs = ", ".join(STEP_MODELS)
        raise CheckpointError(f"{directory}: an export of a {model_type} model; --backend onnxruntime runs {runs}")
    if manifest.get("model_sha256") != weights_digest(run):
        raise CheckpointError(
            f"{directory}: exported from other weights than {run / 'model.safetensors'}; "
            f"make it afresh with `seqlab export {run} --format onnx --overwrite`"
        )
    return STEP_MODELS[model_type](directory, manifest)
