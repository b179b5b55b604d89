"""Every option of a recurrent layer reaches every cell, proven against same-seed twins.

A layer builds its cells one after another in torch's flat order (index ``layer * C + direction``, state_dict
keys ``cells.{k}.<name>``). A twin is the same list of cells built by hand with the public cell constructors
from the same seed: if the layer passes an option on to every cell, each cell's parameters equal its twin's
exactly. Only constructors and parameters are used here, so the test holds whatever the layers do inside.
"""

import pytest
import torch

from seqlab.nn import GRU, LSTM, RNN, GRUCell, LayerNormGRUCell, LayerNormLSTMCell, LSTMCell, RNNCell

E, H, P, L, C = 3, 5, 2, 2, 2  # input size, hidden size, projection size, layers, directions
SEED = 7


def cell_parameters(layer: torch.nn.Module) -> list[dict[str, torch.Tensor]]:
    """The layer's parameters grouped per cell, in the order of the state_dict keys ``cells.{k}.<name>``."""
    grouped: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in layer.named_parameters():
        prefix, index, name = key.split(".")
        assert prefix == "cells", key
        grouped.setdefault(int(index), {})[name] = value.detach()
    assert sorted(grouped) == list(range(L * C))
    return [grouped[k] for k in range(L * C)]


def twin_cells(make_cell, output_size: int = H) -> list[dict[str, torch.Tensor]]:
    """L * C cells built from SEED with ``make_cell(input_size)``; layer 1 reads both directions of layer 0."""
    torch.manual_seed(SEED)
    cells = [make_cell(E if layer == 0 else C * output_size) for layer in range(L) for _ in range(C)]
    return [{name: p.detach() for name, p in cell.named_parameters()} for cell in cells]


def seeded(make_layer):
    torch.manual_seed(SEED)
    return make_layer()


def assert_same_cells(layer_cells, twins):
    assert len(layer_cells) == len(twins)
    for k, (got, expected) in enumerate(zip(layer_cells, twins, strict=True)):
        assert got.keys() == expected.keys(), f"cell {k}"
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=f"cell {k}: {name}")


def forget_gate(bias_ih: torch.Tensor) -> torch.Tensor:
    return bias_ih[H : 2 * H]  # gate order i, f, g, o


@pytest.mark.parametrize("forget_bias", [0.0, 1.0, 2.5])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_lstm_forget_bias_reaches_every_cell(forget_bias, layer_norm):
    cell_class = LayerNormLSTMCell if layer_norm else LSTMCell
    layer = seeded(lambda: LSTM(E, H, num_layers=L, bidirectional=True, forget_bias=forget_bias, layer_norm=layer_norm))
    twins = twin_cells(lambda size: cell_class(size, H, forget_bias=forget_bias))
    got = cell_parameters(layer)
    for k in range(L * C):
        torch.testing.assert_close(forget_gate(got[k]["bias_ih"]), forget_gate(twins[k]["bias_ih"]), rtol=0, atol=0)
    assert_same_cells(got, twins)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_lstm_default_forget_bias_is_one_in_every_cell(layer_norm):
    """The layer's default is 1.0 (Jozefowicz et al., 2015), whatever the cells' own default is."""
    cell_class = LayerNormLSTMCell if layer_norm else LSTMCell
    with_default = cell_parameters(seeded(lambda: LSTM(E, H, num_layers=L, bidirectional=True, layer_norm=layer_norm)))
    assert_same_cells(with_default, twin_cells(lambda size: cell_class(size, H, forget_bias=1.0)))
    # Independently of the twins: the default differs from forget_bias=0 by exactly 1 in the f-gate only.
    without = cell_parameters(
        seeded(lambda: LSTM(E, H, num_layers=L, bidirectional=True, layer_norm=layer_norm, forget_bias=0.0))
    )
    for k in range(L * C):
        shift = with_default[k]["bias_ih"] - without[k]["bias_ih"]
        expected = torch.zeros(4 * H)
        expected[H : 2 * H] = 1.0
        torch.testing.assert_close(shift, expected, msg=f"cell {k}")


@pytest.mark.parametrize(
    ("make_layer", "make_cell"),
    [
        (
            lambda: LSTM(E, H, num_layers=L, bidirectional=True, layer_norm=True),
            lambda size: LayerNormLSTMCell(size, H),
        ),
        (
            lambda: GRU(E, H, num_layers=L, bidirectional=True, layer_norm=True),
            lambda size: LayerNormGRUCell(size, H),
        ),
        (
            lambda: GRU(E, H, num_layers=L, bidirectional=True, layer_norm=True, variant="textbook"),
            lambda size: LayerNormGRUCell(size, H, variant="textbook"),
        ),
    ],
    ids=["lstm", "gru", "gru-textbook"],
)
def test_layer_norm_reaches_every_cell(make_layer, make_cell):
    layer = seeded(make_layer)
    assert_same_cells(cell_parameters(layer), twin_cells(make_cell))
    assert not layer.fused  # layer-norm cells have no fused kernel


@pytest.mark.parametrize(
    ("make_layer", "make_cell"),
    [
        (lambda: LSTM(E, H, num_layers=L, bidirectional=True), lambda size: LSTMCell(size, H)),
        (lambda: GRU(E, H, num_layers=L, bidirectional=True), lambda size: GRUCell(size, H)),
        (lambda: RNN(E, H, num_layers=L, bidirectional=True), lambda size: RNNCell(size, H)),
    ],
    ids=["lstm", "gru", "rnn"],
)
def test_plain_layers_are_their_cells(make_layer, make_cell):
    """Without layer norm the parameters have no gains: a layer_norm flag that leaked would show here."""
    layer_cells = cell_parameters(seeded(make_layer))
    assert_same_cells(layer_cells, twin_cells(make_cell))
    assert all("gain_ih" not in cell for cell in layer_cells)


def test_proj_size_reaches_every_cell():
    layer = seeded(lambda: LSTM(E, H, num_layers=L, bidirectional=True, proj_size=P))
    twins = twin_cells(lambda size: LSTMCell(size, H, proj_size=P), output_size=P)
    got = cell_parameters(layer)
    assert_same_cells(got, twins)
    for k in range(L * C):
        assert got[k]["weight_hr"].shape == (P, H)
        assert got[k]["weight_hh"].shape == (4 * H, P)
    assert got[C]["weight_ih"].shape == (4 * H, C * P)  # layer 1 reads both projected directions


def assert_orthogonal_blocks(weight_hh: torch.Tensor, num_gates: int) -> None:
    """Each gate's block (H, H) or (H, P) of weight_hh has orthonormal columns: block^T block = I."""
    for block in weight_hh.chunk(num_gates, dim=0):
        eye = torch.eye(block.shape[1], dtype=block.dtype)
        torch.testing.assert_close(block.T @ block, eye, atol=1e-5, rtol=0)


def assert_uniform_bound(weight_hh: torch.Tensor) -> None:
    """torch.nn's init U(-1/sqrt(H), 1/sqrt(H)), which an orthogonal block (columns of norm 1) exceeds."""
    assert weight_hh.abs().max() <= H**-0.5


def is_orthogonal(weight_hh: torch.Tensor, num_gates: int) -> bool:
    try:
        assert_orthogonal_blocks(weight_hh, num_gates)
    except AssertionError:
        return False
    return True


ORTHOGONAL_CASES = [
    (lambda init: RNN(E, H, num_layers=L, bidirectional=True, recurrent_init=init), 1),
    (lambda init: GRU(E, H, num_layers=L, bidirectional=True, recurrent_init=init), 3),
    (lambda init: GRU(E, H, num_layers=L, bidirectional=True, recurrent_init=init, variant="textbook"), 3),
    (lambda init: LSTM(E, H, num_layers=L, bidirectional=True, recurrent_init=init), 4),
    (lambda init: LSTM(E, H, num_layers=L, bidirectional=True, recurrent_init=init, proj_size=P), 4),
    (lambda init: LSTM(E, H, num_layers=L, bidirectional=True, recurrent_init=init, layer_norm=True), 4),
    (lambda init: GRU(E, H, num_layers=L, bidirectional=True, recurrent_init=init, layer_norm=True), 3),
]
ORTHOGONAL_IDS = ["rnn", "gru", "gru-textbook", "lstm", "lstm-proj", "ln-lstm", "ln-gru"]


@pytest.mark.parametrize(("make_layer", "num_gates"), ORTHOGONAL_CASES, ids=ORTHOGONAL_IDS)
def test_orthogonal_recurrent_init_reaches_every_layer_and_direction(make_layer, num_gates):
    for k, cell in enumerate(cell_parameters(seeded(lambda: make_layer("orthogonal")))):
        assert is_orthogonal(cell["weight_hh"], num_gates), f"cell {k}"
    for k, cell in enumerate(cell_parameters(seeded(lambda: make_layer("uniform")))):
        assert_uniform_bound(cell["weight_hh"])
        assert not is_orthogonal(cell["weight_hh"], num_gates), f"cell {k}"


@pytest.mark.parametrize(
    ("make_layer", "make_cell", "output_size"),
    [
        (
            lambda: RNN(E, H, num_layers=L, bidirectional=True, recurrent_init="orthogonal"),
            lambda size: RNNCell(size, H, recurrent_init="orthogonal"),
            H,
        ),
        (
            lambda: GRU(E, H, num_layers=L, bidirectional=True, recurrent_init="orthogonal", variant="textbook"),
            lambda size: GRUCell(size, H, recurrent_init="orthogonal", variant="textbook"),
            H,
        ),
        (
            lambda: LSTM(E, H, num_layers=L, bidirectional=True, recurrent_init="orthogonal", proj_size=P),
            lambda size: LSTMCell(size, H, recurrent_init="orthogonal", proj_size=P),
            P,
        ),
    ],
    ids=["rnn", "gru-textbook", "lstm-proj"],
)
def test_orthogonal_recurrent_init_matches_same_seed_cells(make_layer, make_cell, output_size):
    assert_same_cells(cell_parameters(seeded(make_layer)), twin_cells(make_cell, output_size))
