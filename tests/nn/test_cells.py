"""RNNCell, LSTMCell and GRUCell against torch.nn cells and a transcription of the seeds' textbook GRU equations."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.nn.cells import GRUCell, LSTMCell, LSTMState, RNNCell, flip_update_gate

E, H, B = 3, 4, 5
EXACT = {"atol": 1e-10, "rtol": 0.0}

# (seqlab factory, torch factory) pairs with torch.nn semantics.
TORCH_EQUIVALENTS = {
    "rnn_tanh": (lambda bias: RNNCell(E, H, bias=bias), lambda bias: nn.RNNCell(E, H, bias=bias)),
    "rnn_relu": (
        lambda bias: RNNCell(E, H, bias=bias, nonlinearity="relu"),
        lambda bias: nn.RNNCell(E, H, bias=bias, nonlinearity="relu"),
    ),
    "lstm": (lambda bias: LSTMCell(E, H, bias=bias), lambda bias: nn.LSTMCell(E, H, bias=bias)),
    "gru": (lambda bias: GRUCell(E, H, bias=bias), lambda bias: nn.GRUCell(E, H, bias=bias)),
}


@pytest.fixture(autouse=True)
def _float64():
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _hidden(out):
    return out.h if isinstance(out, LSTMState) else out


def state_parts(state):
    return tuple(state) if isinstance(state, LSTMState) else (state,)


def _random_state(kind: str):
    if kind == "lstm":
        return LSTMState(torch.randn(B, H), torch.randn(B, H))
    return torch.randn(B, H)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", list(TORCH_EQUIVALENTS))
def test_cell_matches_torch_forward_and_gradients(kind, bias):
    make_seqlab, make_torch = TORCH_EQUIVALENTS[kind]
    cell, reference = make_seqlab(bias), make_torch(bias)
    reference.load_state_dict(cell.state_dict())  # same names and layout, so state_dicts copy 1:1
    x = torch.randn(B, E, requires_grad=True)
    state = _random_state(kind)

    out = cell(x, state)
    expected = reference(x, tuple(state) if kind == "lstm" else state)
    if kind == "lstm":
        assert_close(out.h, expected[0], **EXACT)
        assert_close(out.c, expected[1], **EXACT)
        loss, expected_loss = (out.h * out.c).sum(), (expected[0] * expected[1]).sum()
    else:
        assert_close(out, expected, **EXACT)
        loss, expected_loss = out.square().sum(), expected.square().sum()

    grads = torch.autograd.grad(loss, [x, *cell.parameters()])
    expected_grads = torch.autograd.grad(expected_loss, [x, *reference.parameters()])
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_close(grad, expected_grad, **EXACT)


@pytest.mark.parametrize("kind", list(TORCH_EQUIVALENTS))
def test_cell_zero_state_by_default_matches_torch(kind):
    make_seqlab, make_torch = TORCH_EQUIVALENTS[kind]
    cell, reference = make_seqlab(True), make_torch(True)
    reference.load_state_dict(cell.state_dict())
    x = torch.randn(B, E)
    expected = reference(x)
    assert_close(_hidden(cell(x)), expected[0] if kind == "lstm" else expected, **EXACT)


@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm", "gru"])
def test_step_on_hoisted_projection_equals_forward(kind):
    cell = TORCH_EQUIVALENTS[kind][0](True)
    x, state = torch.randn(B, E), _random_state(kind)
    xw = cell.input_projection(x)
    assert xw.shape == (B, cell.num_gates * H)
    assert_close(_hidden(cell.step(xw, state)), _hidden(cell(x, state)), **EXACT)
    assert_close(_hidden(cell.recurrence()(xw, state)), _hidden(cell(x, state)), **EXACT)


def test_lstm_forget_bias_shifts_only_the_forget_gate_bias():
    torch.manual_seed(1)
    shifted = LSTMCell(E, H, forget_bias=1.5)
    torch.manual_seed(1)
    plain = LSTMCell(E, H, forget_bias=0.0)
    expected = plain.bias_ih.detach().clone()
    expected[H : 2 * H] += 1.5  # gate order i, f, g, o
    assert_close(shifted.bias_ih, expected, atol=0.0, rtol=0.0)
    for name in ("weight_ih", "weight_hh", "bias_hh"):
        assert_close(getattr(shifted, name), getattr(plain, name), atol=0.0, rtol=0.0)


def test_parameter_layout_is_torch_layout():
    for cell, gates in ((RNNCell(E, H), 1), (LSTMCell(E, H), 4), (GRUCell(E, H, variant="textbook"), 3)):
        shapes = {name: tuple(p.shape) for name, p in cell.named_parameters()}
        assert shapes == {
            "weight_ih": (gates * H, E),
            "weight_hh": (gates * H, H),
            "bias_ih": (gates * H,),
            "bias_hh": (gates * H,),
        }
    assert [name for name, _ in LSTMCell(E, H, bias=False).named_parameters()] == ["weight_ih", "weight_hh"]


def textbook_gru_transcription(x, h, cell):
    """The seeds' GRU written out gate by gate: reset before the matmul, z_t weighting the candidate."""
    W_r, W_z, W = cell.weight_ih.chunk(3)
    U_r, U_z, U = cell.weight_hh.chunk(3)
    b_ir, b_iz, b_in = cell.bias_ih.chunk(3)
    b_hr, b_hz, b_hn = cell.bias_hh.chunk(3)
    r = torch.sigmoid(x @ W_r.T + h @ U_r.T + (b_ir + b_hr))
    z = torch.sigmoid(x @ W_z.T + h @ U_z.T + (b_iz + b_hz))
    h_tilde = torch.tanh(x @ W.T + (r * h) @ U.T + (b_in + b_hn))
    return (1 - z) * h + z * h_tilde


def test_textbook_gru_matches_equation_transcription():
    cell = GRUCell(E, H, variant="textbook")
    x, h = torch.randn(B, E), torch.randn(B, H)
    assert_close(cell(x, h), textbook_gru_transcription(x, h, cell), **EXACT)
    assert_close(cell(x), textbook_gru_transcription(x, torch.zeros(B, H), cell), **EXACT)


def test_textbook_gru_loop_over_steps_matches_hand_written_seeds_loop():
    cell = GRUCell(E, H, variant="textbook")
    xs = torch.randn(6, B, E)
    h_cell, h_loop = torch.zeros(B, H), torch.zeros(B, H)
    for x_t in xs:
        h_cell, h_loop = cell(x_t, h_cell), textbook_gru_transcription(x_t, h_loop, cell)
        assert_close(h_cell, h_loop, **EXACT)


def test_textbook_gru_step_by_hand():
    """One step with every weight 0 except scalars: H = E = 1, numbers worked out on paper."""
    cell = GRUCell(1, 1, variant="textbook")
    with torch.no_grad():
        cell.weight_ih.copy_(torch.tensor([[1.0], [2.0], [3.0]]))  # W_r, W_z, W
        cell.weight_hh.copy_(torch.tensor([[0.5], [-1.0], [2.0]]))  # U_r, U_z, U
        cell.bias_ih.zero_()
        cell.bias_hh.zero_()
    x, h = torch.tensor([[1.0]]), torch.tensor([[2.0]])
    r = 1 / (1 + torch.exp(torch.tensor(-2.0)))  # sigma(1 + 0.5 * 2)
    z = 1 / (1 + torch.exp(torch.tensor(-0.0)))  # sigma(2 - 2) = 0.5
    h_tilde = torch.tanh(3.0 + 2.0 * (r * 2.0))
    assert_close(cell(x, h), ((1 - z) * 2.0 + z * h_tilde).view(1, 1), **EXACT)


def test_flip_update_gate_maps_torch_z_onto_the_seeds_z():
    """Textbook cell with flipped weights == torch.nn.GRUCell when r_t has nothing to act on (W_hn = b_hn = 0)."""
    reference = nn.GRUCell(E, H)
    with torch.no_grad():
        reference.weight_hh[2 * H :] = 0.0
        reference.bias_hh[2 * H :] = 0.0
    textbook = GRUCell(E, H, variant="textbook")
    textbook.load_state_dict(flip_update_gate(reference.state_dict(), H))
    x, h = torch.randn(B, E), torch.randn(B, H)
    assert_close(textbook(x, h), reference(x, h), **EXACT)
    unflipped = GRUCell(E, H, variant="textbook")
    unflipped.load_state_dict(reference.state_dict())
    assert (unflipped(x, h) - reference(x, h)).abs().max() > 1e-3


def test_flip_update_gate_is_an_involution_touching_only_z_rows():
    state = GRUCell(E, H).state_dict()
    flipped = flip_update_gate(state, H)
    for name, tensor in state.items():
        assert_close(flipped[name][H : 2 * H], -tensor[H : 2 * H], atol=0.0, rtol=0.0)
        assert_close(flipped[name][:H], tensor[:H], atol=0.0, rtol=0.0)
        assert_close(flipped[name][2 * H :], tensor[2 * H :], atol=0.0, rtol=0.0)
        assert_close(flip_update_gate(flipped, H)[name], tensor, atol=0.0, rtol=0.0)
    with pytest.raises(ValueError, match=r"^weight_ih has 12 rows, expected 3 \* hidden_size = 9$"):
        flip_update_gate(state, 3)


def test_textbook_and_reset_after_differ_only_in_where_r_applies():
    reset_after = GRUCell(E, H, variant="reset_after")
    textbook = GRUCell(E, H, variant="textbook")
    textbook.load_state_dict(flip_update_gate(reset_after.state_dict(), H))
    x, h = torch.randn(B, E), torch.randn(B, H)
    assert (textbook(x, h) - reset_after(x, h)).abs().max() > 1e-3
    # With W_hn = 0 and b_hn = 0 the recurrent term of n_t vanishes and r_t has nothing to act on.
    with torch.no_grad():
        for cell in (textbook, reset_after):
            cell.weight_hh[2 * H :] = 0.0
            cell.bias_hh[2 * H :] = 0.0
    assert_close(textbook(x, h), reset_after(x, h), **EXACT)


def test_textbook_gru_gradcheck():
    cell = GRUCell(2, 3, variant="textbook")
    x = torch.randn(2, 2, requires_grad=True)
    h = torch.randn(2, 3, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, h, *params: torch.func.functional_call(
            cell, dict(zip(["weight_ih", "weight_hh", "bias_ih", "bias_hh"], params, strict=True)), (x, h)
        ),
        (x, h, *(p.detach().clone().requires_grad_() for p in cell.parameters())),
    )


@pytest.mark.parametrize("kind", list(TORCH_EQUIVALENTS))
def test_from_torch_to_torch_round_trip(kind):
    reference = TORCH_EQUIVALENTS[kind][1](True)
    cell = type(TORCH_EQUIVALENTS[kind][0](True)).from_torch(reference)
    assert cell.weight_ih.dtype == torch.float64
    back = cell.to_torch()
    assert type(back) is type(reference)
    assert getattr(back, "nonlinearity", None) == getattr(reference, "nonlinearity", None)
    for (name, p), (ref_name, ref_p) in zip(back.state_dict().items(), reference.state_dict().items(), strict=True):
        assert name == ref_name
        assert_close(p, ref_p, atol=0.0, rtol=0.0)
    x, state = torch.randn(B, E), _random_state(kind)
    expected = reference(x, tuple(state) if kind == "lstm" else state)
    assert_close(_hidden(cell(x, state)), expected[0] if kind == "lstm" else expected, **EXACT)


def test_from_torch_copies_weights_not_shares_them():
    reference = nn.GRUCell(E, H)
    cell = GRUCell.from_torch(reference)
    with torch.no_grad():
        cell.weight_hh.add_(1.0)
    assert (cell.weight_hh - reference.weight_hh).abs().min() > 0.5


def test_textbook_gru_to_torch_raises():
    with pytest.raises(
        ValueError,
        match=r"^torch.nn.GRUCell implements only variant='reset_after'; this cell is variant='textbook'$",
    ):
        GRUCell(E, H, variant="textbook").to_torch()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: RNNCell(E, H, nonlinearity="sigmoid"),
            r"nonlinearity \('sigmoid'\) must be one of 'tanh', 'relu'",
        ),
        (
            lambda: GRUCell(E, H, variant="cho"),
            r"variant \('cho'\) must be one of 'reset_after', 'textbook'",
        ),
        (lambda: LSTMCell(0, H), r"input_size \(0\) must be an integer >= 1"),
    ],
)
def test_bad_construction_arguments(make, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make()


@pytest.mark.parametrize("cell", [RNNCell(E, H), LSTMCell(E, H), GRUCell(E, H, variant="textbook")])
def test_wrong_input_size_message(cell):
    with pytest.raises(ValueError, match=r"^expected x with 3 features \(input_size\), got 7$"):
        cell(torch.randn(B, 7))
    with pytest.raises(ValueError, match=r"^expected x of shape \(B, E\), got shape \(2, 5, 3\)$"):
        cell(torch.randn(2, 5, 3))


def test_wrong_state_shape_messages():
    with pytest.raises(ValueError, match=r"^state h must have shape \(B, H\) = \(5, 4\), got \(5, 3\)$"):
        GRUCell(E, H)(torch.randn(B, E), torch.randn(B, 3))
    with pytest.raises(ValueError, match=r"^state c must have shape \(B, H\) = \(5, 4\), got \(1, 4\)$"):
        LSTMCell(E, H)(torch.randn(B, E), (torch.randn(B, H), torch.randn(1, H)))


P = 2  # proj_size


def test_projected_lstm_cell_matches_one_step_of_torch_lstm():
    cell = LSTMCell(E, H, proj_size=P)
    reference = nn.LSTM(E, H, proj_size=P)  # torch.nn.LSTMCell has no projection: one step of the layer
    with torch.no_grad():
        for name, p in cell.named_parameters():
            getattr(reference, f"{name}_l0").copy_(p)
    x = torch.randn(B, E, requires_grad=True)
    state = LSTMState(torch.randn(B, P), torch.randn(B, H))

    out = cell(x, state)
    _, (h_n, c_n) = reference(x[None], (state.h[None], state.c[None]))
    assert out.h.shape == (B, P) and out.c.shape == (B, H)
    assert_close(out.h, h_n[0], **EXACT)
    assert_close(out.c, c_n[0], **EXACT)

    grads = torch.autograd.grad((out.h * out.h.cos()).sum() + out.c.sum(), [x, *cell.parameters()])
    expected_grads = torch.autograd.grad((h_n * h_n.cos()).sum() + c_n.sum(), [x, *reference.parameters()])
    assert [name for name, _ in cell.named_parameters()] == [
        "weight_ih",
        "weight_hh",
        "bias_ih",
        "bias_hh",
        "weight_hr",
    ]
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_close(grad, expected_grad, **EXACT)


def test_projected_lstm_parameter_shapes_and_zero_state():
    cell = LSTMCell(E, H, proj_size=P, bias=False)
    assert {name: tuple(p.shape) for name, p in cell.named_parameters()} == {
        "weight_ih": (4 * H, E),
        "weight_hh": (4 * H, P),
        "weight_hr": (P, H),
    }
    x = torch.randn(B, E)
    assert_close(cell(x).h, cell(x, (torch.zeros(B, P), torch.zeros(B, H))).h, **EXACT)


def test_projected_lstm_gradcheck():
    cell = LSTMCell(2, 3, proj_size=1)
    names = [name for name, _ in cell.named_parameters()]
    x, h, c = torch.randn(2, 2), torch.randn(2, 1), torch.randn(2, 3)
    assert torch.autograd.gradcheck(
        lambda x, h, c, *params: tuple(
            torch.func.functional_call(cell, dict(zip(names, params, strict=True)), (x, (h, c)))
        ),
        tuple(t.requires_grad_() for t in (x, h, c, *(p.detach().clone() for p in cell.parameters()))),
    )


def assert_orthogonal_blocks(weight_hh, num_gates):
    for block in weight_hh.chunk(num_gates):  # (H, R) per gate
        rows, cols = block.shape
        # square: W W^T = W^T W = I; taller than wide (H, P): orthonormal columns, W^T W = I
        assert_close(block.T @ block, torch.eye(cols), **EXACT)
        if rows == cols:
            assert_close(block @ block.T, torch.eye(rows), **EXACT)


@pytest.mark.parametrize(
    "make",
    [
        lambda init: RNNCell(E, H, recurrent_init=init),
        lambda init: LSTMCell(E, H, recurrent_init=init),
        lambda init: LSTMCell(E, H, proj_size=P, recurrent_init=init),
        lambda init: GRUCell(E, H, variant="textbook", recurrent_init=init),
    ],
    ids=["rnn", "lstm", "lstm_proj", "gru"],
)
def test_orthogonal_recurrent_init_makes_each_gate_block_orthogonal(make):
    cell = make("orthogonal")
    assert_orthogonal_blocks(cell.weight_hh, cell.num_gates)
    bound = H**-0.5
    for name, p in cell.named_parameters():
        if name != "weight_hh":
            shift = 1.0 if name == "bias_ih" else 0.0  # LSTMCell's default forget_bias
            assert p.min() >= -bound and p.max() <= bound + shift, name
    uniform = make("uniform")
    with pytest.raises(AssertionError):
        assert_orthogonal_blocks(uniform.weight_hh, uniform.num_gates)
    assert uniform.weight_hh.abs().max() <= bound


def test_orthogonal_init_keeps_forget_bias():
    torch.manual_seed(3)
    cell = LSTMCell(E, H, forget_bias=2.0, recurrent_init="orthogonal")
    assert cell.bias_ih[H : 2 * H].min() >= 2.0 - H**-0.5
    assert cell.bias_ih[:H].max() <= H**-0.5


def gru_with_dropped_h(x, h, h_in, cell):
    """GRU equations with h_in = h * mask in every recurrent matmul and the full h in the interpolation."""
    W_ir, W_iz, W_in = cell.weight_ih.chunk(3)
    W_hr, W_hz, W_hn = cell.weight_hh.chunk(3)
    b_ir, b_iz, b_in = cell.bias_ih.chunk(3)
    b_hr, b_hz, b_hn = cell.bias_hh.chunk(3)
    r = torch.sigmoid(x @ W_ir.T + b_ir + h_in @ W_hr.T + b_hr)
    z = torch.sigmoid(x @ W_iz.T + b_iz + h_in @ W_hz.T + b_hz)
    if cell.variant == "textbook":
        h_tilde = torch.tanh(x @ W_in.T + b_in + (r * h_in) @ W_hn.T + b_hn)
        return (1 - z) * h + z * h_tilde
    n = torch.tanh(x @ W_in.T + b_in + r * (h_in @ W_hn.T + b_hn))
    return (1 - z) * n + z * h


@pytest.mark.parametrize("variant", ["reset_after", "textbook"])
def test_gru_recurrence_h_mask_drops_only_the_matmul_inputs(variant):
    cell = GRUCell(E, H, variant=variant)
    x, h = torch.randn(B, E), torch.randn(B, H)
    mask = torch.bernoulli(torch.full((B, H), 0.5)) * 2.0
    out = cell.recurrence(h_mask=mask)(cell.input_projection(x), h)
    assert_close(out, gru_with_dropped_h(x, h, h * mask, cell), **EXACT)
    assert_close(cell.recurrence()(cell.input_projection(x), h), gru_with_dropped_h(x, h, h, cell), **EXACT)


@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm", "lstm_proj"])
def test_h_mask_equals_masking_h_where_h_enters_only_through_w_hh(kind):
    cell = LSTMCell(E, H, proj_size=P) if kind == "lstm_proj" else TORCH_EQUIVALENTS[kind][0](True)
    h = torch.randn(B, cell.weight_hh.shape[1])
    mask = torch.bernoulli(torch.full_like(h, 0.5)) * 2.0
    if kind == "rnn_tanh":
        state, masked_state = h, h * mask
    else:
        c = torch.randn(B, H)
        state, masked_state = LSTMState(h, c), LSTMState(h * mask, c)  # c_{t-1} is never masked
    xw = cell.input_projection(torch.randn(B, E))
    out, expected = cell.recurrence(h_mask=mask)(xw, state), cell.step(xw, masked_state)
    for part, expected_part in zip(state_parts(out), state_parts(expected), strict=True):
        assert_close(part, expected_part, **EXACT)


def test_cell_extra_repr_shows_options():
    assert repr(LSTMCell(E, H, proj_size=P, recurrent_init="orthogonal")) == (
        "LSTMCell(3, 4, bias=True, recurrent_init='orthogonal', forget_bias=1.0, proj_size=2)"
    )
    assert repr(GRUCell(E, H)) == "GRUCell(3, 4, bias=True, variant='reset_after')"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LSTMCell(E, H, proj_size=H), r"proj_size \(4\) must be an integer >= 0 and <= 3"),
        (lambda: LSTMCell(E, H, proj_size=-1), r"proj_size \(-1\) must be an integer >= 0 and <= 3"),
        (
            lambda: GRUCell(E, H, recurrent_init="identity"),
            r"recurrent_init \('identity'\) must be one of 'uniform', 'orthogonal'",
        ),
        (
            lambda: LSTMCell(E, H, proj_size=P).to_torch(),
            r"torch.nn.LSTMCell has no projection; this cell has proj_size=2",
        ),
    ],
)
def test_projection_and_init_errors(make, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make()


def test_projected_state_shape_messages():
    cell = LSTMCell(E, H, proj_size=P)
    x = torch.randn(B, E)
    with pytest.raises(ValueError, match=r"^state h must have shape \(B, proj_size\) = \(5, 2\), got \(5, 4\)$"):
        cell(x, (torch.zeros(B, H), torch.zeros(B, H)))
    with pytest.raises(ValueError, match=r"^state c must have shape \(B, H\) = \(5, 4\), got \(5, 2\)$"):
        cell(x, (torch.zeros(B, P), torch.zeros(B, P)))
