"""A GPT whose decoding step runs compiled: ``torch.compile`` of ``GPT.step`` over fixed-capacity KV caches.

At decoding sizes a step of the eager model costs more in its ~100 small operators (layer norms, GELU, residual
sums, rotary, cache writes, their dispatch and Python) than in its matrix products. A compiled step fuses those
into a few generated kernels, but only pays when one graph serves every step: the eager caches grow by a step
each call (``KVCache``), so their shapes change, while ``StaticKVCache`` buffers keep one capacity C and write
each step into a slot given as a tensor. ``CompiledGPT`` is that pairing as a ``LanguageModelStepModel``: the
prompt is read eagerly (``GPT.prefill``), its caches copied into static buffers (``GPT.static_state``), and every
step is the compiled ``GPT.step`` (Hugging Face transformers' static cache with ``torch.compile``, and gpt-fast,
do the same).

The graph is the model's own step traced through the modules the model holds at the call: a LoRA-wrapped or
torchao-quantized Linear is traced as that module, and the guards torch.compile keeps (module classes, hooks,
training mode, parameter shapes) recompile the step when one of them changes. Parameters are inputs of the graph,
not constants, so a weight changed in place is what the next step reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.errors import ConfigError
from seqlab.models.interfaces import StepOutput
from seqlab.models.language_model.gpt import GPT, GPTState
from seqlab.nn import KVCache
from seqlab.validation import check_int

__all__ = ["CompiledGPT", "CompiledGPTState"]


class CompiledGPTState(NamedTuple):
    """A ``CompiledGPT``'s decoding state: state, the GPT's static state (``GPT.static_state``; batch dimension 0
    everywhere); length: S, the slots written in its caches (the same for every row), kept as an int beside the
    caches' tensor so that a full cache is seen without reading the tensor back."""

    state: GPTState
    length: int


class CompiledGPT:
    """A GPT as a ``LanguageModelStepModel`` whose steps run ``torch.compile(model.step)`` over static caches.

    ``prefill`` runs the model eagerly and copies the prompts' caches into ``StaticKVCache`` buffers of
    ``capacity`` slots (prompt padding included); each ``step`` then has the same shapes, so the first compiles
    the graph and the others reuse it. A new graph is compiled for each new batch size (beam search's B K rows;
    rows that leave a batch once they end), and when a row fills its buffers they double, copied once, and the
    graph is compiled for the new capacity. Past torch.compile's recompile limit (8 graphs of ``GPT.step`` in a
    process, all models together) further shapes run eagerly, with torch's warning: correct, not faster. Compiling takes
    seconds to minutes on a CPU (``warm_up`` does it ahead of time); a step then costs what its kernels cost.

    Args:
        model: the GPT; decoding runs in its current mode (eval, or training without dropout), without gradients.
        capacity: C, the slots the static caches start with; the model's ``config.context_length`` if None.
        compile_backend: torch.compile's ``backend``: "inductor" (generated C++ kernels on the CPU, the fast
            one), or "eager" / "aot_eager" / a backend callable, which trace the same graph without generating
            code (tests); None runs ``model.step`` uncompiled (the static caches alone, to measure them).
    Attributes: context_length: the model's (generation stops rows there).
    Raises: ConfigError if model is not a GPT, capacity is not an integer >= 2, or the model's decoder has no fast
        path to compile (an attention kind other than "full").
    """

    def __init__(
        self, model: GPT, *, capacity: int | None = None, compile_backend: str | Callable | None = "inductor"
    ) -> None:
        if not isinstance(model, GPT):
            raise ConfigError(f"compile applies to GPT language models, not to a {type(model).__name__}")
        capacity = model.config.context_length if capacity is None else capacity
        check_int("capacity", capacity, minimum=2)
        if model.decoder.incremental_step() is None:
            raise ConfigError("compile needs the GPT's fast decoding step, which full attention without dropout has")
        self.model, self.capacity = model, capacity
        self.context_length = model.context_length
        self._step = model.step
        if compile_backend is not None:
            # dynamic=False: one graph per batch size; a graph with a symbolic batch size (what torch.compile makes
            # once a second size is seen) ran beam search's steps about 20 % slower here. No fullgraph=True: past
            # the recompile limit it would fail where torch.compile otherwise runs the step eagerly.
            self._step = torch.compile(model.step, backend=compile_backend, dynamic=False)

    def prefill(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> StepOutput:
        """``GPT.prefill`` of input_ids (B, T) (keep_mask (B, T) or None), its state in static caches of
        capacity slots, or 2 T for a prompt of T >= capacity tokens."""
        logits, state = self.model.prefill(input_ids, keep_mask)
        T = input_ids.shape[1]
        capacity = self.capacity if self.capacity > T else 2 * T
        return StepOutput(logits, CompiledGPTState(self.model.static_state(state, capacity), T))

    def step(self, tokens: Tensor, state: CompiledGPTState) -> StepOutput:
        """The compiled ``GPT.step`` of tokens (B,) over the state's static caches, which double first if full.

        Raises: ValueError with gradients enabled or dropout in effect (a compiled step only decodes), or (learned
            positions) for a row past the model's context, as ``GPT.step``.
        """
        model, (model_state, length) = self.model, state
        if torch.is_grad_enabled() or (model.training and model.drop.p > 0.0):
            raise ValueError("a compiled GPT step decodes only: no gradients and no dropout in effect")
        if model.wpe is not None:
            model.check_reach(length + 1, model_state.next_position + 1)
        if length == model_state.caches[0].capacity:
            model_state = self._grown(model_state, length)
        logits, model_state = self._step(tokens, model_state)
        return StepOutput(logits, CompiledGPTState(model_state, length + 1))

    def reorder_state(self, state: CompiledGPTState, index: Tensor) -> CompiledGPTState:
        """The state of rows ``index`` (B',), in that order (``GPT.reorder_state``)."""
        return CompiledGPTState(self.model.reorder_state(state.state, index), state.length)

    def warm_up(self, batch_size: int = 1) -> None:
        """Compile the step for ``batch_size`` rows now (a prefill of one token and one step), so that the first
        generation at that size does not wait for it."""
        check_int("batch_size", batch_size)
        device = self.model.wte.weight.device
        with torch.inference_mode():
            tokens = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
            _, state = self.prefill(tokens)
            self.step(tokens[:, 0], state)

    def _grown(self, state: GPTState, length: int) -> GPTState:
        """The static state of ``length`` = C written slots in buffers of 2 C."""
        caches = [KVCache(cache.keys[:, :, :length], cache.values[:, :, :length]) for cache in state.caches]
        written = GPTState(caches, state.next_position, state.keep_mask[:, :length], None)
        return self.model.static_state(written, 2 * length)
