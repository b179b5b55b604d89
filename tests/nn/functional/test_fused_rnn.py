"""The fused RNN kernels' pinned signature (against torch.nn), and the layers' fallback when it breaks."""

import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.testing import assert_close

from seqlab.nn.functional import fused_rnn as fr
from seqlab.nn.recurrent import GRU, LSTM, RNN

E, H, B, T, L = 3, 4, 3, 5, 2
LENGTHS = [5, 4, 2]  # sorted, as a packed sequence holds them
EXACT = {"atol": 1e-12, "rtol": 0.0}
# kernel -> torch.nn layer with the same semantics
TORCH_LAYERS = {
    "rnn_tanh": lambda: nn.RNN(E, H, num_layers=L, bidirectional=True, batch_first=True),
    "rnn_relu": lambda: nn.RNN(E, H, num_layers=L, bidirectional=True, batch_first=True, nonlinearity="relu"),
    "lstm": lambda: nn.LSTM(E, H, num_layers=L, bidirectional=True, batch_first=True),
    "gru": lambda: nn.GRU(E, H, num_layers=L, bidirectional=True, batch_first=True),
}
OPTIONS = {"bias": True, "num_layers": L, "dropout": 0.0, "training": False, "bidirectional": True}


@pytest.fixture(autouse=True)
def _float64():
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _state(name):
    h0 = torch.randn(2 * L, B, H)
    return (h0, torch.randn(2 * L, B, H)) if name == "lstm" else h0


@pytest.mark.parametrize("name", fr.KERNEL_NAMES)
def test_padded_kernel_signature_matches_torch_nn(name):
    reference = TORCH_LAYERS[name]()
    x, hx = torch.randn(B, T, E), _state(name)
    expected = reference(x, hx)
    result = fr.fused_rnn(name, x, hx, list(reference.parameters()), batch_first=True, **OPTIONS)
    states = expected[1] if name == "lstm" else (expected[1],)
    assert len(result) == 1 + len(states)
    assert tuple(result[0].shape) == (B, T, 2 * H)
    assert_close(result[0], expected[0], **EXACT)
    for ours, theirs in zip(result[1:], states, strict=True):
        assert tuple(ours.shape) == (2 * L, B, H)
        assert_close(ours, theirs, **EXACT)


@pytest.mark.parametrize("name", fr.KERNEL_NAMES)
def test_packed_kernel_signature_matches_torch_nn(name):
    reference = TORCH_LAYERS[name]()
    packed = pack_padded_sequence(torch.randn(B, T, E), torch.tensor(LENGTHS), batch_first=True, enforce_sorted=True)
    hx = _state(name)
    expected = reference(packed, hx)
    result = fr.fused_rnn_packed(name, packed.data, packed.batch_sizes, hx, list(reference.parameters()), **OPTIONS)
    assert tuple(result[0].shape) == (sum(LENGTHS), 2 * H)
    assert_close(result[0], expected[0].data, **EXACT)
    states = expected[1] if name == "lstm" else (expected[1],)
    for ours, theirs in zip(result[1:], states, strict=True):
        assert_close(ours, theirs, **EXACT)


def test_kernels_are_available_on_this_torch():
    assert fr.fused_kernels_available()
    assert RNN(E, H).fused and LSTM(E, H).fused and GRU(E, H).fused


def test_unknown_kernel_name():
    with pytest.raises(ValueError, match=r"^kernel must be one of .*, got 'elman'$"):
        fr.fused_rnn("elman", torch.zeros(1, 1, E), torch.zeros(1, 1, H), [], batch_first=True, **OPTIONS)


@pytest.fixture
def broken_kernels(monkeypatch):
    """The kernels' signature check fails: as if a torch release changed their argument lists."""
    monkeypatch.setattr(fr, "_kernels_accept_signature", lambda: False)
    fr.fused_kernels_available.cache_clear()
    yield
    fr.fused_kernels_available.cache_clear()


@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
def test_layers_fall_back_with_one_warning_and_still_equal_torch(broken_kernels, cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layers = [cls(E, H, num_layers=L, bidirectional=True) for _ in range(2)]
        assert not any(layer.fused for layer in layers)
        x, lengths = torch.randn(B, T, E), torch.tensor(LENGTHS)
        outputs = [layer(x, lengths) for layer in layers]
        assert not layers[0].fused
    fallback = [w for w in caught if "fused RNN kernels" in str(w.message)]
    assert len(fallback) == 1 and fallback[0].category is RuntimeWarning
    reference = layers[0].to_torch()
    expected, _ = reference(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    expected_padded = torch.nn.utils.rnn.pad_packed_sequence(expected, batch_first=True, total_length=T)[0]
    assert_close(outputs[0].outputs, expected_padded, **EXACT)


def test_bf16_autocast_without_a_bf16_lstm_kernel_runs_the_lstm_in_float32(monkeypatch):
    # As on a CPU without AVX512-BF16 or AMX, where oneDNN's bf16 LSTM raises: the kernel runs in float32, so the
    # layer's outputs are exactly the fp32 layer's, padded and packed.
    monkeypatch.setattr(fr, "bf16_kernels_available", lambda: False)
    torch.manual_seed(0)
    layer = LSTM(3, 4, num_layers=2, bidirectional=True).float()
    x, lengths = torch.randn(2, 5, 3, dtype=torch.float32), torch.tensor([5, 2])
    expected = layer(x, lengths)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = layer(x, lengths)
    assert got[0].dtype == torch.float32
    assert_close(got[0], expected[0], rtol=0, atol=0)
    assert_close(got[1], expected[1], rtol=0, atol=0)


def test_the_bf16_probe_agrees_with_torch_nn_lstm_under_autocast():
    fr.bf16_kernels_available.cache_clear()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the probe must not depend on it (autocast leaves float64 alone)
    try:
        probed = fr.bf16_kernels_available()
    finally:
        torch.set_default_dtype(previous)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nn.LSTM(2, 2).float()(torch.zeros(1, 1, 2, dtype=torch.float32))
        runs = True
    except RuntimeError:
        runs = False
    assert probed == runs


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_loop_equals_a_python_loop_over_the_leading_dimension(reverse):
    """``scan_loop`` wraps a private torch operator (``torch._higher_order_ops.scan``): this pins what the export path
    relies on, carry and outputs of an explicit loop, forwards and backwards, with y indexed by t either way."""
    torch.manual_seed(0)
    xs, init = torch.randn(5, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)

    def combine(carry, x_t):
        carry = torch.tanh(carry + x_t)
        return carry, 2.0 * carry  # y_t is no view of the carry

    carry, ys = init, [None] * len(xs)
    for t in reversed(range(len(xs))) if reverse else range(len(xs)):
        carry, ys[t] = combine(carry, xs[t])
    final, stacked = fr.scan_loop(combine, init, xs, reverse=reverse)
    assert_close(final, carry, rtol=0, atol=0)
    assert_close(stacked, torch.stack(ys), rtol=0, atol=0)
