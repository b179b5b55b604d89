"""Carrying a trained model to its users: ONNX graphs and step models that run them with onnxruntime; int8
quantization (``seqlab.export.quantize``).

``export_onnx(run, out)`` writes a run's model as the graphs of ``seqlab.export.graphs`` (GPT: prefill + step with
the KV cache as inputs and outputs; RNN seq2seq: encoder + decoder step; Transformer seq2seq and T5: encoder +
decoder prefill + step; whole models: ``seqlab.export.whole_models``) with a manifest; ``load_step_model(run)``
reads them back as step models that seqlab's decoding engine drives, ``load_onnx_model(run)`` as a model called as
the module (``seqlab.export.runtime``). The ``[export]`` extra (onnx, onnxruntime, onnxscript) is needed to use
them; importing this package needs none of it.
"""

from seqlab.export.onnx import EXPORT_DIRECTORY, MANIFEST_FILE, export_graph, export_onnx, read_manifest
from seqlab.export.runtime import (
    OnnxGPT,
    OnnxGPTState,
    OnnxModel,
    OnnxRNNSeq2Seq,
    OnnxTransformerSeq2Seq,
    OnnxTransformerSeq2SeqState,
    load_onnx_model,
    load_step_model,
)
from seqlab.export.whole_models import recurrent_layer_graph

__all__ = [
    "EXPORT_DIRECTORY",
    "MANIFEST_FILE",
    "OnnxGPT",
    "OnnxGPTState",
    "OnnxModel",
    "OnnxRNNSeq2Seq",
    "OnnxTransformerSeq2Seq",
    "OnnxTransformerSeq2SeqState",
    "export_graph",
    "export_onnx",
    "load_onnx_model",
    "load_step_model",
    "read_manifest",
    "recurrent_layer_graph",
]
