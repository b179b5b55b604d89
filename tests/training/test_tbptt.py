import copy
import itertools
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.streams import batchify_stream, stream_windows
from seqlab.nn.cells import LSTMState
from seqlab.nn.recurrent import GRU, LSTM
from seqlab.training.objectives import LossOutput
from seqlab.training.tbptt import TruncatedBPTT, detach_state, reset_state
from seqlab.training.trainer import TrainConfig, Trainer

E, H = 3, 4
DT = torch.float64


class TinyLM(nn.Module):
    """Token ids are positions: ``inputs[id]`` is the input vector of the token with that id, so the gradient of
    ``inputs`` row by row is the gradient with respect to each step's input. The vocabulary is the ids."""

    def __init__(self, num_ids, *, kind="lstm", seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.inputs = nn.Parameter(torch.randn(num_ids, E, dtype=DT))
        layer = LSTM if kind == "lstm" else GRU
        self.rnn = layer(E, H, dtype=DT)
        self.readout = nn.Linear(H, num_ids, dtype=DT)

    def forward(self, ids, state):
        result = self.rnn(self.inputs[ids], state=state)  # (B, t, E) -> (B, t, H)
        return self.readout(result.outputs), result.state  # (B, t, V)

    def grads(self):
        return [p.grad.clone() for p in self.parameters()]


def model_forward(model, ids, state):
    return model(ids, state)


def loss_of(outputs, targets):
    return F.cross_entropy(outputs.flatten(0, 1), targets.flatten())


def window_loss(outputs, window):
    return LossOutput(loss_of(outputs, window.targets), window.targets.numel())


def keep_rows(state, resets):
    """Zero the rows of a (1, B, H) state by multiplication: an implementation independent of reset_state."""
    if state is None:
        return None
    keep = (~resets).to(DT).view(1, -1, 1)
    if isinstance(state, LSTMState):
        return LSTMState(state.h * keep, state.c * keep)
    return state * keep


def step_by_step(model, ids, resets, state):
    """One forward call per step, resetting rows before the steps where documents start.

    Returns the outputs (B, t, V), the final state and the state entering each step (before its resets).
    """
    outputs, entering = [], []
    for t in range(ids.shape[1]):
        entering.append(state)
        state = keep_rows(state, resets[:, t])
        out, state = model(ids[:, t : t + 1], state)
        outputs.append(out)
    return torch.cat(outputs, dim=1), state, entering


def by_hand(model, stream, k1, k2, *, lr, epochs=1, accumulation=1):
    """The former ``TruncatedBPTT.run`` loop with plain SGD, written out step by step.

    Each window [s, e) of at most k1 steps re-runs the steps from a = max(0, s - (k2 - k1)) with the current
    parameters, starting from the detached state that the latest run computed for step a; the window's mean
    loss is differentiated through those steps only. Every ``accumulation`` windows (and at the stream's
    end) the token-weighted mean gradient makes one SGD step p <- p - lr g.

    Returns the gradient of every step and the final parameters.
    """
    params = list(model.parameters())
    step_grads = []
    N = stream.tokens.shape[1] - 1
    windows = [(s, min(s + k1, N)) for s in range(0, N, k1)]
    for _ in range(epochs):
        entering = {0: None}  # step -> detached state entering it, from the latest run through it
        for group in (windows[i : i + accumulation] for i in range(0, len(windows), accumulation)):
            total = sum(stream.tokens.shape[0] * (e - s) for s, e in group)
            grads = [torch.zeros_like(p) for p in params]
            for s, e in group:
                a = max(0, s - (k2 - k1))
                outputs, final, states = step_by_step(model, stream.tokens[:, a:e], stream.resets[:, a:e], entering[a])
                entering.update({a + t: detach_state(state) for t, state in enumerate([*states, final])})
                loss = loss_of(outputs[:, s - a :], stream.tokens[:, s + 1 : e + 1])
                weight = stream.tokens.shape[0] * (e - s) / total
                for g, dg in zip(grads, torch.autograd.grad(loss, params), strict=True):
                    g += weight * dg
            step_grads.append(grads)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p -= lr * g
    return step_grads, [p.detach().clone() for p in params]


def countdown():
    """A validate fn whose metric falls at every call, so the last validation is the best one."""
    values = itertools.count(0, -1)
    return lambda model: {"valid_loss": float(next(values))}


def train_tbptt(model, stream, k1, k2, *, lr=0.5, epochs=1, accumulation=1, loss_fn=window_loss, forward=None):
    """Fit ``model`` through the Trainer with the TruncatedBPTT strategy and SGD; return the gradients of every
    step (seen just before the optimizer applies them) and the final parameters."""
    B = stream.tokens.shape[0]
    config = TrainConfig(
        optimizer="sgd",
        lr=lr,
        batch_size=B * accumulation,
        grad_accumulation_steps=accumulation,
        max_epochs=epochs,
        clip_norm=None,
        patience=None,
        device="cpu",
    )
    trainer = Trainer(
        model,
        config,
        strategy=TruncatedBPTT(k1, k2, forward=forward or model_forward),
        loss_fn=loss_fn,
        train_batches=lambda epoch, generator, batch_size: stream_windows(stream, k1),
        validate=countdown(),
        progress=False,
        log=None,
    )
    step_grads = []
    trainer.optimizer.register_step_pre_hook(lambda *args: step_grads.append(model.grads()))
    trainer.fit()
    return step_grads, [p.detach().clone() for p in model.parameters()]


def positions_of(stream, columns):
    """The ids (= rows of TinyLM.inputs) of the stream's tokens in the given columns, all batch rows."""
    return stream.tokens[:, columns].flatten()


def one_document_stream(B=2, N=10):
    return batchify_stream([list(range(B * N))], B)


def documents_stream():
    # Row 0 holds documents [0..4] and [5..11] (a reset at column 5); row 1 holds [12..23] (only column 0).
    return batchify_stream([list(range(0, 5)), list(range(5, 12)), list(range(12, 24))], 2)


def assert_all_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(g, list):
            assert_all_close(g, w)
        else:
            torch.testing.assert_close(g, w)


# ---------------------------------------------------------------- exactness of the truncation


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("extra", [0, 3])
def test_one_window_over_the_whole_stream_equals_full_bptt(kind, extra):
    stream = documents_stream()
    T = stream.tokens.shape[1] - 1
    model = TinyLM(24, kind=kind)
    outputs, _, _ = step_by_step(model, stream.tokens[:, :-1], stream.resets[:, :-1], None)
    full_grads = list(torch.autograd.grad(loss_of(outputs, stream.tokens[:, 1:]), list(model.parameters())))
    step_grads, _ = train_tbptt(model, stream, T, T + extra)
    assert len(step_grads) == 1
    assert_all_close(step_grads[0], full_grads)


@pytest.mark.parametrize(("k1", "k2"), [(3, 3), (2, 5), (3, 4), (2, 11)])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_every_step_through_the_trainer_equals_the_former_tbptt_loop_by_hand(k1, k2, kind):
    stream = documents_stream()  # with a document boundary, so resets inside context and windows count
    model = TinyLM(24, kind=kind)
    want_grads, want_params = by_hand(copy.deepcopy(model), stream, k1, k2, lr=0.5, epochs=2)
    got_grads, got_params = train_tbptt(model, stream, k1, k2, lr=0.5, epochs=2)
    assert len(got_grads) == 2 * -(-11 // k1)  # the second epoch starts the stream again from a zero state
    assert_all_close(got_grads, want_grads)
    assert_all_close(got_params, want_params)


@pytest.mark.parametrize(("k1", "k2"), [(3, 3), (2, 5)])
def test_gradient_accumulation_over_consecutive_windows_is_their_token_weighted_mean(k1, k2):
    stream = documents_stream()  # 11 input steps: the last window is shorter, so the weights differ
    model = TinyLM(24)
    want_grads, want_params = by_hand(copy.deepcopy(model), stream, k1, k2, lr=0.5, accumulation=2)
    got_grads, got_params = train_tbptt(model, stream, k1, k2, lr=0.5, accumulation=2)
    assert len(got_grads) == -(-11 // (2 * k1))
    assert_all_close(got_grads, want_grads)
    assert_all_close(got_params, want_params)


@pytest.mark.parametrize(("k1", "k2"), [(3, 3), (2, 5)])
def test_gradient_reaches_exactly_k2_steps_back_and_not_one_more(k1, k2):
    stream = one_document_stream(N=14)  # no resets after column 0: only the truncation can cut gradients
    model = TinyLM(28)
    step_grads, _ = train_tbptt(model, stream, k1, k2)
    checked = 0
    for start, grads in zip(range(0, 13, k1), step_grads, strict=True):
        end = start + k1
        if start >= k2 and end <= 13:
            grad = grads[0]  # of TinyLM.inputs: row id is the gradient of the step reading token id
            first = end - k2  # the earliest step the window's loss may reach
            assert torch.equal(grad[positions_of(stream, slice(0, first))], torch.zeros(2 * first, E, dtype=DT))
            assert bool((grad[positions_of(stream, first)] != 0).all(dim=-1).all())
            assert bool((grad[positions_of(stream, slice(first, end))].abs().sum(-1) > 0).all())
            checked += 1
    assert checked >= 2


# ---------------------------------------------------------------- document resets


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_a_document_inside_a_window_runs_as_if_alone_from_a_zero_state(kind):
    stream = documents_stream()  # row 0's second document starts at column 5, inside the one window [0, 11)
    model = TinyLM(24, kind=kind)
    seen = []

    def loss_fn(outputs, window):
        seen.append(outputs.detach())
        with torch.no_grad():  # before the step: the parameters that made `outputs`
            seen.extend(model(torch.arange(a, b)[None], None)[0] for a, b in ((0, 5), (5, 11), (12, 23), (0, 11)))
        return window_loss(outputs, window)

    train_tbptt(model, stream, 11, 11, loss_fn=loss_fn)
    outputs, alone_first, alone_second, row1, carried = seen
    torch.testing.assert_close(outputs[0:1, :5], alone_first)
    torch.testing.assert_close(outputs[0:1, 5:], alone_second)
    torch.testing.assert_close(outputs[1:2], row1)  # the other row keeps its state through the reset
    assert not torch.allclose(carried[:, 5:], alone_second)  # without the reset the outputs would differ


def test_the_strategy_keeps_the_detached_state_after_the_latest_window():
    stream = one_document_stream()
    model = TinyLM(20)
    strategy = TruncatedBPTT(3, forward=model_forward)
    windows = list(stream_windows(stream, 3))
    for window in windows:
        strategy.loss(model, window, window_loss)
    _, final, _ = step_by_step(model, stream.tokens[:, :-1], stream.resets[:, :-1], None)
    torch.testing.assert_close(strategy.state, detach_state(final))
    assert not strategy.state.h.requires_grad


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
        TruncatedBPTT(*args, forward=model_forward)


def test_defaults_and_repr():
    assert repr(TruncatedBPTT(4, forward=model_forward)) == "TruncatedBPTT(k1=4, k2=4)"
    strategy = TruncatedBPTT(2, 6, forward=model_forward)
    assert (strategy.k1, strategy.k2, strategy.state) == (2, 6, None)


def test_forward_with_wrong_output_shape_and_non_scalar_loss_are_rejected():
    stream = one_document_stream()

    def flat_forward(model, ids, state):
        outputs, state = model(ids, state)
        return outputs.flatten(0, 1), state  # (B*t, V): the time axis is gone

    message = "forward must return outputs of shape (B, t, ...) = (2, 3, ...) for inputs of shape (2, 3), got (6, 20)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        train_tbptt(TinyLM(20), stream, 3, 3, forward=flat_forward)
    message = "loss_fn must return a scalar loss, got shape (2, 3) at step 1"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        train_tbptt(TinyLM(20), stream, 3, 3, loss_fn=lambda outputs, window: LossOutput(outputs.sum(-1), 6))


def test_windows_must_follow_each_other_and_fit_in_k1():
    stream = one_document_stream()
    model = TinyLM(20)
    strategy = TruncatedBPTT(3, forward=model_forward)
    first, second, third = list(stream_windows(stream, 3))
    with pytest.raises(ValueError, match=r"^windows must follow each other: expected start 0, got 3$"):
        strategy.loss(model, second, window_loss)
    strategy.loss(model, first, window_loss)
    with pytest.raises(ValueError, match=r"^windows must follow each other: expected start 3, got 6$"):
        strategy.loss(model, third, window_loss)
    (long,) = list(stream_windows(stream, 9))
    message = "a window of 9 steps is longer than k1 (3); use stream_windows(stream, k1)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        strategy.loss(model, long, window_loss)


def test_state_tensors_without_the_batch_at_dim_minus_2_are_rejected():
    message = "state tensors must have shape (..., B, H) with B = 3 (the batch at dim -2), got (4, 3)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        reset_state(torch.zeros(4, 3), torch.tensor([True, False, False]))
    with pytest.raises(TypeError, match=r"^a recurrent state must be a Tensor, None, or a tuple, list or dict"):
        detach_state("h")
