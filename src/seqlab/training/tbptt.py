"""Truncated backpropagation through time over a stateful token stream (Williams & Peng, 1990).

BPTT(k2; k1): the model reads the stream continuously, carrying its state from window to window; every k1
steps the loss of the last k1 steps is backpropagated through the last k2 >= k1 steps, and no further. With
k1 = k2 = k this is the usual "detach the state every k steps"; with k1 = k2 = (the whole stream) it is full
BPTT.

Design choices:

- k2 > k1 by re-running, not by keeping graphs. Before each window, the last k2 - k1 steps are run again
  from their stored, detached starting state, then the window; the loss of the window is backpropagated
  through all of it. So only one graph of at most k2 steps is alive at a time and the cut is exact. Since
  the stored state was computed before the caller's last optimizer step and the re-run uses the current
  parameters, the context is recomputed with up-to-date weights (the cost: k2 / k1 forward steps per step).
- Resets at document starts happen inside windows too, without asking the model to know about them: a run
  is split at every step where some row's ``resets`` is True; before each piece, the state rows of the
  documents starting there are zeroed, then ``forward`` runs on the piece. ``forward`` is therefore any
  function ``(inputs (B, t), state) -> (outputs (B, t, ...), state)``, e.g. an embedding, a seqlab.nn
  ``LSTM``/``GRU``/``RNN`` layer (batch_first, unidirectional: its explicit state is passed in and out)
  and an output layer; the fused kernels still run on whole pieces.
- The optimizer step is the caller's: ``run`` is a generator that yields after each backward, so the caller
  clips, steps and zeroes the gradients (or lets them accumulate) in its own loop.

States may be a tensor, None (zeros, as seqlab.nn layers take it) or tuples, NamedTuples such as
``LSTMState(h, c)``, lists and dicts of those. Every state tensor has the batch at dimension -2, shape
(..., B, H): a layer's (L*C, B, H) or a cell's (B, H).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any, NamedTuple

import torch
from torch import Tensor

from seqlab.data.streams import StreamWindow, TokenStream, stream_windows

ForwardFn = Callable[[Tensor, Any], tuple[Tensor, Any]]
LossFn = Callable[[Tensor, StreamWindow], Tensor]


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


class TBPTTUpdate(NamedTuple):
    """What ``TruncatedBPTT.run`` yields after each backward.

    Attributes:
        loss: the window's loss as returned by ``loss_fn``, detached (0-dim).
        state: the state after the window's last step (before any reset at the next step), detached: pass it
            as ``state`` to continue on a following stream.
        window: the ``StreamWindow`` whose loss was backpropagated (inputs, targets, resets, start).
    """

    loss: Tensor
    state: Any
    window: StreamWindow


class TruncatedBPTT:
    """Truncated BPTT(k2; k1) over a ``TokenStream`` (Williams & Peng, 1990; module docstring).

    For each window of k1 steps [s, s + k1), the loss of the window is backpropagated through the window and
    the k2 - k1 steps before it (fewer at the start of the stream), i.e. through k2 steps, and exactly there
    the gradient stops: the state entering step s + k1 - k2 is a detached tensor. The stream's last window
    may be shorter (k < k1 steps); it too reaches back k2 - k1 steps before its start. The state is carried
    forward from window to window (detached after every window) and zeroed for a row at each step where
    the row's ``resets`` is True, so the state entering a document's first token is zero.

    Args:
        k1: steps per window, i.e. between two backward passes (also how often the state is detached).
        k2: steps that gradients flow back; None means k2 = k1.

    Raises:
        ValueError: if k1 < 1 or k2 < k1 or either is not an integer; the message shows them.

    Example::

        tbptt = TruncatedBPTT(35)
        for update in tbptt.run(stream, forward, loss_fn=loss_fn):
            clip_grad_norm(model.parameters(), 0.25)
            optimizer.step()
            optimizer.zero_grad()
        state = update.state
    """

    def __init__(self, k1: int, k2: int | None = None) -> None:
        k2 = k1 if k2 is None else k2
        for name, value in (("k1", k1), ("k2", k2)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} ({value!r}) must be an integer >= 1")
        if k2 < k1:
            raise ValueError(f"k2 ({k2}) must be >= k1 ({k1}): gradients flow back at least over the window")
        self.k1 = int(k1)
        self.k2 = int(k2)

    def __repr__(self) -> str:
        return f"TruncatedBPTT(k1={self.k1}, k2={self.k2})"

    def run(
        self, stream: TokenStream, forward: ForwardFn, *, loss_fn: LossFn, state: Any = None
    ) -> Iterator[TBPTTUpdate]:
        """Process the stream window by window, calling ``loss.backward()`` once per window.

        The caller's code between two yields runs before the next window's forward: that is where it clips,
        takes the optimizer step and zeroes the gradients. Gradients accumulate into ``.grad`` like any
        ``backward()``.

        Args:
            stream: the ``TokenStream`` (B, N); windows are ``stream_windows(stream, k1)``.
            forward: ``(inputs (B, t) long, state) -> (outputs (B, t, ...), state)``; called on pieces of
                t <= k2 steps, and must treat the batch rows independently.
            loss_fn: ``(outputs (B, k, ...), window) -> 0-dim loss`` for the window's k <= k1 steps.
            state: the state entering step 0 (detached here), or None for the model's zero state.
        Yields:
            A ``TBPTTUpdate`` after each window's backward.
        Raises:
            ValueError: (while iterating) if ``forward`` returns outputs not shaped (B, t, ...) for a piece of
                t steps, or ``loss_fn`` returns a non-scalar; as ``stream_windows`` for a bad stream.
        """
        context = self.k2 - self.k1
        start_state = detach_state(state)  # the state entering step `run_start`
        run_start = 0
        for window in stream_windows(stream, self.k1):
            end = window.start + window.inputs.shape[1]
            inputs = stream.tokens[:, run_start:end]  # (B, R): the context steps, then the window
            resets = stream.resets[:, run_start:end]  # (B, R)
            # The next run begins k2 - k1 steps before the next window, i.e. `split` steps into this run.
            split = max(0, end - context) - run_start
            outputs, split_state, final_state = _unroll(forward, inputs, resets, start_state, split=split)
            loss = loss_fn(outputs[:, window.start - run_start :], window)
            if loss.dim() != 0:
                raise ValueError(f"loss_fn must return a scalar loss, got shape {tuple(loss.shape)}")
            loss.backward()
            start_state = detach_state(split_state)
            run_start += split
            yield TBPTTUpdate(loss.detach(), detach_state(final_state), window)


def _unroll(forward: ForwardFn, inputs: Tensor, resets: Tensor, state: Any, *, split: int) -> tuple[Tensor, Any, Any]:
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
