"""Carrying a trained model to its users: ONNX graphs and step models that run them with onnxruntime; int8
quantization (``seqlab.export.quantize``).

``export_onnx(run, out)`` writes a run's model as the graphs of ``seqlab.export.graphs`` (GPT: prefill + step with
the KV cache as inputs and outputs; RNN seq2seq: encoder + decoder step) with a manifest; ``load_step_model(run)``
reads them back as step models that seqlab's decoding engine drives (``seqlab.export.runtime``). The ``[export]``
extra (onnx, onnxruntime, onnxscript) is needed to use them; importing this package needs none of it.
"""

from seqlab.export.onnx import EXPORT_DIRECTORY, MANIFEST_FILE, export_onnx, read_manifest
from seqlab.export.runtime import OnnxGPT, OnnxGPTState, OnnxRNNSeq2Seq, load_step_model

__all__ = [
    "EXPORT_DIRECTORY",
    "MANIFEST_FILE",
    "OnnxGPT",
    "OnnxGPTState",
    "OnnxRNNSeq2Seq",
    "export_onnx",
    "load_step_model",
    "read_manifest",
]
