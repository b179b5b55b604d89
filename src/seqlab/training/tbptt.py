"""Truncated backpropagation through time over a stateful token stream (Williams & Peng, 1990).

BPTT(k2; k1): the model reads the stream continuously, carrying its state from window to window; every k1
steps the loss of the last k1 steps is backpropagated through the last k2 >= k1 steps, and no further. With
k1 = k2 = k this is the usual "detach the state every k steps"; with k1 = k2 = (the whole stream) it is full
BPTT.

Design choices:

- k2 > k1 by re-running, not by keeping graphs. Before each window, the last k2 - k1 steps are run again
  from their stored, detached starting state, then the window; the loss of the window is backpropagated
  through all of it. So only one graph of at most k2 steps is alive at a time and the cut is exact. Since
  the stored state was computed before the latest optimizer step and the re-run uses the current
  parameters, the context is recomputed with up-to-date weights (the cost: k2 / k1 forward steps per step).
- Resets at document starts happen inside windows too, without asking the model to know about them: a run
  is split at every step where some row's ``resets`` is True; before each piece, the state rows of the
  documents starting there are zeroed, then ``forward`` runs on the piece. ``forward`` is therefore any
  function ``(model, inputs (B, t), state) -> (outputs (B, t, ...), state)``, e.g. an embedding, a
  seqlab.nn ``LSTM``/``GRU``/``RNN`` layer (batch_first, unidirectional: its explicit state is passed in
  and out) and an output layer; the fused kernels still run on whole pieces.
- It is a strategy of the one training loop (``seqlab.training.strategies``): each batch is one window, and
  the trainer backpropagates, clips, accumulates, steps and logs as for any other batch; the strategy only
  carries the state and the context steps from one batch to the next.

States may be a tensor, None (zeros, as seqlab.nn layers take it) or tuples, NamedTuples such as
``LSTMState(h, c)``, lists and dicts of those. Every state tensor has the batch at dimension -2, shape
(..., B, H): a layer's (L*C, B, H) or a cell's (B, H).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from itertools import pairwise
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.data.streams import StreamWindow
from seqlab.training.objectives import LossOutput

ForwardFn = Callable[[nn.Module, Tensor, Any], tuple[Tensor, Any]]
WindowLossFn = Callable[[Tensor, StreamWindow], LossOutput]
PieceFn = Callable[[Tensor, Any], tuple[Tensor, Any]]


def _map_state(fn: Callable[[Tensor], Tensor], state: Any) -> Any:
    if state is None:
        return None
    if isinstance(state, Tensor):
        return fn(state)
    if isinstance(state, tuple) and hasattr(state, "_fields"):  # a NamedTuple keeps its type and field names
        return type(state)(*(_map_state(fn, part) for part in state))
    if isinstance(state, (tuple, list)):
        return type(state)(_map_state(fn, part) for part in state)
    if isinstance(state, dict):
        return {key: _map_state(fn, part) for key, part in state.items()}
    raise TypeError(
        f"a recurrent state must be a Tensor, None, or a tuple, list or dict of them, got {type(state).__name__}"
    )


def detach_state(state: Any) -> Any:
    """The state with every tensor detached from the graph (same nesting; see the module docstring).

    Raises:
        TypeError: a part of the state is not a Tensor, None, tuple, list or dict.
    """
    return _map_state(Tensor.detach, state)


def reset_state(state: Any, resets: Tensor) -> Any:
    """The state with the rows of the batch where ``resets`` is True set to zero; other rows keep their graph.

    Args:
        state: nested as in the module docstring; every tensor (..., B, H). None (zeros) stays None.
        resets: (B,) bool, True for the rows whose document starts at this step.
    Returns:
        A new state of the same nesting; the input is not modified.
    Raises:
        ValueError: a state tensor is not (..., B, H) for B = len(resets); the message shows both.
        TypeError: as ``detach_state``.
    """
    B = resets.shape[0]

    def zero_rows(tensor: Tensor) -> Tensor:
        if tensor.dim() < 2 or tensor.shape[-2] != B:
            raise ValueError(
                f"state tensors must have shape (..., B, H) with B = {B} (the batch at dim -2), "
                f"got {tuple(tensor.shape)}"
            )
        return tensor.masked_fill(resets.to(tensor.device).view(B, 1), 0.0)  # (B, 1) broadcasts over (..., B, H)

    return _map_state(zero_rows, state)


class TruncatedBPTT:
    """Truncated BPTT(k2; k1) as a training strategy (Williams & Peng, 1990; module docstring).

    The batches are consecutive windows of a ``TokenStream`` (``StreamWindow``, e.g. from
    ``stream_windows(stream, k1)``), each of at most k1 steps. For the window [s, s + k), its loss is
    backpropagated through the window and the k2 - k1 steps before it (fewer at the start of the stream), and
    exactly there the gradient stops: the state entering step s + k - (k2 - k1) is a detached tensor. The
    state is carried from window to window (detached after every window) and zeroed for a row at each step
    where the row's ``resets`` is True, so the state entering a document's first token is zero. A window with
    ``start == 0`` begins a new stream (each epoch): the carried state and context are dropped and the model's
    zero state is used.

    Args:
        k1: most steps per window, i.e. between two backward passes (also how often the state is detached).
        k2: steps that gradients flow back; None means k2 = k1.
        forward: ``(model, inputs (B, t) long, state) -> (outputs (B, t, ...), state)``; called on pieces of
            t <= k2 steps, and must treat the batch rows independently.

    The trainer's ``loss_fn`` is then ``(outputs (B, k, ...), window) -> LossOutput`` for the window's k steps.

    Attributes:
        state: the detached state after the latest window (before any reset at the next step), or None.

    Raises:
        ValueError: if k1 < 1 or k2 < k1 or either is not an integer (the message shows them); from ``loss``:
            if a window has more than k1 steps or does not start where the previous one ended, or ``forward``
            returns outputs not shaped (B, t, ...) for a piece of t steps.

    Example::

        strategy = TruncatedBPTT(35, forward=lambda model, ids, state: model(ids, state=state))
        Trainer(model, config, strategy=strategy, loss_fn=window_loss,
                train_batches=lambda epoch, g, batch_size: stream_windows(batchify_stream(docs, batch_size), 35),
                validate=validate).fit()
    """

    def __init__(self, k1: int, k2: int | None = None, *, forward: ForwardFn) -> None:
        k2 = k1 if k2 is None else k2
        for name, value in (("k1", k1), ("k2", k2)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} ({value!r}) must be an integer >= 1")
        if k2 < k1:
            raise ValueError(f"k2 ({k2}) must be >= k1 ({k1}): gradients flow back at least over the window")
        self.k1 = int(k1)
        self.k2 = int(k2)
        self.forward = forward
        self.state: Any = None
        self._context: _Context | None = None

    def __repr__(self) -> str:
        return f"TruncatedBPTT(k1={self.k1}, k2={self.k2})"

    def loss(self, model: nn.Module, batch: StreamWindow, loss_fn: WindowLossFn) -> LossOutput:
        """Run the context steps and the window from the stored state; return ``loss_fn(outputs, window)``.

        The trainer backpropagates the returned loss; here only the state and context for the next window are
        kept, detached.
        """
        window = batch
        steps = window.inputs.shape[1]
        if steps > self.k1:
            raise ValueError(f"a window of {steps} steps is longer than k1 ({self.k1}); use stream_windows(stream, k1)")
        context = self._context if window.start > 0 else None
        if window.start > 0 and (context is None or context.next_start != window.start):
            expected = 0 if context is None else context.next_start
            raise ValueError(f"windows must follow each other: expected start {expected}, got {window.start}")
        if context is None:
            inputs, resets, start_state = window.inputs, window.resets, None
        else:
            inputs = torch.cat([context.inputs, window.inputs], dim=1)  # (B, R): the context steps, then the window
            resets = torch.cat([context.resets, window.resets], dim=1)  # (B, R)
            start_state = context.state
        R = inputs.shape[1]
        # The next run begins k2 - k1 steps before the next window, i.e. `split` steps into this run.
        split = max(0, R - (self.k2 - self.k1))
        outputs, split_state, final_state = _unroll(
            lambda x, s: self.forward(model, x, s), inputs, resets, start_state, split=split
        )
        result = loss_fn(outputs[:, R - steps :], window)
        self._context = _Context(inputs[:, split:], resets[:, split:], detach_state(split_state), window.start + steps)
        self.state = detach_state(final_state)
        return result

    def state_dict(self) -> dict[str, Any]:
        """The carried state and context, for training checkpoints: a run resumed from it continues exactly."""
        context = None if self._context is None else self._context._asdict()
        return {"state": self.state, "context": context}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()``'s value."""
        self.state = state["state"]
        self._context = None if state["context"] is None else _Context(**state["context"])


class _Context(NamedTuple):
    """The last k2 - k1 steps before the next window, and the detached state entering them."""

    inputs: Tensor  # (B, c) long
    resets: Tensor  # (B, c) bool
    state: Any
    next_start: int  # the step where the next window must start


def _unroll(forward: PieceFn, inputs: Tensor, resets: Tensor, state: Any, *, split: int) -> tuple[Tensor, Any, Any]:
    """Run ``forward`` over inputs (B, R) in pieces cut at ``split`` and at every step with a reset.

    Returns the outputs (B, R, ...), the state entering step ``split`` (before its resets) and the final
    state.
    """
    B, R = inputs.shape
    reset_steps = set(resets.any(dim=0).nonzero().flatten().tolist())
    bounds = sorted({0, split, R} | reset_steps)
    pieces = []
    split_state = state
    for a, b in pairwise(bounds):
        if a == split:
            split_state = state
        if a in reset_steps:
            state = reset_state(state, resets[:, a])
        outputs, state = forward(inputs[:, a:b], state)
        if outputs.dim() < 2 or tuple(outputs.shape[:2]) != (B, b - a):
            raise ValueError(
                f"forward must return outputs of shape (B, t, ...) = ({B}, {b - a}, ...) for inputs of shape "
                f"{(B, b - a)}, got {tuple(outputs.shape)}"
            )
        pieces.append(outputs)
    if split == R:
        split_state = state
    return torch.cat(pieces, dim=1), split_state, state
