"""Gradient regimes: the scaled W_hh has the spectral norm or radius asked for (torch.linalg), the measured
gradient of a linear RNN is the hand-computed ||W^k||, the sigma_max bound lies above the measured norm of tanh
RNNs, the LSTM's direct path is the product of forget gates computed by hand, and the clipped run of an
exploding RNN keeps every update within the threshold while the unclipped one diverges."""

import math

import pytest
import torch
from torch.testing import assert_close

from seqlab.analysis.gradients import gradient_flow, make_cell, random_input
from seqlab.analysis.regimes import clipping_runs, eigen_rate, lstm_direct_path, recurrent_blocks, scale_recurrent
from seqlab.errors import ConfigError
from seqlab.nn import RNNCell
from seqlab.training.clipping import clip_grad_norm

E = H = 6


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm"])
@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
def test_every_gate_block_has_the_spectral_norm_or_radius_asked_for(arch, scale):
    cell = make_cell(arch, E, H, seed=0)
    by_norm = scale_recurrent(cell, scale, measure="spectral_norm")
    by_radius = scale_recurrent(cell, scale, measure="spectral_radius")
    for block in recurrent_blocks(by_norm):
        assert torch.linalg.matrix_norm(block.double(), ord=2).item() == pytest.approx(scale, rel=1e-5)
    for block in recurrent_blocks(by_radius):
        assert torch.linalg.eigvals(block.double()).abs().max().item() == pytest.approx(scale, rel=1e-5)
    # only W_hh changes, and the original cell is untouched
    assert_close(by_norm.weight_ih, cell.weight_ih)
    assert not torch.equal(by_norm.weight_hh, cell.weight_hh)
    assert_close(cell.weight_hh, make_cell(arch, E, H, seed=0).weight_hh)


def test_the_measured_gradient_of_a_linear_rnn_is_the_norm_of_w_to_the_k():
    """A ReLU RNN whose pre-activations all stay positive is linear on this input (relu' = 1): dh_T/dh_k =
    W_hh^(T-k), so the measured norm is ||W_hh^(T-k)||_2, computed here by repeated matrix products."""
    T = 8
    cell = RNNCell(E, H, nonlinearity="relu").double()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        cell.weight_hh.copy_(torch.rand(H, H, generator=generator, dtype=torch.float64) * 0.4)
        cell.weight_ih.copy_(torch.rand(H, E, generator=generator, dtype=torch.float64))
        cell.bias_ih.fill_(0.1)
        cell.bias_hh.zero_()
    x = torch.rand(T, E, generator=generator, dtype=torch.float64)
    h = torch.zeros(H, dtype=torch.float64)
    for t in range(T):  # every pre-activation positive: identity activation on this trajectory
        pre = cell.weight_ih @ x[t] + cell.bias_ih + cell.weight_hh @ h
        assert (pre > 0).all()
        h = pre
    flow = gradient_flow(cell, x)
    power, expected = torch.eye(H, dtype=torch.float64), [1.0]
    for _ in range(T):
        power = power @ cell.weight_hh.detach()
        expected.append(torch.linalg.matrix_norm(power, ord=2).item())
    assert_close(flow.jacobian_norm, torch.tensor(expected, dtype=torch.float64))
    # Gelfand: the eigenvalue rate is the limit of ||W^n||^(1/n); for this positive matrix it is also below it.
    assert (eigen_rate(cell, T).rate <= flow.jacobian_norm * (1 + 1e-9)).all()


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("input_std", [0.1, 1.0])
def test_the_sigma_max_bound_lies_above_the_measured_norm_of_tanh_rnns(scale, input_std):
    cell = scale_recurrent(make_cell("rnn", E, H, seed=1), scale, measure="spectral_radius")
    flow = gradient_flow(cell, input_std * random_input(30, E, seed=1))
    assert (flow.jacobian_norm <= flow.bound * (1 + 1e-9)).all()
    sigma = torch.linalg.matrix_norm(cell.weight_hh.double(), ord=2).item()
    assert_close(flow.bound, sigma ** torch.arange(31, dtype=torch.float64))
    radius = torch.linalg.eigvals(cell.weight_hh.double()).abs().max().item()
    assert eigen_rate(cell, 30).radius == pytest.approx(radius) and radius == pytest.approx(scale, rel=1e-5)


def test_the_lstm_direct_path_is_the_product_of_forget_gates_by_hand():
    T = 7
    cell = scale_recurrent(make_cell("lstm", E, H, seed=2), 1.5).double()
    x = random_input(T, E, seed=2)
    h, c, forget = torch.zeros(H, dtype=torch.float64), torch.zeros(H, dtype=torch.float64), []
    w_ii, w_if, w_ig, w_io = cell.weight_ih.detach().chunk(4)
    w_hi, w_hf, w_hg, w_ho = cell.weight_hh.detach().chunk(4)
    b = (cell.bias_ih + cell.bias_hh).detach().chunk(4)
    for t in range(T):  # the textbook equations, written out
        i = torch.sigmoid(w_ii @ x[t] + w_hi @ h + b[0])
        f = torch.sigmoid(w_if @ x[t] + w_hf @ h + b[1])
        g = torch.tanh(w_ig @ x[t] + w_hg @ h + b[2])
        o = torch.sigmoid(w_io @ x[t] + w_ho @ h + b[3])
        c = f * c + i * g
        h = o * torch.tanh(c)
        forget.append(f)
    expected = [1.0]
    for k in range(T - 1, -1, -1):  # distance T - k = 1 .. T: prod_{j=k+1..T} f_j, largest unit
        expected.append(torch.stack(forget[k:]).prod(dim=0).max().item())
    path = lstm_direct_path(cell, x)
    assert_close(path.direct, torch.tensor(expected, dtype=torch.float64))
    assert path.full[0] == 1.0 and path.full.shape == (T + 1,)


def test_clipping_keeps_an_exploding_rnn_finite_and_each_clipped_gradient_within_tau():
    cell = scale_recurrent(make_cell("rnn", E, H, seed=0), 3.0, measure="spectral_radius")
    runs = clipping_runs(cell, clip_grad_norm, clip_norm=0.5, length=20, input_std=0.1, steps=15, lr=0.5)
    assert not torch.isfinite(runs["unclipped"].loss).all() or runs["unclipped"].loss.max() > 1e6
    assert torch.isfinite(runs["clipped"].loss).all() and runs["clipped"].loss.max() < 10
    # the first step sees the same weights and batch: the same loss and pre-clip norm
    assert runs["clipped"].loss[0] == runs["unclipped"].loss[0]
    assert runs["clipped"].grad_norm[0] == runs["unclipped"].grad_norm[0]


@pytest.mark.parametrize("scale", [0.0, -1.0, math.nan, math.inf, 1e3])
def test_a_bad_scale_is_refused(scale):
    with pytest.raises(ConfigError, match=r"^scale \(.*\) must be a number > 0 and <= 100$"):
        scale_recurrent(make_cell("rnn", E, H, seed=0), scale)
