"""Post-training dynamic int8 quantization of a trained model's Linear layers, with torchao.

``quantize_model(model)`` quantizes every ``nn.Linear`` whose weight is its own (a Linear tied to an embedding
stays float: the embedding reads the same matrix, so quantizing it would untie them and store both); the method
and the stored format are ``seqlab.models.quantized``'s, and ``save_pretrained`` / ``load_pretrained`` keep a
quantized model quantized. Why torchao: ``torch.ao.quantization`` (``quantize_dynamic``) warns on torch 2.13 that it
is deprecated in favour of torchao, and its packed weights cannot be written to safetensors without unpacking them
by hand.

Speed depends on the CPU's int8 matrix product: torchao runs it with ``torch._int_mm``, which on a CPU without
VNNI (the AMD EPYC here, torch 2.13) takes ~25x the float32 product of the same shape, so int8 models are smaller
there but slower (``benchmarks/quantize.py``).

Recurrent layers stay float. torch's dynamic int8 LSTM (``torch.ao.nn.quantized.dynamic.LSTM``) replaces a
``torch.nn.LSTM`` only, belongs to the deprecated ``torch.ao.quantization``, and runs through the private
``torch.quantized_lstm`` kernel on fbgemm's packed weights; seqlab's LSTM (``seqlab.nn.LSTM``) holds its weights in
its own cells and runs torch's float kernel on them (``seqlab.nn.functional.fused_rnn``), and torchao has no
recurrent layers. Its input projections x W_ih^T are matmuls inside that kernel, not Linear modules.
"""

from __future__ import annotations

from torch import nn

from seqlab.errors import ConfigError
from seqlab.models.quantized import METHODS, quantization_of, quantize_linears

__all__ = ["METHODS", "check_method", "quantizable_linears", "quantize_model"]


def quantizable_linears(model: nn.Module) -> list[str]:
    """The names of the Linear layers of ``model`` that ``quantize_model`` quantizes: exactly ``nn.Linear`` (not a
    subclass or a wrapper), with a float weight that no other parameter name shares (not tied)."""
    owners: dict[int, int] = {}
    for _, parameter in model.named_parameters(remove_duplicate=False):
        owners[id(parameter)] = owners.get(id(parameter), 0) + 1
    return [
        name
        for name, module in model.named_modules()
        if type(module) is nn.Linear and module.weight.is_floating_point() and owners[id(module.weight)] == 1
    ]


def check_method(method: str) -> None:
    """Raise ConfigError (one line listing ``METHODS``) unless ``method`` is one of them."""
    if method not in METHODS:
        raise ConfigError(f"unknown quantization method {method!r}; choose from {', '.join(METHODS)}")


def quantize_model(model: nn.Module, *, method: str = "dynamic-int8") -> list[str]:
    """Quantize ``model``'s Linear layers in place with ``method`` (one of ``METHODS``) and return their names.

    Raises:
        ConfigError: an unknown method; a model that is already quantized, or has no Linear layer to quantize.
        ModuleNotFoundError: torchao is not installed.
    """
    check_method(method)
    done = quantization_of(model)
    if done is not None:
        raise ConfigError(f"the model is already quantized ({done.method}, {len(done.modules)} Linear layers)")
    names = quantizable_linears(model)
    if not names:
        raise ConfigError("the model has no Linear layer to quantize")
    quantize_linears(model, names, method=method)
    return names
