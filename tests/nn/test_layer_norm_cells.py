"""LayerNormLSTMCell and LayerNormGRUCell against transcriptions of Ba et al.'s equations, and against LN's
invariances to re-scaling (Ba et al., 2016, Table 1)."""

import pytest
import torch
from torch.testing import assert_close

from seqlab.nn.cells import GRUCell, LSTMCell, LSTMState, flip_update_gate
from seqlab.nn.layer_norm_cells import LayerNormGRUCell, LayerNormLSTMCell

E, H, B, T = 3, 4, 5, 3
EXACT = {"atol": 1e-10, "rtol": 0.0}
KINDS = ("lstm", "gru_reset_after", "gru_textbook")
PLAIN_PARAMETERS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


@pytest.fixture(autouse=True)
def _float64():
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def make_cell(kind, *, input_size=E, hidden_size=H, **options):
    if kind == "lstm":
        return LayerNormLSTMCell(input_size, hidden_size, **options)
    return LayerNormGRUCell(input_size, hidden_size, variant=kind.removeprefix("gru_"), **options)


def randomise(cell):
    """Random gains and shifts too, so that a misplaced or missing one shows."""
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(torch.randn_like(p))
    return cell


def random_state(kind, batch=B, hidden=H):
    if kind == "lstm":
        return LSTMState(torch.randn(batch, hidden), torch.randn(batch, hidden))
    return torch.randn(batch, hidden)


def hidden(state):
    return state.h if isinstance(state, LSTMState) else state


def run(cell, xs, state):
    """Per-step forward over xs (T, B, E); returns every step's h stacked (T, B, H) and the final state."""
    outputs = []
    for x_t in xs:
        state = cell(x_t, state)
        outputs.append(hidden(state))
    return torch.stack(outputs), state


def ln(z, gain, shift, eps):
    """Ba et al.'s LN written out: statistics over the last dimension, biased variance."""
    mu = z.sum(-1, keepdim=True) / z.shape[-1]
    var = ((z - mu) ** 2).sum(-1, keepdim=True) / z.shape[-1]
    out = gain * (z - mu) / torch.sqrt(var + eps)
    return out if shift is None else out + shift


def lstm_transcription(x, h, c, cell, h_mask=1.0):
    """Ba et al.'s LN-LSTM, line by line, in torch's gate order i, f, g, o; h_mask drops h_{t-1} in W_hh."""
    eps = cell.eps
    pre = ln(x @ cell.weight_ih.T, cell.gain_ih, cell.bias_ih, eps) + ln(
        (h * h_mask) @ cell.weight_hh.T, cell.gain_hh, cell.bias_hh, eps
    )
    i, f, g, o = pre[:, :H], pre[:, H : 2 * H], pre[:, 2 * H : 3 * H], pre[:, 3 * H :]
    c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h_t = torch.sigmoid(o) * torch.tanh(ln(c_t, cell.gain_c, cell.bias_c, eps))
    return h_t, c_t


def gru_transcription(x, h, cell, h_mask=1.0):
    """The LN-GRU, line by line: (r, z) rows and n rows normalised separately in each term; h_mask drops
    h_{t-1} where it enters the recurrent matmuls, not in the interpolation."""
    eps, rz, n = cell.eps, slice(0, 2 * H), slice(2 * H, 3 * H)
    W_i, W_h, g_i, g_h = cell.weight_ih, cell.weight_hh, cell.gain_ih, cell.gain_hh
    b_i = cell.bias_ih if cell.bias else torch.zeros(3 * H)
    b_h = cell.bias_hh if cell.bias else torch.zeros(3 * H)
    h_in = h * h_mask
    input_rz = ln(x @ W_i[rz].T, g_i[rz], b_i[rz], eps)
    gates = torch.sigmoid(input_rz + ln(h_in @ W_h[rz].T, g_h[rz], b_h[rz], eps))
    r, z = gates[:, :H], gates[:, H:]
    if cell.variant == "reset_after":
        candidate = torch.tanh(ln(x @ W_i[n].T, g_i[n], b_i[n], eps) + r * ln(h_in @ W_h[n].T, g_h[n], b_h[n], eps))
        return (1 - z) * candidate + z * h
    candidate = torch.tanh(ln(x @ W_i[n].T, g_i[n], b_i[n], eps) + ln((r * h_in) @ W_h[n].T, g_h[n], b_h[n], eps))
    return (1 - z) * h + z * candidate  # the seeds' z weights the candidate


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_matches_equation_transcription_over_steps(bias):
    cell = randomise(LayerNormLSTMCell(E, H, bias=bias))
    xs, (h, c) = torch.randn(T, B, E), random_state("lstm")
    state = LSTMState(h, c)
    for x_t in xs:
        state = cell(x_t, state)
        h, c = lstm_transcription(x_t, h, c, cell)
        assert_close(state.h, h, **EXACT)
        assert_close(state.c, c, **EXACT)
    zeros = torch.zeros(B, H)
    assert_close(cell(xs[0]), LSTMState(*lstm_transcription(xs[0], zeros, zeros, cell)), **EXACT)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("variant", ["reset_after", "textbook"])
def test_gru_matches_equation_transcription_over_steps(variant, bias):
    cell = randomise(LayerNormGRUCell(E, H, variant=variant, bias=bias))
    xs, h = torch.randn(T, B, E), random_state("gru")
    state = h
    for x_t in xs:
        state = cell(x_t, state)
        h = gru_transcription(x_t, h, cell)
        assert_close(state, h, **EXACT)
    assert_close(cell(xs[0]), gru_transcription(xs[0], torch.zeros(B, H), cell), **EXACT)


@pytest.mark.parametrize("kind", KINDS)
def test_recurrence_applies_variational_mask_to_recurrent_matmuls_only(kind):
    cell = randomise(make_cell(kind))
    x, state = torch.randn(B, E), random_state(kind)
    h_mask = torch.bernoulli(torch.full((B, H), 0.5)) / 0.5  # (B, H), as a layer draws it once per sequence
    out = cell.recurrence(h_mask=h_mask)(cell.input_projection(x), state)
    if kind == "lstm":
        assert_close(out, LSTMState(*lstm_transcription(x, *state, cell, h_mask)), **EXACT)
    else:
        assert_close(out, gru_transcription(x, state, cell, h_mask), **EXACT)
    assert (hidden(out) - hidden(cell(x, state))).abs().max() > 1e-3


def test_gru_variants_differ_only_in_where_r_applies():
    reset_after = randomise(make_cell("gru_reset_after"))
    textbook = make_cell("gru_textbook")
    textbook.load_state_dict(flip_update_gate(reset_after.state_dict(), H))
    x, h = torch.randn(B, E), torch.randn(B, H)
    assert (textbook(x, h) - reset_after(x, h)).abs().max() > 1e-3
    # With gain_hn = 0 the recurrent n term is the constant bias_hn; zero that too and r_t acts on nothing.
    with torch.no_grad():
        for cell in (textbook, reset_after):
            cell.gain_hh[2 * H :] = 0.0
            cell.bias_hh[2 * H :] = 0.0
    assert_close(textbook(x, h), reset_after(x, h), **EXACT)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck_two_steps_all_parameters(kind, bias):
    cell = randomise(make_cell(kind, input_size=2, hidden_size=3, bias=bias))
    names = [name for name, _ in cell.named_parameters()]
    xs = torch.randn(2, 2, 2, requires_grad=True)  # (T, B, E)
    state = random_state(kind, batch=2, hidden=3)
    state_leaves = [s.requires_grad_() for s in (state if kind == "lstm" else (state,))]

    def two_steps(xs, *leaves_and_params):
        leaves, params = leaves_and_params[: len(state_leaves)], leaves_and_params[len(state_leaves) :]
        s = LSTMState(*leaves) if kind == "lstm" else leaves[0]
        for x_t in xs:
            s = torch.func.functional_call(cell, dict(zip(names, params, strict=True)), (x_t, s))
        return tuple(s) if kind == "lstm" else s

    params = [p.detach().clone().requires_grad_() for p in cell.parameters()]
    assert torch.autograd.gradcheck(two_steps, (xs, *state_leaves, *params))


@pytest.mark.parametrize("kind", KINDS)
def test_hoisted_projection_and_recurrence_equal_forward(kind):
    cell = randomise(make_cell(kind))
    xs, state = torch.randn(T, B, E), random_state(kind)
    xw = cell.input_projection(xs)  # every step at once, as a layer does
    assert xw.shape == (T, B, cell.num_gates * H)
    assert_close(hidden(cell.step(xw[0], state)), hidden(cell(xs[0], state)), **EXACT)
    step = cell.recurrence()
    expected_outputs, expected_final = run(cell, xs, state)
    outputs = []
    for xw_t in xw.unbind(0):
        state = step(xw_t, state)
        outputs.append(hidden(state))
    assert_close(torch.stack(outputs), expected_outputs, **EXACT)
    assert_close(state, expected_final, **EXACT)


def test_lstm_input_term_is_normalised_over_all_four_gates():
    cell = LayerNormLSTMCell(E, H, bias=False)  # gains 1 at init, no shifts
    x = torch.randn(B, E)
    xw = cell.input_projection(x)
    raw = x @ cell.weight_ih.T  # (B, 4H)
    sigma2 = raw.var(-1, unbiased=False, keepdim=True)
    assert_close(xw.mean(-1), torch.zeros(B), **EXACT)
    # LN with eps gives variance sigma^2 / (sigma^2 + eps), not exactly 1.
    assert_close(xw.var(-1, unbiased=False, keepdim=True), sigma2 / (sigma2 + cell.eps), **EXACT)
    assert (xw.view(B, 4, H).mean(-1).abs().max()) > 1e-3  # (B, gates, H): single gates are not centred


def test_gru_input_term_is_normalised_per_block():
    cell = LayerNormGRUCell(E, H, bias=False)
    x = torch.randn(B, E)
    xw = cell.input_projection(x)
    raw = x @ cell.weight_ih.T  # (B, 3H)
    for block in (slice(0, 2 * H), slice(2 * H, 3 * H)):
        sigma2 = raw[:, block].var(-1, unbiased=False, keepdim=True)
        assert_close(xw[:, block].mean(-1), torch.zeros(B), **EXACT)
        variance = xw[:, block].var(-1, unbiased=False, keepdim=True)
        assert_close(variance, sigma2 / (sigma2 + cell.eps), **EXACT)


def test_lstm_read_out_normalises_the_cell_state():
    # With zero input and recurrent terms every gate is sigmoid(0) = 1/2 and g = 0, so c_t = c_{t-1} / 2 and
    # h_t = tanh(LN(c_t)) / 2: LN(c_t) = atanh(2 h_t) must be standardised while c_t itself is carried as is.
    cell = LayerNormLSTMCell(E, H, bias=False)
    with torch.no_grad():
        cell.weight_ih.zero_()
        cell.weight_hh.zero_()
    c = torch.randn(B, H)
    h_t, c_t = cell(torch.randn(B, E), LSTMState(torch.randn(B, H), c))
    assert_close(c_t, c / 2, **EXACT)
    normalised = torch.atanh(2 * h_t)
    sigma2 = c_t.var(-1, unbiased=False, keepdim=True)
    assert_close(normalised.mean(-1), torch.zeros(B), **EXACT)
    assert_close(normalised.var(-1, unbiased=False, keepdim=True), sigma2 / (sigma2 + cell.eps), **EXACT)


@pytest.mark.parametrize("what", ["weight_hh", "weight_ih", "input"])
@pytest.mark.parametrize("kind", KINDS)
def test_rescaling_invariance(kind, what):
    """Ba et al., Table 1: LN is invariant to re-scaling a weight matrix and a single training case."""
    # A tiny eps: LN_eps(a z) = LN_{eps / a^2}(z), so eps alone breaks the invariance at the 1e-5 level.
    cell = randomise(make_cell(kind, eps=1e-14))
    # The same weights without layer normalisation change under the same re-scaling: the check has teeth.
    plain = LSTMCell(E, H) if kind == "lstm" else GRUCell(E, H, variant=cell.variant)
    plain.load_state_dict({name: getattr(cell, name) for name in PLAIN_PARAMETERS})
    xs, state = torch.randn(T, B, E), random_state(kind)
    expected_outputs, _ = run(cell, xs, state)
    plain_outputs, _ = run(plain, xs, state)
    if what == "input":
        xs = 3.7 * xs
    else:
        with torch.no_grad():
            getattr(cell, what).mul_(3.7)
            getattr(plain, what).mul_(3.7)
    outputs, _ = run(cell, xs, state)
    assert_close(outputs, expected_outputs, atol=1e-9, rtol=0.0)
    rescaled_plain_outputs, _ = run(plain, xs, state)
    assert (rescaled_plain_outputs - plain_outputs).abs().max() > 1e-3


def test_lstm_is_not_invariant_to_rescaling_one_gate_block():
    # Statistics over the whole 4H vector (Ba et al.), not per gate: scaling only the i rows of W_hh matters.
    cell = randomise(LayerNormLSTMCell(E, H, eps=1e-14))
    xs, state = torch.randn(T, B, E), random_state("lstm")
    expected_outputs, _ = run(cell, xs, state)
    with torch.no_grad():
        cell.weight_hh[:H].mul_(3.7)
    outputs, _ = run(cell, xs, state)
    assert (outputs - expected_outputs).abs().max() > 1e-3


@pytest.mark.parametrize("variant", ["reset_after", "textbook"])
def test_gru_blocks_are_normalised_separately(variant):
    cell = randomise(LayerNormGRUCell(E, H, variant=variant, eps=1e-14))
    xs, state = torch.randn(T, B, E), random_state("gru")
    expected_outputs, _ = run(cell, xs, state)
    with torch.no_grad():
        cell.weight_hh[2 * H :].mul_(3.7)  # the n block alone: its own LN absorbs the scale
        cell.weight_ih[: 2 * H].mul_(0.3)  # the (r, z) block alone
    outputs, _ = run(cell, xs, state)
    assert_close(outputs, expected_outputs, atol=1e-9, rtol=0.0)
    with torch.no_grad():
        cell.weight_hh[:H].mul_(3.7)  # r rows without the z rows share one LN: this one matters
    outputs, _ = run(cell, xs, state)
    assert (outputs - expected_outputs).abs().max() > 1e-3


def test_initialisation_and_parameter_layout():
    cell = LayerNormLSTMCell(E, H, forget_bias=1.5)
    shapes = {name: tuple(p.shape) for name, p in cell.named_parameters()}
    assert shapes == {
        "weight_ih": (4 * H, E),
        "weight_hh": (4 * H, H),
        "gain_ih": (4 * H,),
        "gain_hh": (4 * H,),
        "bias_ih": (4 * H,),
        "bias_hh": (4 * H,),
        "gain_c": (H,),
        "bias_c": (H,),
    }
    expected_bias_ih = torch.zeros(4 * H)
    expected_bias_ih[H : 2 * H] = 1.5  # gate order i, f, g, o
    assert_close(cell.bias_ih, expected_bias_ih, atol=0.0, rtol=0.0)
    for name in ("gain_ih", "gain_hh", "gain_c"):
        assert_close(getattr(cell, name), torch.ones_like(getattr(cell, name)), atol=0.0, rtol=0.0)
    for name in ("bias_hh", "bias_c"):
        assert_close(getattr(cell, name), torch.zeros_like(getattr(cell, name)), atol=0.0, rtol=0.0)
    assert cell.weight_hh.abs().max() <= H**-0.5
    assert [name for name, _ in LayerNormLSTMCell(E, H, bias=False).named_parameters()] == [
        "weight_ih",
        "weight_hh",
        "gain_ih",
        "gain_hh",
        "gain_c",
    ]
    gru = LayerNormGRUCell(E, H, variant="textbook", dtype=torch.float32)
    assert {name: tuple(p.shape) for name, p in gru.named_parameters()} == {
        name: (3 * H, *shape[1:]) for name, shape in shapes.items() if not name.endswith("_c")
    }
    assert all(p.dtype == torch.float32 for p in gru.parameters())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: LayerNormGRUCell(E, H, variant="cho"),
            r"^variant \('cho'\) must be one of 'reset_after', 'textbook'$",
        ),
        (lambda: LayerNormLSTMCell(0, H), r"^input_size \(0\) must be an integer >= 1$"),
        (lambda: LayerNormGRUCell(E, H, eps=0.0), r"^eps \(0.0\) must be a finite number > 0.0$"),
    ],
)
def test_bad_arguments_raise(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("kind", KINDS)
def test_bad_shapes_raise(kind):
    cell = make_cell(kind)
    with pytest.raises(ValueError, match=r"^expected x with 3 features \(input_size\), got 7$"):
        cell(torch.randn(B, 7))
    with pytest.raises(ValueError, match=r"^expected x of shape \(B, E\), got shape \(2, 5, 3\)$"):
        cell(torch.randn(2, B, E))
    bad = torch.randn(B + 1, H)
    with pytest.raises(ValueError, match=r"^state h must have shape \(B, H\) = \(5, 4\), got \(6, 4\)$"):
        cell(torch.randn(B, E), LSTMState(bad, torch.randn(B, H)) if kind == "lstm" else bad)
    if kind == "lstm":
        with pytest.raises(ValueError, match=r"^state c must have shape \(B, H\) = \(5, 4\), got \(5, 3\)$"):
            cell(torch.randn(B, E), (torch.randn(B, H), torch.randn(B, 3)))


@pytest.mark.parametrize("cell_class", [LayerNormLSTMCell, LayerNormGRUCell])
def test_orthogonal_recurrent_init_makes_every_gate_block_orthogonal(cell_class):
    cell = cell_class(E, H, recurrent_init="orthogonal")
    for block in cell.weight_hh.detach().split(H):  # (H, H) per gate
        torch.testing.assert_close(block @ block.T, torch.eye(H, dtype=block.dtype))
    assert (cell.gain_ih == 1).all() and (cell.gain_hh == 1).all()
