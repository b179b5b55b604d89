"""Causal dilated convolutions and the TCN: a hand-written sum and torch's conv1d on a left-padded input, causality,
the receptive field as computed against the one measured by gradients, streaming equal to one pass, padding."""

import pytest
import torch
import torch.nn.functional as F

from seqlab.errors import ConfigError
from seqlab.nn import CausalConv1d, TemporalConvNet
from seqlab.nn.temporal_convolution import check_tcn_sizes, receptive_field, tcn_dilations


def _conv(kernel_size, dilation, *, weight_norm=False):
    torch.manual_seed(0)
    return CausalConv1d(3, 4, kernel_size, dilation=dilation, weight_norm=weight_norm).double()


@pytest.mark.parametrize(("kernel_size", "dilation"), [(1, 1), (2, 1), (3, 2), (2, 4)])
def test_causal_conv_equals_a_hand_written_sum(kernel_size, dilation):
    conv = _conv(kernel_size, dilation)
    x = torch.randn(2, 9, 3, dtype=torch.float64)
    W, b = conv.conv.weight, conv.conv.bias  # (C_out, C_in, k), (C_out,)
    expected = torch.zeros(2, 9, 4, dtype=torch.float64)
    for t in range(9):
        expected[:, t] = b
        for i in range(kernel_size):  # y_t = b + sum_i W_i x_{t - i d}, W_i = weight[:, :, k - 1 - i]
            if t - i * dilation >= 0:
                expected[:, t] += x[:, t - i * dilation] @ W[:, :, kernel_size - 1 - i].T
    torch.testing.assert_close(conv(x).outputs, expected)


@pytest.mark.parametrize("weight_norm", [False, True])
def test_causal_conv_equals_torch_conv1d_on_a_left_padded_input(weight_norm):
    conv = _conv(3, 2, weight_norm=weight_norm)
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    padded = F.pad(x.transpose(1, 2), (conv.context_size, 0))  # (B, C_in, P + T), zeros on the left
    expected = F.conv1d(padded, conv.conv.weight, conv.conv.bias, dilation=2).transpose(1, 2)
    torch.testing.assert_close(conv(x).outputs, expected)


def test_weight_norm_is_off_by_default_and_reparametrises_when_on():
    assert not hasattr(_conv(2, 1).conv, "parametrizations")
    conv = _conv(2, 1, weight_norm=True)
    names = {name for name, _ in conv.named_parameters()}
    assert names == {"conv.bias", "conv.parametrizations.weight.original0", "conv.parametrizations.weight.original1"}


def _tcn(**options):
    torch.manual_seed(0)
    options = {"num_levels": 3, "kernel_size": 3, **options}
    return TemporalConvNet(2, 5, **options).double().eval()


def test_output_at_t_is_unchanged_when_later_inputs_change():
    tcn = _tcn()
    x = torch.randn(2, 12, 2, dtype=torch.float64)
    for t in range(12):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn(2, 11 - t, 2, dtype=torch.float64)
        torch.testing.assert_close(tcn(changed).outputs[:, : t + 1], tcn(x).outputs[:, : t + 1], rtol=0, atol=0)


@pytest.mark.parametrize(("num_levels", "kernel_size"), [(1, 2), (2, 3), (3, 2), (2, 1)])
def test_receptive_field_as_computed_equals_the_one_measured(num_levels, kernel_size):
    tcn = _tcn(num_levels=num_levels, kernel_size=kernel_size)
    R = tcn.receptive_field
    assert (
        R == receptive_field(kernel_size, tcn_dilations(num_levels)) == 1 + 2 * (kernel_size - 1) * (2**num_levels - 1)
    )
    T = R + 6
    x = torch.randn(4, T, 2, dtype=torch.float64, requires_grad=True)
    for t in sorted({0, max(R - 2, 0), R - 1, T - 1}):
        (gradient,) = torch.autograd.grad(tcn(x).outputs[:, t].sum(), x)
        reads = gradient.abs().sum((0, 2)) > 0  # (T,): the inputs that output t depends on
        expected = torch.zeros(T, dtype=torch.bool)
        expected[max(t - R + 1, 0) : t + 1] = True
        assert torch.equal(reads, expected), (t, reads.nonzero().flatten().tolist())


def test_streaming_in_chunks_equals_one_pass():
    tcn = _tcn()
    x = torch.randn(2, 20, 2, dtype=torch.float64)
    whole = tcn(x).outputs
    state, pieces = None, []
    for chunk in (x[:, :1], x[:, 1:8], x[:, 8:9], x[:, 9:]):
        out, state = tcn(chunk, state)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, 1), whole)
    assert [tuple(p.shape) for p in state[2]] == [(8, 2, 5), (8, 2, 5)]  # P = (k - 1) 2^2, batch at dim -2


def test_left_padding_gives_the_outputs_of_the_row_alone():
    tcn = _tcn()
    x = torch.randn(1, 6, 2, dtype=torch.float64)
    padded = torch.cat([torch.randn(1, 3, 2, dtype=torch.float64), x], 1)
    keep_mask = torch.tensor([[False] * 3 + [True] * 6])
    out, state = tcn(padded, keep_mask=keep_mask)
    alone, alone_state = tcn(x)
    torch.testing.assert_close(out[:, 3:], alone)
    for pair, alone_pair in zip(state, alone_state, strict=True):
        for past, alone_past in zip(pair, alone_pair, strict=True):
            torch.testing.assert_close(past[-3:], alone_past[-3:])  # the last steps are the row's own


def test_eval_disables_dropout():
    tcn = _tcn(dropout=0.5)
    x = torch.randn(2, 5, 2, dtype=torch.float64)
    torch.testing.assert_close(tcn(x).outputs, tcn(x).outputs)
    tcn.train()
    assert not torch.equal(tcn(x).outputs, tcn(x).outputs)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kernel_size": 0}, r"^kernel_size \(0\) must be an integer >= 1$"),
        ({"num_levels": -1}, r"^num_levels \(-1\) must be an integer >= 1$"),
        ({"num_levels": 0}, r"^num_levels \(0\) must be an integer >= 1$"),
        ({"dropout": 1.0}, r"^dropout \(1.0\) must be in \[0, 1\)$"),
    ],
)
def test_bad_sizes_are_refused_in_one_line(options, message):
    with pytest.raises(ConfigError, match=message):
        _tcn(**options)


def test_bad_shapes_are_refused():
    tcn = _tcn()
    with pytest.raises(ValueError, match=r"x must be \(B, T, 2\), got shape \(2, 5, 3\)"):
        tcn(torch.randn(2, 5, 3, dtype=torch.float64))
    conv = _conv(3, 2)
    with pytest.raises(ValueError, match=r"past must be \(4, 2, 3\) \(P, B, C_in\), got \(4, 1, 3\)"):
        conv(torch.randn(2, 5, 3, dtype=torch.float64), torch.zeros(4, 1, 3, dtype=torch.float64))


def test_a_receptive_field_too_large_to_allocate_is_refused_before_anything_is_built():
    message = (
        r"^num_levels \(16\) and kernel_size \(3\) give a receptive field over 65536 steps \(MAX_RECEPTIVE_FIELD\)$"
    )
    with pytest.raises(ConfigError, match=message):
        TemporalConvNet(2, 5, num_levels=16, kernel_size=3)
    with pytest.raises(ConfigError, match=r"^num_levels \(1000000\) and kernel_size \(2\)"):
        check_tcn_sizes(2, 1_000_000)
    assert check_tcn_sizes(2, 14) == 1 + 2 * (2**14 - 1)
