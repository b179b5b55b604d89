"""RNN, LSTM and GRU layers against torch.nn layers on packed sequences, and fused path == reference path."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.testing import assert_close

from seqlab.nn import recurrent_paths
from seqlab.nn.cells import GRUCell, LSTMState, flip_update_gate
from seqlab.nn.functional.fused_rnn import fused_cell
from seqlab.nn.layer_norm_cells import LayerNormGRUCell, LayerNormLSTMCell
from seqlab.nn.recurrent import GRU, LSTM, RNN, RecurrentOutput

E, H, B, T = 3, 4, 4, 5
P = 2  # proj_size
LENGTHS = [5, 2, 4, 1]  # unsorted, with the longest == T and a length-1 sequence
EXACT = {"atol": 1e-10, "rtol": 0.0}

# kind -> (seqlab class, options, torch.nn class, options)
KINDS = {
    "rnn_tanh": (RNN, {}, nn.RNN, {}),
    "rnn_relu": (RNN, {"nonlinearity": "relu"}, nn.RNN, {"nonlinearity": "relu"}),
    "lstm": (LSTM, {}, nn.LSTM, {}),
    "lstm_proj": (LSTM, {"proj_size": P}, nn.LSTM, {"proj_size": P}),
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
                for name, p in cell.named_parameters():
                    getattr(reference, f"{name}_l{layer_index}{suffix}").copy_(p)
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
    h = torch.randn(layer.num_layers * C, batch, layer.proj_size or H)
    return LSTMState(h, torch.randn(layer.num_layers * C, batch, H)) if isinstance(layer, LSTM) else h


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
    assert out.outputs.shape == (T, B, 2 * (P if kind == "lstm_proj" else H))
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


MERGES = {"concat": lambda f, b: torch.cat([f, b], dim=-1), "sum": torch.add, "mean": lambda f, b: (f + b) / 2}


def layer_by_cells(layer, x, length, state):
    """One sequence x (T, E) through every layer and direction, step by step with the cells' own forward;
    state holds the sequence's initial states, (L*C, 1, ...) each. Returns outputs (length, ...) and the
    final states (L*C, 1, ...) in the layer's cell order."""
    C = 2 if layer.bidirectional else 1
    layer_input, finals = x[:length], []
    for layer_index in range(layer.num_layers):
        directions = []
        for d in range(C):
            index = layer_index * C + d
            cell_state = LSTMState(*(part[index] for part in state)) if isinstance(state, tuple) else state[index]
            h_steps = {}
            for t in range(length) if d == 0 else reversed(range(length)):
                cell_state = layer.cells[index](layer_input[t : t + 1], cell_state)
                h_steps[t] = cell_state.h if isinstance(cell_state, LSTMState) else cell_state
            directions.append(torch.cat([h_steps[t] for t in range(length)]))  # (length, H)
            finals.append(cell_state)
        layer_input = MERGES[layer.merge_mode](*directions) if C == 2 else directions[0]
    if isinstance(state, tuple):
        return layer_input, LSTMState(*(torch.stack([s[i] for s in finals]) for i in range(2)))
    return layer_input, torch.stack(finals)


def assert_matches_cell_by_cell_loop(layer, x, lengths, state):
    out = layer(x, torch.tensor(lengths), state)
    for b, length in enumerate(lengths):
        alone_state = tuple(part[:, b : b + 1] for part in state_parts(state))
        alone_state = LSTMState(*alone_state) if isinstance(state, LSTMState) else alone_state[0]
        expected_outputs, expected_state = layer_by_cells(layer, x[b], length, alone_state)
        assert_close(out.outputs[b, :length], expected_outputs, **EXACT)
        assert torch.all(out.outputs[b, length:] == 0.0)
        for part, expected in zip(state_parts(out.state), state_parts(expected_state), strict=True):
            assert_close(part[:, b : b + 1], expected, **EXACT)


@pytest.mark.parametrize("merge_mode", ["concat", "mean"])
def test_textbook_gru_layer_matches_cell_by_cell_loop(merge_mode):
    layer = GRU(E, H, variant="textbook", bidirectional=True, num_layers=2, merge_mode=merge_mode)
    assert all(isinstance(cell, GRUCell) and cell.variant == "textbook" for cell in layer.cells)
    assert_matches_cell_by_cell_loop(layer, torch.randn(B, T, E), LENGTHS, random_state(layer))


def test_textbook_gru_layer_with_flipped_weights_equals_torch_gru_where_r_has_nothing_to_act_on():
    reference = nn.GRU(E, H, num_layers=2, bidirectional=True, batch_first=True)
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if name.startswith("weight_hh") or name.startswith("bias_hh"):
                p[2 * H :] = 0.0  # W_hn = 0, b_hn = 0
    torch_layout = {
        f"cells.{2 * layer + d}.{name}": getattr(reference, f"{name}_l{layer}{suffix}")
        for layer in range(2)
        for d, suffix in enumerate(["", "_reverse"])
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    }
    textbook = GRU(E, H, num_layers=2, bidirectional=True, variant="textbook")
    textbook.load_state_dict(flip_update_gate(torch_layout, H))
    x, lengths = torch.randn(B, T, E), torch.tensor(LENGTHS)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    expected, expected_h = reference(packed)
    expected, _ = pad_packed_sequence(expected, batch_first=True, total_length=T)
    out = textbook(x, lengths)
    assert_close(out.outputs, expected, **EXACT)
    assert_close(out.state, expected_h, **EXACT)


@pytest.mark.parametrize("kind", ["lstm", "gru", "gru_textbook"])
def test_layer_norm_layers_match_cell_by_cell_loop(kind):
    layer = make_layer(kind, num_layers=2, bidirectional=True, layer_norm=True, use_fused=True)
    expected_class = LayerNormLSTMCell if kind == "lstm" else LayerNormGRUCell
    assert all(type(cell) is expected_class for cell in layer.cells)
    if kind != "lstm":
        assert {cell.variant for cell in layer.cells} == {"textbook" if kind == "gru_textbook" else "reset_after"}
    assert not layer.fused
    assert_matches_cell_by_cell_loop(layer, torch.randn(B, T, E), LENGTHS, random_state(layer))


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
        alone = layer(
            x[b : b + 1, :length], state=LSTMState(*alone_state) if isinstance(layer, LSTM) else alone_state[0]
        )
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
    assert layer.proj_size == back.proj_size == reference.proj_size
    assert getattr(back, "nonlinearity", None) == getattr(reference, "nonlinearity", None)
    for (name, p), (ref_name, ref_p) in zip(back.named_parameters(), reference.named_parameters(), strict=True):
        assert name == ref_name
        assert_close(p, ref_p, atol=0.0, rtol=0.0)
    reference.eval()
    layer.eval()
    x = torch.randn(B, T, E)
    assert_close(layer(x).outputs, reference(x)[0], **EXACT)


def test_to_torch_and_from_torch_refusals():
    with pytest.raises(ValueError, match=r"^torch.nn.GRU has no equivalent of variant='textbook'$"):
        GRU(E, H, variant="textbook").to_torch()
    with pytest.raises(ValueError, match=r"^LSTM.from_torch expects torch.nn.LSTM, got GRU$"):
        LSTM.from_torch(nn.GRU(E, H))


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
            lambda m: m(torch.randn(B, T, E), torch.tensor([5, 2, 4, 1], device="meta")),
            r"lengths must be on the cpu or on x's device \(cpu\), got meta",
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


@pytest.mark.parametrize("use_fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("layer", [RNN, LSTM, GRU])
def test_an_empty_batch_with_lengths_gives_what_it_gives_without(layer, use_fused):
    model = layer(E, H, num_layers=2, bidirectional=True, use_fused=use_fused)
    with_lengths = model(torch.randn(0, T, E), torch.zeros(0, dtype=torch.long))
    without = model(torch.randn(0, T, E))
    assert with_lengths.outputs.shape == without.outputs.shape == (0, T, 2 * H)
    states = [s if isinstance(s, tuple) else (s,) for s in (with_lengths.state, without.state)]  # LSTM: (h, c)
    for a, b in zip(*states, strict=True):
        assert a.shape == b.shape == (4, 0, H)


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
        (lambda: RNN(E, H, num_layers=0), r"num_layers \(0\) must be an integer >= 1"),
        (lambda: LSTM(E, H, dropout=1.0), r"dropout \(1.0\) must be in \[0, 1\)"),
        (
            lambda: GRU(E, H, variant="minimal"),
            r"variant \('minimal'\) must be one of 'reset_after', 'textbook'",
        ),
        (
            lambda: RNN(E, H, nonlinearity="gelu"),
            r"nonlinearity \('gelu'\) must be one of 'tanh', 'relu'",
        ),
    ],
)
def test_bad_configuration_messages(make, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make()


def reverse_within_lengths(x, lengths):
    """x (B, T, ...) with each sequence's first lengths[b] steps in reverse order, padding left in place."""
    steps = torch.arange(x.shape[1])
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)  # (B, T)
    return x.gather(1, index[..., None].expand_as(x))


@pytest.mark.parametrize("use_fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("merge_mode", ["sum", "mean", "mul"])
@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm_proj", "gru", "gru_textbook"])
def test_one_layer_merge_modes_equal_merging_the_concat_outputs_by_hand(kind, merge_mode, use_fused):
    merged = make_layer(kind, bidirectional=True, merge_mode=merge_mode, use_fused=use_fused)
    concat = make_layer(kind, bidirectional=True, use_fused=False)
    concat.load_state_dict(merged.state_dict())
    assert merged.fused is (use_fused and kind != "gru_textbook")  # one layer: merged after the kernel
    x, lengths, state = torch.randn(B, T, E), torch.tensor(LENGTHS), random_state(merged)

    out, expected = merged(x, lengths, state), concat(x, lengths, state)
    forward, backward = expected.outputs.chunk(2, dim=-1)
    by_hand = {"sum": forward + backward, "mean": (forward + backward) / 2, "mul": forward * backward}[merge_mode]
    assert out.outputs.shape == (B, T, P if kind == "lstm_proj" else H)
    assert_close(out.outputs, by_hand, **EXACT)
    for part, expected_part in zip(state_parts(out.state), state_parts(expected.state), strict=True):
        assert_close(part, expected_part, **EXACT)
    for b, length in enumerate(LENGTHS):
        assert torch.all(out.outputs[b, length:] == 0.0)

    weights = torch.randn_like(by_hand)
    (out.outputs * weights).sum().backward()
    (by_hand * weights).sum().backward()
    for (name, p), q in zip(merged.named_parameters(), concat.parameters(), strict=True):
        assert_close(p.grad, q.grad, **EXACT, msg=name)


@pytest.mark.parametrize("kind", ["lstm_proj", "gru"])
def test_stacked_sum_merge_equals_a_stack_of_unidirectional_torch_layers(kind):
    """Keras semantics: every layer's two directions are summed before the next layer reads them."""
    layer = make_layer(kind, num_layers=2, bidirectional=True, merge_mode="sum")
    assert not layer.fused
    x, lengths = torch.randn(B, T, E), torch.tensor(LENGTHS)
    out = layer(x, lengths)

    _, _, torch_cls, options = KINDS[kind]
    layer_input, references, finals = x, [], []
    for index, cell in enumerate(layer.cells):
        reference = torch_cls(cell.input_size, H, batch_first=True, **options)
        with torch.no_grad():
            for name, p in cell.named_parameters():
                getattr(reference, f"{name}_l0").copy_(p)
        # The backward direction is a forward layer over each sequence reversed within its length.
        sequence = layer_input if index % 2 == 0 else reverse_within_lengths(layer_input, lengths)
        packed_out, final = reference(pack_padded_sequence(sequence, lengths, batch_first=True, enforce_sorted=False))
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=T)
        references.append(reference)
        finals.append(final)
        if index % 2 == 0:
            forward = outputs
        else:
            layer_input = forward + reverse_within_lengths(outputs, lengths)
    assert_close(out.outputs, layer_input, **EXACT)
    expected_state = [torch.cat(parts) for parts in zip(*map(state_parts, finals), strict=True)]
    for part, expected_part in zip(state_parts(out.state), expected_state, strict=True):
        assert_close(part, expected_part, **EXACT)

    weights = torch.randn_like(layer_input)
    (out.outputs * weights).sum().backward()
    (layer_input * weights).sum().backward()
    for cell, reference in zip(layer.cells, references, strict=True):
        for name, p in cell.named_parameters():
            assert_close(p.grad, getattr(reference, f"{name}_l0").grad, **EXACT, msg=name)


DROPOUT_KINDS = ["rnn_tanh", "lstm", "lstm_proj", "gru", "gru_textbook", "lstm_layer_norm", "gru_layer_norm"]


def make_dropout_layer(kind, **options):
    if kind.endswith("_layer_norm"):
        return make_layer(kind.removesuffix("_layer_norm"), layer_norm=True, **options)
    return make_layer(kind, **options)


@pytest.mark.parametrize("kind", DROPOUT_KINDS)
def test_recurrent_dropout_reuses_one_mask_per_sequence_at_every_step(kind):
    """Recover each sequence's masks from its first step, then replay the whole sequence with them."""
    p = 0.5
    layer = make_dropout_layer(kind, bidirectional=True, recurrent_dropout=p)
    assert layer.training and not layer.fused
    x = torch.randn(B, T, E, requires_grad=True)
    state = random_state(layer)
    out = layer(x, torch.tensor(LENGTHS), state)
    R = out.outputs.shape[-1] // 2
    masks = []
    for d, cell in enumerate(layer.cells):
        for b, length in enumerate(LENGTHS):
            first = 0 if d == 0 else length - 1
            # This output depends on x and W_hh only through the direction's first step, where a dropped
            # input unit gets no gradient and a dropped unit of h_0 leaves its column of W_hh without one.
            v = torch.randn(R)
            grad_x, grad_w = torch.autograd.grad(
                (out.outputs[b, first, d * R : (d + 1) * R] * v).sum(), [x, cell.weight_hh], retain_graph=True
            )
            x_mask = (grad_x[b, first] != 0).double() / (1 - p)  # (E,)
            h_mask = (grad_w.abs().sum(0) != 0).double() / (1 - p)  # (R,)
            masks.append(torch.cat([x_mask, h_mask]))

            step = cell.recurrence(h_mask=h_mask[None])
            cell_state = tuple(part[d, b : b + 1] for part in state_parts(state))
            cell_state = LSTMState(*cell_state) if isinstance(state, LSTMState) else cell_state[0]
            h_steps = {}
            for t in range(length) if d == 0 else reversed(range(length)):
                cell_state = step(cell.input_projection(x[b : b + 1, t] * x_mask), cell_state)
                h_steps[t] = cell_state.h if isinstance(cell_state, LSTMState) else cell_state
            replay = torch.cat([h_steps[t] for t in range(length)])
            assert_close(out.outputs[b, :length, d * R : (d + 1) * R], replay, **EXACT)
            for part, replay_part in zip(state_parts(out.state), state_parts(cell_state), strict=True):
                assert_close(part[d, b : b + 1], replay_part, **EXACT)
    masks = torch.stack(masks)  # (C*B, E + R)
    assert 0 < (masks == 0).sum() < masks.numel()  # some units dropped, some kept
    assert len({tuple(m.tolist()) for m in masks}) > len(masks) // 2  # drawn per sequence and direction


@pytest.mark.parametrize("kind", ["rnn_relu", *DROPOUT_KINDS[1:]])
def test_recurrent_dropout_only_in_training(kind):
    layer = make_dropout_layer(kind, num_layers=2, bidirectional=True, recurrent_dropout=0.5)
    plain = make_dropout_layer(kind, num_layers=2, bidirectional=True)
    plain.load_state_dict(layer.state_dict())
    x, lengths = torch.randn(B, T, E), torch.tensor(LENGTHS)
    assert (layer(x, lengths).outputs - plain(x, lengths).outputs).abs().max() > 1e-3
    assert not layer.eval().fused  # the path is fixed by configuration, not by mode
    out, expected = layer(x, lengths), plain(x, lengths)
    assert_close(out.outputs, expected.outputs, **EXACT)
    for part, expected_part in zip(state_parts(out.state), state_parts(expected.state), strict=True):
        assert_close(part, expected_part, **EXACT)


def assert_orthogonal_blocks(weight_hh, num_gates):
    for block in weight_hh.chunk(num_gates):  # (H, R) per gate; R < H: orthonormal columns
        assert_close(block.T @ block, torch.eye(block.shape[1]), **EXACT)
        if block.shape[0] == block.shape[1]:
            assert_close(block @ block.T, torch.eye(block.shape[0]), **EXACT)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RNN(E, H, num_layers=2, bidirectional=True, recurrent_init="orthogonal"),
        lambda: LSTM(E, H, num_layers=2, proj_size=P, recurrent_init="orthogonal"),
        lambda: GRU(E, H, num_layers=2, variant="textbook", recurrent_init="orthogonal"),
        lambda: LSTM(E, H, num_layers=2, layer_norm=True, recurrent_init="orthogonal"),
        lambda: GRU(E, H, num_layers=2, layer_norm=True, recurrent_init="orthogonal"),
    ],
    ids=["rnn", "lstm_proj", "gru", "lstm_layer_norm", "gru_layer_norm"],
)
def test_orthogonal_recurrent_init_on_every_cell(make):
    layer = make()
    assert len(layer.cells) >= 2
    for cell in layer.cells:
        assert_orthogonal_blocks(cell.weight_hh, cell.num_gates)


@pytest.mark.parametrize(
    ("make", "fused"),
    [
        (lambda: LSTM(E, H, num_layers=2, bidirectional=True, proj_size=P), True),
        (lambda: LSTM(E, H, recurrent_init="orthogonal", forget_bias=0.5), True),
        (lambda: GRU(E, H, bidirectional=True, merge_mode="sum"), True),
        (lambda: RNN(E, H, bidirectional=True, merge_mode="mul", use_fused=False), False),
        (lambda: GRU(E, H, num_layers=2, bidirectional=True, merge_mode="sum"), False),
        (lambda: LSTM(E, H, num_layers=2, bidirectional=True, merge_mode="concat"), True),
        (lambda: RNN(E, H, recurrent_dropout=0.1), False),
        (lambda: LSTM(E, H, proj_size=P, recurrent_dropout=0.1), False),
        (lambda: LSTM(E, H, layer_norm=True), False),
        (lambda: GRU(E, H, layer_norm=True), False),
        (lambda: GRU(E, H, layer_norm=True, recurrent_dropout=0.1), False),
    ],
)
def test_fused_property_for_new_options(make, fused):
    assert make().fused is fused


def test_extra_repr_shows_non_default_options_and_the_path():
    layer = LSTM(E, H, num_layers=2, bidirectional=True, proj_size=P, merge_mode="sum", use_fused=False)
    assert layer.extra_repr() == "3, 4, num_layers=2, bidirectional=True, proj_size=2, merge_mode='sum', fused=False"
    assert GRU(E, H).extra_repr() == "3, 4, fused=True"
    assert GRU(E, H, layer_norm=True, variant="textbook", recurrent_dropout=0.0).extra_repr() == (
        "3, 4, variant='textbook', layer_norm=True, fused=False"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: GRU(E, H, bidirectional=True, merge_mode="ave"),
            r"merge_mode \('ave'\) must be one of 'concat', 'sum', 'mean', 'mul'",
        ),
        (
            lambda: GRU(E, H, merge_mode="sum"),
            r"merge_mode='sum' needs bidirectional=True: one direction has nothing to merge",
        ),
        (lambda: RNN(E, H, recurrent_dropout=1.0), r"recurrent_dropout \(1.0\) must be in \[0, 1\)"),
        (lambda: RNN(E, H, recurrent_dropout=-0.1), r"recurrent_dropout \(-0.1\) must be in \[0, 1\)"),
        (
            lambda: LSTM(E, H, recurrent_init="zeros"),
            r"recurrent_init \('zeros'\) must be one of 'uniform', 'orthogonal'",
        ),
        (lambda: LSTM(E, H, proj_size=H), r"proj_size \(4\) must be an integer >= 0 and <= 3"),
        (
            lambda: LSTM(E, H, layer_norm=True, proj_size=P),
            r"layer_norm=True does not support proj_size, got proj_size=2",
        ),
        (
            lambda: LSTM(E, H, bidirectional=True, merge_mode="sum", recurrent_dropout=0.25).to_torch(),
            r"torch.nn.LSTM has no equivalent of merge_mode='sum', recurrent_dropout=0.25",
        ),
        (
            lambda: GRU(E, H, layer_norm=True, variant="textbook").to_torch(),
            r"torch.nn.GRU has no equivalent of variant='textbook', layer_norm=True",
        ),
        (lambda: LSTM(E, H, layer_norm=True).to_torch(), r"torch.nn.LSTM has no equivalent of layer_norm=True"),
    ],
)
def test_new_option_error_messages(make, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make()


def test_projected_state_error_messages():
    layer = LSTM(E, H, proj_size=P)
    x = torch.randn(B, T, E)
    with pytest.raises(
        ValueError, match=r"^state h must have shape \(L\*C, B, proj_size\) = \(1, 4, 2\), got \(1, 4, 4\)$"
    ):
        layer(x, state=(torch.zeros(1, B, H), torch.zeros(1, B, H)))
    with pytest.raises(ValueError, match=r"^state c must have shape \(L\*C, B, H\) = \(1, 4, 4\), got \(1, 4, 2\)$"):
        layer(x, state=(torch.zeros(1, B, P), torch.zeros(1, B, P)))


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_residual_layers_equal_torch_layers_joined_by_hand_written_residuals(kind):
    """x_1 = layer_0(x); x_{l+1} = layer_l(x_l) + x_l for l >= 1; each layer a one-layer torch.nn module on packed
    input with that layer's weights; padded steps of the output stay 0."""
    layer = make_layer(kind, num_layers=3, bidirectional=True, residual=True)
    assert not layer.fused
    x, lengths = torch.randn(B, T, E), torch.tensor(LENGTHS)
    _, _, torch_cls, options = KINDS[kind]
    inputs = x
    for index in range(3):
        one = torch_cls(inputs.shape[-1], H, bidirectional=True, batch_first=True, **options)
        with torch.no_grad():
            for d, suffix in enumerate(["", "_reverse"]):
                for name, p in layer.cells[2 * index + d].named_parameters():
                    getattr(one, f"{name}_l0{suffix}").copy_(p)
        packed = pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(one(packed)[0], batch_first=True, total_length=T)
        inputs = out if index == 0 else out + inputs
    got = layer(x, lengths).outputs
    keep = (torch.arange(T) < lengths.unsqueeze(1)).unsqueeze(-1)  # (B, T, 1)
    assert_close(got, inputs.masked_fill(~keep, 0.0), **EXACT)
    plain = make_layer(kind, num_layers=3, bidirectional=True)
    plain.load_state_dict(layer.state_dict())
    assert (plain(x, lengths).outputs - got).abs().max() > 1e-3


def test_residual_needs_stacked_layers_and_has_no_torch_equivalent():
    with pytest.raises(
        ValueError, match=r"^residual=True needs num_layers >= 2 \(residuals join stacked layers\), got 1$"
    ):
        GRU(E, H, residual=True)
    with pytest.raises(ValueError, match=r"^torch.nn.LSTM has no equivalent of residual=True$"):
        LSTM(E, H, num_layers=2, residual=True).to_torch()


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kind", list(KINDS))
def test_one_step_by_the_single_step_kernels_matches_torch_and_its_gradients(kind, batch_first, monkeypatch):
    """T = 1 runs the kernels' single-step form layer by layer (not for a projection): same outputs, states and
    gradients as torch.nn's sequence kernel."""
    calls = []
    monkeypatch.setattr(recurrent_paths, "fused_cell", lambda *args: calls.append(args[0]) or fused_cell(*args))
    layer = make_layer(kind, num_layers=2, batch_first=batch_first)
    reference = torch_copy(layer, kind)
    x = torch.randn(B, 1, E) if batch_first else torch.randn(1, B, E)
    state = random_state(layer)
    out = layer(x, state=state)
    assert len(calls) == (0 if kind == "lstm_proj" else 2)  # one per layer
    expected_outputs, expected_state = reference(x, tuple(state) if isinstance(state, LSTMState) else state)
    assert_close(out.outputs, expected_outputs, **EXACT)
    for part, expected in zip(state_parts(out.state), state_parts(expected_state), strict=True):
        assert_close(part, expected, **EXACT)
    weights = [torch.randn_like(t) for t in (out.outputs, *state_parts(out.state))]
    weighted_loss(out.outputs, out.state, weights).backward()
    weighted_loss(expected_outputs, expected_state, weights).backward()
    expected_grads = dict(reference.named_parameters())
    for name, grad in grads_by_torch_name(layer).items():
        assert_close(grad, expected_grads[name].grad, **EXACT)
