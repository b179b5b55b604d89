"""Gradient flow: the one-backward Jacobian norms against a Jacobian recomputed from each state, and the bounds."""

import pytest
import torch

from seqlab.analysis.gradients import (
    ARCHITECTURES,
    GradientFlow,
    decay_rate,
    gradient_flow,
    make_cell,
    random_input,
    recurrent_cell,
)
from seqlab.errors import CheckpointError
from seqlab.models import GPT, GPTConfig, RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.nn import LSTMCell, RNNCell
from seqlab.nn.cells import flip_update_gate

T, E, H = 6, 3, 4


def run_from(cell, x, k, h, c=None):
    """h_T of the cell run on x[k:] from state (h, c) at step k, batch 1."""
    for t in range(k, x.shape[0]):
        if c is None:
            h = cell(x[t : t + 1], h)
        else:
            h, c = cell(x[t : t + 1], (h, c))
    return h[0]


def output_gate(cell, x_t, h):
    """o_t = sigmoid(W_io x_t + b_io + W_ho h + b_ho), torch's gate order i, f, g, o."""
    gates = x_t @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh
    return torch.sigmoid(gates.chunk(4, dim=1)[3])


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_norms_equal_the_jacobian_recomputed_from_each_state(arch):
    cell = make_cell(arch, E, H, seed=1).double()
    x = random_input(T, E, seed=2)
    flow = gradient_flow(cell, x)
    states, h = [], torch.zeros(1, H, dtype=torch.float64)
    c = torch.zeros(1, H, dtype=torch.float64) if arch == "lstm" else None
    with torch.no_grad():
        for t in range(T + 1):
            states.append((h, c))
            if t < T:
                h, c = cell(x[t : t + 1], (h, c)) if arch == "lstm" else (cell(x[t : t + 1], h), None)
    for k in range(T + 1):
        h_k, c_k = states[k]
        jacobian = torch.autograd.functional.jacobian(
            lambda h0, k=k, c_k=c_k: run_from(cell, x, k, h0, c_k), h_k
        )  # (H, 1, H)
        expected = torch.linalg.matrix_norm(jacobian.reshape(H, H), ord=2)
        torch.testing.assert_close(flow.jacobian_norm[T - k], expected)
        if arch == "lstm":
            # c_k reaches h_T also through h_k = o_k tanh(c_k), o_k fixed by h_{k-1} and x_k (h_0 is a given state).
            o_k = output_gate(cell, x[k - 1 : k], states[k - 1][0]) if k > 0 else None

            def from_cell(c0, k=k, h_k=h_k, o_k=o_k):
                return run_from(cell, x, k, h_k if o_k is None else o_k * torch.tanh(c0), c0)

            jacobian = torch.autograd.functional.jacobian(from_cell, c_k)
            torch.testing.assert_close(flow.cell_jacobian_norm[T - k], torch.linalg.matrix_norm(jacobian[:, 0], ord=2))


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
def test_rnn_norms_stay_below_the_path_bound_and_gamma_power(nonlinearity, scale):
    torch.manual_seed(0)
    cell = RNNCell(E, 8, nonlinearity=nonlinearity)
    with torch.no_grad():
        cell.weight_hh.mul_(scale)
    flow = gradient_flow(cell, random_input(40, E, seed=3))
    assert flow.gamma == pytest.approx(torch.linalg.matrix_norm(cell.weight_hh.double(), ord=2).item())
    torch.testing.assert_close(flow.bound, flow.gamma ** torch.arange(41, dtype=torch.float64))
    assert (flow.jacobian_norm <= flow.path_bound * (1 + 1e-9)).all()
    assert (flow.path_bound <= flow.bound * (1 + 1e-9)).all()


def test_gate_products_are_the_hand_computed_powers_of_constant_gates():
    # With zero weights every gate is sigmoid(bias): the product over d steps is sigmoid(b)^d.
    for arch, block in (("lstm", 1), ("gru", 1)):
        cell = make_cell(arch, E, H, seed=0)
        with torch.no_grad():
            cell.weight_ih.zero_()
            cell.weight_hh.zero_()
            cell.bias_hh.zero_()
            cell.bias_ih.zero_()
            cell.bias_ih.view(-1, H)[block] = 1.5
        flow = gradient_flow(cell, random_input(T, E, seed=0))
        expected = torch.sigmoid(torch.tensor(1.5, dtype=torch.float64)) ** torch.arange(T + 1, dtype=torch.float64)
        torch.testing.assert_close(flow.gate_product, expected)


def test_decay_rate_recovers_a_geometric_decay():
    d = torch.arange(11, dtype=torch.float64)
    flow = GradientFlow(d, 0.7**d, None, None, None, None, None)
    assert decay_rate(flow) == pytest.approx(0.7)


def test_recurrent_cell_finds_the_first_layer_or_refuses():
    model = RNNSeq2Seq(RNNSeq2SeqConfig(src_vocab_size=5, tgt_vocab_size=5, embedding_size=4, hidden_size=4))
    cell = recurrent_cell(model)
    assert isinstance(cell, LSTMCell) and cell is model.encoder.rnn.cells[0]
    with pytest.raises(CheckpointError, match="has no RNN, GRU or LSTM layer"):
        recurrent_cell(GPT(GPTConfig(vocab_size=5, d_model=8, num_heads=2, num_layers=1)))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"x must be \(T, E\)"):
        gradient_flow(make_cell("rnn", E, H, seed=0), torch.zeros(T, E + 1))
    with pytest.raises(ValueError, match="arch"):
        make_cell("transformer", E, H, seed=0)


def test_the_textbook_grus_keep_gate_is_one_minus_z_so_both_forms_agree_where_they_compute_the_same():
    """With W_hn = 0 and b_hn = 0 (r_t has nothing to act on) a textbook cell loaded with ``flip_update_gate`` of a
    torch-form cell's weights computes the same states, so the same Jacobians and the same keep-gate products."""
    torch_form = make_cell("gru", E, H, seed=3)
    with torch.no_grad():
        torch_form.weight_hh[2 * H :] = 0
        torch_form.bias_hh[2 * H :] = 0
    textbook = make_cell("gru_textbook", E, H, seed=3)
    textbook.load_state_dict(flip_update_gate(torch_form.state_dict(), H))
    x = random_input(T, E, seed=3)
    ours, theirs = gradient_flow(textbook, x), gradient_flow(torch_form, x)
    torch.testing.assert_close(ours.jacobian_norm, theirs.jacobian_norm)
    torch.testing.assert_close(ours.gate_product, theirs.gate_product)
