import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.streams import TokenStream, batchify_stream
from seqlab.nn.cells import LSTMState
from seqlab.nn.recurrent import GRU, LSTM
from seqlab.training.tbptt import TBPTTUpdate, TruncatedBPTT, detach_state, reset_state

E, H = 3, 4
DT = torch.float64


class TinyLM:
    """Token ids are positions: ``inputs[id]`` is the input vector of the token with that id, so the gradient of
    ``inputs`` row by row is the gradient with respect to each step's input. The vocabulary is the ids."""

    def __init__(self, num_ids, *, kind="lstm", seed=0):
        torch.manual_seed(seed)
        self.inputs = torch.randn(num_ids, E, dtype=DT, requires_grad=True)
        layer = LSTM if kind == "lstm" else GRU
        self.rnn = layer(E, H, dtype=DT)
        self.readout = nn.Linear(H, num_ids, dtype=DT)
        self.params = [self.inputs, *self.rnn.parameters(), *self.readout.parameters()]

    def forward(self, ids, state):
        result = self.rnn(self.inputs[ids], state=state)  # (B, t, E) -> (B, t, H)
        return self.readout(result.outputs), result.state  # (B, t, V)

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def grads(self):
        return [p.grad.clone() for p in self.params]


def loss_of(outputs, targets):
    return F.cross_entropy(outputs.flatten(0, 1), targets.flatten(), reduction="sum")


def window_loss(outputs, window):
    return loss_of(outputs, window.targets)


def keep_rows(state, resets):
    """Zero the rows of a (1, B, H) state by multiplication: an implementation independent of reset_state."""
    if state is None:
        return None
    keep = (~resets).to(DT).view(1, -1, 1)
    if isinstance(state, LSTMState):
        return LSTMState(state.h * keep, state.c * keep)
    return state * keep


def step_by_step(model, ids, resets, state):
    """The reference: one forward call per step, resetting rows before the steps where documents start."""
    outputs = []
    for t in range(ids.shape[1]):
        state = keep_rows(state, resets[:, t])
        out, state = model.forward(ids[:, t : t + 1], state)
        outputs.append(out)
    return torch.cat(outputs, dim=1), state


def hand_window(model, stream, start, end, *, depth, state0=None):
    """Loss, parameter gradients and final state of BPTT through `depth` steps for the window [start, end)."""
    first = max(0, end - depth)
    state = state0
    if first > 0:
        with torch.no_grad():
            _, state = step_by_step(model, stream.tokens[:, :first], stream.resets[:, :first], state0)
    outputs, final = step_by_step(model, stream.tokens[:, first:end], stream.resets[:, first:end], state)
    loss = loss_of(outputs[:, start - first :], stream.tokens[:, start + 1 : end + 1])
    return loss.detach(), list(torch.autograd.grad(loss, model.params)), detach_state(final)


def positions_of(stream, columns):
    """The ids (= rows of TinyLM.inputs) of the stream's tokens in the given columns, all batch rows."""
    return stream.tokens[:, columns].flatten()


def one_document_stream(B=2, N=10):
    return batchify_stream([list(range(B * N))], B)


def documents_stream():
    # Row 0 holds documents [0..4] and [5..11] (a reset at column 5); row 1 holds [12..23] (only column 0).
    return batchify_stream([list(range(0, 5)), list(range(5, 12)), list(range(12, 24))], 2)


def random_state(kind, B=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(1, B, H, dtype=DT, generator=g)
    return LSTMState(h, torch.randn(1, B, H, dtype=DT, generator=g)) if kind == "lstm" else h


def assert_grads_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


# ---------------------------------------------------------------- exactness of the truncation


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("extra", [0, 3])
def test_one_window_over_the_whole_stream_equals_full_bptt(kind, extra):
    stream = documents_stream()
    T = stream.tokens.shape[1] - 1
    model = TinyLM(24, kind=kind)
    state0 = random_state(kind)
    updates = list(TruncatedBPTT(T, T + extra).run(stream, model.forward, loss_fn=window_loss, state=state0))
    assert len(updates) == 1
    outputs, final = step_by_step(model, stream.tokens[:, :-1], stream.resets[:, :-1], state0)
    full_loss = loss_of(outputs, stream.tokens[:, 1:])
    full_grads = torch.autograd.grad(full_loss, model.params)
    torch.testing.assert_close(updates[0].loss, full_loss.detach())
    assert_grads_close(model.grads(), full_grads)
    torch.testing.assert_close(updates[0].state, detach_state(final))


@pytest.mark.parametrize(("k1", "k2"), [(3, 3), (2, 5), (3, 4), (2, 11)])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_every_update_equals_bptt_through_k2_steps_by_hand(k1, k2, kind):
    stream = documents_stream()  # with a document boundary, so resets inside context and windows count
    model = TinyLM(24, kind=kind)
    state0 = random_state(kind)
    updates = 0
    for update in TruncatedBPTT(k1, k2).run(stream, model.forward, loss_fn=window_loss, state=state0):
        start, end = update.window.start, update.window.start + update.window.inputs.shape[1]
        loss, grads, final = hand_window(model, stream, start, end, depth=k2 - k1 + (end - start), state0=state0)
        torch.testing.assert_close(update.loss, loss)
        assert_grads_close(model.grads(), grads)
        torch.testing.assert_close(update.state, final)
        state = update.state.h if kind == "lstm" else update.state
        assert not state.requires_grad
        model.zero_grad()
        updates += 1
    assert updates == -(-11 // k1)


@pytest.mark.parametrize(("k1", "k2"), [(3, 3), (2, 5)])
def test_gradient_reaches_exactly_k2_steps_back_and_not_one_more(k1, k2):
    stream = one_document_stream(N=14)  # no resets after column 0: only the truncation can cut gradients
    model = TinyLM(28)
    checked = 0
    for update in TruncatedBPTT(k1, k2).run(stream, model.forward, loss_fn=window_loss):
        end = update.window.start + k1
        if update.window.start >= k2 and update.window.inputs.shape[1] == k1:
            grad = model.inputs.grad
            first = end - k2  # the earliest step the window's loss may reach
            assert torch.equal(grad[positions_of(stream, slice(0, first))], torch.zeros(2 * first, E, dtype=DT))
            assert bool((grad[positions_of(stream, first)] != 0).all(dim=-1).all())
            assert bool((grad[positions_of(stream, slice(first, end))].abs().sum(-1) > 0).all())
            checked += 1
        model.zero_grad()
    assert checked >= 2


def test_gradients_accumulated_over_windows_are_the_sum_of_the_windows_gradients():
    stream = documents_stream()
    model = TinyLM(24)
    k1 = 3
    updates = list(TruncatedBPTT(k1).run(stream, model.forward, loss_fn=window_loss))  # no zero_grad in between
    accumulated = model.grads()
    bounds = [(start, min(start + k1, 11)) for start in range(0, 11, k1)]  # the last window has 2 steps
    per_window = [hand_window(model, stream, start, end, depth=end - start)[1] for start, end in bounds]
    assert len(updates) == len(per_window) == 4
    assert_grads_close(accumulated, [sum(grads) for grads in zip(*per_window, strict=True)])


def test_the_caller_steps_between_windows_and_the_next_window_sees_the_new_parameters():
    stream = one_document_stream()
    model = TinyLM(20)
    optimizer = torch.optim.SGD(model.params, lr=0.1)
    snapshots = []

    def forward(ids, state):
        snapshots.append(model.readout.weight.detach().clone())
        return model.forward(ids, state)

    for _ in TruncatedBPTT(3).run(stream, forward, loss_fn=window_loss):
        optimizer.step()
        optimizer.zero_grad()
    assert len(snapshots) == 3  # k1 = k2: one forward call per window
    assert not torch.equal(snapshots[0], snapshots[1]) and not torch.equal(snapshots[1], snapshots[2])


# ---------------------------------------------------------------- document resets


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_a_document_inside_a_window_runs_as_if_alone_from_a_zero_state(kind):
    stream = documents_stream()  # row 0's second document starts at column 5, inside the window [3, 6)
    model = TinyLM(24, kind=kind)
    seen = []

    def loss_fn(outputs, window):
        seen.append(outputs.detach())
        return window_loss(outputs, window)

    for _ in TruncatedBPTT(3).run(stream, model.forward, loss_fn=loss_fn):
        model.zero_grad()
    outputs = torch.cat(seen, dim=1)  # (B, 11, V)
    with torch.no_grad():
        alone_first, _ = model.forward(torch.arange(0, 5)[None], None)
        alone_second, _ = model.forward(torch.arange(5, 11)[None], None)
        row1, _ = model.forward(torch.arange(12, 23)[None], None)
        carried, _ = model.forward(torch.arange(0, 11)[None], None)
    torch.testing.assert_close(outputs[0:1, :5], alone_first)
    torch.testing.assert_close(outputs[0:1, 5:], alone_second)
    torch.testing.assert_close(outputs[1:2], row1)  # the other row keeps its state through the reset
    assert not torch.allclose(carried[:, 5:], alone_second)  # without the reset the outputs would differ


def test_reset_state_zeroes_rows_of_nested_states_and_keeps_the_graph_of_the_others():
    h = torch.randn(2, 3, H, dtype=DT, requires_grad=True)
    c = torch.randn(2, 3, H, dtype=DT)
    cell_h = torch.randn(3, H, dtype=DT)
    state = {"lstm": LSTMState(h, c), "cells": [cell_h, None]}
    resets = torch.tensor([False, True, False])
    out = reset_state(state, resets)
    assert isinstance(out["lstm"], LSTMState) and isinstance(out["cells"], list) and out["cells"][1] is None
    keep = torch.tensor([1.0, 0.0, 1.0], dtype=DT)
    torch.testing.assert_close(out["lstm"].h, h * keep[:, None], rtol=0, atol=0)
    torch.testing.assert_close(out["lstm"].c, c * keep[:, None], rtol=0, atol=0)
    torch.testing.assert_close(out["cells"][0], cell_h * keep[:, None], rtol=0, atol=0)
    (grad,) = torch.autograd.grad(out["lstm"].h.sum(), h)
    torch.testing.assert_close(grad, keep[:, None].expand(2, 3, H), rtol=0, atol=0)
    assert bool((c[:, 1] != 0).all())  # the input state is not modified in place


def test_detach_state_detaches_every_tensor_and_keeps_the_nesting():
    h = torch.randn(1, 2, H, requires_grad=True)
    state = (LSTMState(h * 2, h * 3), {"x": h + 1})
    out = detach_state(state)
    assert isinstance(out, tuple) and isinstance(out[0], LSTMState)
    assert not any(t.requires_grad for t in (out[0].h, out[0].c, out[1]["x"]))
    torch.testing.assert_close(out[0].c, (h * 3).detach(), rtol=0, atol=0)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0,), "k1 (0) must be an integer >= 1"),
        ((2.5,), "k1 (2.5) must be an integer >= 1"),
        ((3, True), "k2 (True) must be an integer >= 1"),
        ((3, 2), "k2 (2) must be >= k1 (3): gradients flow back at least over the window"),
    ],
)
def test_truncated_bptt_rejects_bad_k(args, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TruncatedBPTT(*args)


def test_defaults_and_repr():
    assert repr(TruncatedBPTT(4)) == "TruncatedBPTT(k1=4, k2=4)"
    assert (TruncatedBPTT(2, 6).k1, TruncatedBPTT(2, 6).k2) == (2, 6)


def test_forward_with_wrong_output_shape_and_non_scalar_loss_are_rejected():
    stream = one_document_stream()
    model = TinyLM(20)

    def flat_forward(ids, state):
        outputs, state = model.forward(ids, state)
        return outputs.flatten(0, 1), state  # (B*t, V): the time axis is gone

    message = "forward must return outputs of shape (B, t, ...) = (2, 3, ...) for inputs of shape (2, 3), got (6, 20)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        next(TruncatedBPTT(3).run(stream, flat_forward, loss_fn=window_loss))
    with pytest.raises(ValueError, match=re.escape("loss_fn must return a scalar loss, got shape (2, 3)")):
        next(TruncatedBPTT(3).run(stream, model.forward, loss_fn=lambda outputs, window: outputs.sum(-1)))


def test_state_tensors_without_the_batch_at_dim_minus_2_are_rejected():
    message = "state tensors must have shape (..., B, H) with B = 3 (the batch at dim -2), got (4, 3)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        reset_state(torch.zeros(4, 3), torch.tensor([True, False, False]))
    with pytest.raises(TypeError, match=r"^a recurrent state must be a Tensor, None, or a tuple, list or dict"):
        detach_state("h")


def test_run_yields_named_updates_and_validates_the_stream_lazily():
    stream = one_document_stream()
    model = TinyLM(20)
    update = next(TruncatedBPTT(3).run(stream, model.forward, loss_fn=window_loss))
    assert isinstance(update, TBPTTUpdate) and update.window.start == 0 and update.loss.dim() == 0
    bad = TokenStream(stream.tokens[:, :1], stream.resets[:, :1])
    with pytest.raises(ValueError, match=r"^a stream needs at least 2 steps"):
        next(TruncatedBPTT(3).run(bad, model.forward, loss_fn=window_loss))
