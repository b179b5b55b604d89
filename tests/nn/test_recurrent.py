"""RNN, LSTM and GRU layers against torch.nn layers on packed sequences, and fused path == reference path."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.testing import assert_close

from seqlab.nn.cells import GRUCell, LSTMState
from seqlab.nn.recurrent import GRU, LSTM, RNN, RecurrentOutput

E, H, B, T = 3, 4, 4, 5
LENGTHS = [5, 2, 4, 1]  # unsorted, with the longest == T and a length-1 sequence
EXACT = {"atol": 1e-10, "rtol": 0.0}

# kind -> (seqlab class, options, torch.nn class, options)
KINDS = {
    "rnn_tanh": (RNN, {}, nn.RNN, {}),
    "rnn_relu": (RNN, {"nonlinearity": "relu"}, nn.RNN, {"nonlinearity": "relu"}),
    "lstm": (LSTM, {}, nn.LSTM, {}),
    "gru": (GRU, {}, nn.GRU, {}),
}
ALL_KINDS = [*KINDS, "gru_textbook"]


@pytest.fixture(autouse=True)
def _float64():
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def make_layer(kind, **options):
    if kind == "gru_textbook":
        return GRU(E, H, variant="textbook", **options)
    cls, cell_options, _, _ = KINDS[kind]
    return cls(E, H, **cell_options, **options)


def torch_copy(layer, kind):
    """The torch.nn layer with the seqlab layer's weights, copied by torch's parameter names."""
    _, _, torch_cls, options = KINDS[kind]
    C = 2 if layer.bidirectional else 1
    reference = torch_cls(
        E,
        H,
        num_layers=layer.num_layers,
        bidirectional=layer.bidirectional,
        batch_first=layer.batch_first,
        **options,
    )
    with torch.no_grad():
        for layer_index in range(layer.num_layers):
            for d, suffix in enumerate(["", "_reverse"][:C]):
                cell = layer.cells[layer_index * C + d]
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(reference, f"{name}_l{layer_index}{suffix}").copy_(getattr(cell, name))
    return reference


def grads_by_torch_name(layer):
    C = 2 if layer.bidirectional else 1
    grads = {}
    for index, cell in enumerate(layer.cells):
        suffix = f"_l{index // C}" + ("_reverse" if index % C else "")
        grads.update({name + suffix: p.grad for name, p in cell.named_parameters()})
    return grads


def random_state(layer, batch=B):
    C = 2 if layer.bidirectional else 1
    h = torch.randn(layer.num_layers * C, batch, H)
    return LSTMState(h, torch.randn_like(h)) if isinstance(layer, LSTM) else h


def state_parts(state):
    return tuple(state) if isinstance(state, tuple) else (state,)


def weighted_loss(outputs, state, weights):
    """A loss that reaches every output and final state with distinct random weights."""
    return sum((part * w).sum() for part, w in zip((outputs, *state_parts(state)), weights, strict=False))


@pytest.mark.parametrize("use_fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("kind", list(KINDS))
def test_layer_matches_torch_on_packed_sequences(kind, num_layers, bidirectional, use_fused):
    layer = make_layer(kind, num_layers=num_layers, bidirectional=bidirectional, use_fused=use_fused)
    assert layer.fused is use_fused
    reference = torch_copy(layer, kind)
    x = torch.randn(B, T, E, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    lengths = torch.tensor(LENGTHS)
    state = random_state(layer)

    out = layer(x, lengths, state)
    packed = pack_padded_sequence(x_ref, lengths, batch_first=True, enforce_sorted=False)
    packed_out, expected_state = reference(packed, tuple(state) if isinstance(state, LSTMState) else state)
    expected_outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=T)

    assert_close(out.outputs, expected_outputs, **EXACT)
    for part, expected in zip(state_parts(out.state), state_parts(expected_state), strict=True):
        assert_close(part, expected, **EXACT)

    weights = [torch.randn_like(t) for t in (out.outputs, *state_parts(out.state))]
    weighted_loss(out.outputs, out.state, weights).backward()
    weighted_loss(expected_outputs, expected_state, weights).backward()
    assert_close(x.grad, x_ref.grad, **EXACT)
    grads = grads_by_torch_name(layer)
    assert grads.keys() == dict(reference.named_parameters()).keys()
    for name, p in reference.named_parameters():
        assert_close(grads[name], p.grad, **EXACT, msg=name)


@pytest.mark.parametrize("use_fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_time_major_without_lengths_or_state_matches_torch(kind, use_fused):
    layer = make_layer(kind, num_layers=2, bidirectional=True, batch_first=False, use_fused=use_fused)
    reference = torch_copy(layer, kind)
    x = torch.randn(T, B, E)
    out = layer(x)
    expected_outputs, expected_state = reference(x)
    assert out.outputs.shape == (T, B, 2 * H)
    assert_close(out.outputs, expected_outputs, **EXACT)
    for part, expected in zip(state_parts(out.state), state_parts(expected_state), strict=True):
        assert_close(part, expected, **EXACT)


@pytest.mark.parametrize("kind", list(KINDS))
def test_fused_path_equals_reference_path(kind):
    fused = make_layer(kind, num_layers=2, bidirectional=True, use_fused=True)
    reference = make_layer(kind, num_layers=2, bidirectional=True, use_fused=False)
    reference.load_state_dict(fused.state_dict())
    assert (fused.fused, reference.fused) == (True, False)
    x, lengths, state = torch.randn(B, T, E), torch.tensor(LENGTHS), random_state(fused)
    outs = [layer(x, lengths, state) for layer in (fused, reference)]
    assert_close(outs[0].outputs, outs[1].outputs, **EXACT)
    for a, b in zip(state_parts(outs[0].state), state_parts(outs[1].state), strict=True):
        assert_close(a, b, **EXACT)
    weights = [torch.randn_like(t) for t in (outs[0].outputs, *state_parts(outs[0].state))]
    for out in outs:
        weighted_loss(out.outputs, out.state, weights).backward()
    for (name, p), q in zip(fused.named_parameters(), reference.parameters(), strict=True):
        assert_close(p.grad, q.grad, **EXACT, msg=name)


def textbook_gru_by_cells(cells, x, length):
    """One sequence x (T, E) through a bidirectional textbook GRU layer, step by step with the cells."""
    forward_cell, backward_cell = cells
    h_f, h_b = torch.zeros(1, H), torch.zeros(1, H)
    forward_steps, backward_steps = [], []
    for t in range(length):
        h_f = forward_cell(x[t : t + 1], h_f)
        forward_steps.append(h_f)
    for t in reversed(range(length)):
        h_b = backward_cell(x[t : t + 1], h_b)
        backward_steps.insert(0, h_b)
    outputs = torch.cat([torch.cat(forward_steps), torch.cat(backward_steps)], dim=1)  # (length, 2H)
    return outputs, torch.cat([h_f, h_b])  # (2, H)


def test_textbook_gru_layer_matches_cell_by_cell_loop():
    layer = GRU(E, H, variant="textbook", bidirectional=True)
    assert all(isinstance(cell, GRUCell) and cell.variant == "textbook" for cell in layer.cells)
    x = torch.randn(B, T, E)
    out = layer(x, torch.tensor(LENGTHS))
    for b, length in enumerate(LENGTHS):
        expected_outputs, expected_state = textbook_gru_by_cells(layer.cells, x[b], length)
        assert_close(out.outputs[b, :length], expected_outputs, **EXACT)
        assert_close(out.state[:, b], expected_state, **EXACT)


@pytest.mark.parametrize("use_fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_padding_changes_nothing_and_padded_outputs_are_zero(kind, use_fused):
    layer = make_layer(kind, num_layers=2, bidirectional=True, use_fused=use_fused)
    x, state = torch.randn(B, T, E), random_state(layer)
    out = layer(x, torch.tensor(LENGTHS), state)
    for b, length in enumerate(LENGTHS):
        assert torch.all(out.outputs[b, length:] == 0.0)
        assert out.outputs[b, :length].abs().sum() > 0.0
        alone_state = tuple(part[:, b : b + 1] for part in state_parts(state))
        alone = layer(x[b : b + 1, :length], state=LSTMState(*alone_state) if kind == "lstm" else alone_state[0])
        assert_close(out.outputs[b : b + 1, :length], alone.outputs, **EXACT)
        for part, alone_part in zip(state_parts(out.state), state_parts(alone.state), strict=True):
            assert_close(part[:, b : b + 1], alone_part, **EXACT)


@pytest.mark.parametrize("use_fused", [True, False], ids=["fused", "reference"])
def test_dropout_between_layers_only_in_training(use_fused):
    layer = LSTM(E, H, num_layers=2, dropout=0.5, use_fused=use_fused)
    no_dropout = LSTM(E, H, num_layers=2, dropout=0.0, use_fused=use_fused)
    no_dropout.load_state_dict(layer.state_dict())
    x = torch.randn(B, T, E)
    assert (layer(x).outputs - no_dropout(x).outputs).abs().max() > 1e-3  # active in training
    layer.eval()
    assert_close(layer(x).outputs, no_dropout(x).outputs, **EXACT)
    single = GRU(E, H, num_layers=1, dropout=0.5, use_fused=use_fused)
    assert_close(single(x).outputs, single.eval()(x).outputs, **EXACT)  # never after the last layer


def test_fused_property_reports_the_path():
    assert RNN(E, H).fused and LSTM(E, H).fused and GRU(E, H).fused
    assert not LSTM(E, H, use_fused=False).fused
    assert not GRU(E, H, variant="textbook").fused
    assert not GRU(E, H, variant="textbook", use_fused=True).fused


def test_state_dict_keys_are_cells_in_torch_order():
    layer = LSTM(E, H, num_layers=2, bidirectional=True, bias=False)
    assert list(layer.state_dict()) == [f"cells.{i}.{name}" for i in range(4) for name in ("weight_ih", "weight_hh")]
    assert layer.cells[2].weight_ih.shape == (4 * H, 2 * H)  # layer 1 reads both directions of layer 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_from_torch_to_torch_round_trip(kind):
    _, _, torch_cls, options = KINDS[kind]
    reference = torch_cls(E, H, num_layers=2, bidirectional=True, batch_first=True, dropout=0.25, **options)
    layer = type(make_layer(kind)).from_torch(reference)
    assert (layer.num_layers, layer.bidirectional, layer.dropout, layer.batch_first) == (2, True, 0.25, True)
    back = layer.to_torch()
    assert type(back) is torch_cls
    assert (back.num_layers, back.bidirectional, back.dropout, back.batch_first) == (2, True, 0.25, True)
    assert getattr(back, "nonlinearity", None) == getattr(reference, "nonlinearity", None)
    for (name, p), (ref_name, ref_p) in zip(back.named_parameters(), reference.named_parameters(), strict=True):
        assert name == ref_name
        assert_close(p, ref_p, atol=0.0, rtol=0.0)
    reference.eval()
    layer.eval()
    x = torch.randn(B, T, E)
    assert_close(layer(x).outputs, reference(x)[0], **EXACT)


def test_to_torch_and_from_torch_refusals():
    with pytest.raises(
        ValueError,
        match=r"^torch.nn.GRU implements only variant='reset_after'; this layer is variant='textbook'$",
    ):
        GRU(E, H, variant="textbook").to_torch()
    with pytest.raises(ValueError, match=r"^LSTM.from_torch expects torch.nn.LSTM, got GRU$"):
        LSTM.from_torch(nn.GRU(E, H))
    with pytest.raises(ValueError, match=r"^LSTM with proj_size > 0 is not supported, got proj_size=2$"):
        LSTM.from_torch(nn.LSTM(E, H, proj_size=2))


def test_returns_named_output():
    out = LSTM(E, H)(torch.randn(B, T, E))
    assert isinstance(out, RecurrentOutput) and isinstance(out.state, LSTMState)
    assert out.outputs.shape == (B, T, H) and out.state.h.shape == out.state.c.shape == (1, B, H)


@pytest.mark.parametrize("use_fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m(torch.randn(B, T, 7)), r"expected x with 3 features \(input_size\), got 7"),
        (lambda m: m(torch.randn(T, E)), r"expected x of shape \(B, T, E\), got shape \(5, 3\)"),
        (
            lambda m: m(torch.randn(B, T, E), torch.tensor([[5, 2, 4, 1]])),
            r"lengths must have shape \(B,\) = \(4,\), got \(1, 4\)",
        ),
        (
            lambda m: m(torch.randn(B, T, E), torch.tensor([5, 2, 0, 1])),
            r"lengths must be in \[1, T\] = \[1, 5\], got values from 0 to 5",
        ),
        (
            lambda m: m(torch.randn(B, T, E), torch.tensor([6, 2, 4, 1])),
            r"lengths must be in \[1, T\] = \[1, 5\], got values from 1 to 6",
        ),
        (
            lambda m: m(torch.randn(B, T, E), torch.tensor([5.0, 2, 4, 1])),
            r"lengths must be an integer tensor, got dtype torch.float64",
        ),
        (
            lambda m: m(torch.randn(B, T, E), state=torch.zeros(2, B, H)),
            r"state h must have shape \(L\*C, B, H\) = \(4, 4, 4\), got \(2, 4, 4\)",
        ),
    ],
)
def test_input_error_messages(call, message, use_fused):
    with pytest.raises(ValueError, match=f"^{message}$"):
        call(GRU(E, H, num_layers=2, bidirectional=True, use_fused=use_fused))


def test_lstm_state_error_names_the_part():
    layer = LSTM(E, H, batch_first=False)
    h = torch.zeros(1, B, H)
    with pytest.raises(ValueError, match=r"^state c must have shape \(L\*C, B, H\) = \(1, 4, 4\), got \(1, 3, 4\)$"):
        layer(torch.randn(T, B, E), state=(h, torch.zeros(1, 3, H)))
    with pytest.raises(ValueError, match=r"^expected x of shape \(T, B, E\), got shape \(5, 3\)$"):
        layer(torch.randn(T, E))
    with pytest.raises(ValueError, match=r"^LSTM state must be an \(h, c\) pair, got Tensor$"):
        layer(torch.randn(T, B, E), state=h)
    with pytest.raises(ValueError, match=r"^GRU state must be one tensor h, got LSTMState$"):
        GRU(E, H)(torch.randn(B, T, E), state=LSTMState(h, h))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RNN(E, H, num_layers=0), r"num_layers must be >= 1, got 0"),
        (lambda: LSTM(E, H, dropout=1.0), r"dropout must be in \[0, 1\), got 1.0"),
        (
            lambda: GRU(E, H, variant="minimal"),
            r"variant must be one of \('reset_after', 'textbook'\), got 'minimal'",
        ),
        (
            lambda: RNN(E, H, nonlinearity="gelu"),
            r"nonlinearity must be one of \('tanh', 'relu'\), got 'gelu'",
        ),
    ],
)
def test_bad_configuration_messages(make, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make()
