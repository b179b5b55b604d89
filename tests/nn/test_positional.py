import math
import re

import pytest
import torch

from seqlab.nn.positional import LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding

F64 = torch.float64


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def sinusoid_by_hand(pos, d_model, base=10000.0):
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...), one channel at a time with math."""
    values = []
    for channel in range(d_model):
        i = channel // 2
        angle = pos / base ** (2 * i / d_model)
        values.append(math.sin(angle) if channel % 2 == 0 else math.cos(angle))
    return torch.tensor(values, dtype=F64)


def shift_matrix(k, d_model, base=10000.0):
    """M_k built from k alone: a 2x2 rotation by k w_i per channel pair (angle-sum identities)."""
    blocks = []
    for i in range(d_model // 2):
        a = k / base ** (2 * i / d_model)
        blocks.append(torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]], dtype=F64))
    return torch.block_diag(*blocks)


def rotation_by_hand(m, head_dim, base=10000.0):
    """R(m) of RoFormer eq. (15): block-diagonal [[cos m theta_i, -sin m theta_i], [sin m theta_i, cos m theta_i]]."""
    blocks = []
    for i in range(head_dim // 2):
        a = m * base ** (-2 * i / head_dim)
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=F64))
    return torch.block_diag(*blocks)


# ---------------------------------------------------------------- sinusoidal


def test_sinusoidal_d4_matches_the_closed_form():
    # For D = 4 the frequencies are 1 and 1/100: PE(pos) = (sin pos, cos pos, sin(pos/100), cos(pos/100)).
    pe = SinusoidalPositionalEncoding(4)
    positions = torch.tensor([0, 1, 7, 250])
    expected = torch.tensor(
        [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in positions.tolist()], dtype=F64
    )
    torch.testing.assert_close(pe.encoding(positions), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("d_model", [2, 6, 16])
def test_sinusoidal_table_and_encoding_match_the_formula(d_model):
    pe = SinusoidalPositionalEncoding(d_model, max_length=64)
    expected = torch.stack([sinusoid_by_hand(pos, d_model) for pos in range(64)])
    assert pe.table.dtype == F64 and pe.table.shape == (64, d_model)
    torch.testing.assert_close(pe.table, expected, rtol=0, atol=1e-13)
    positions = torch.tensor([[3, 1000], [64, 12345]])
    hand = torch.stack([sinusoid_by_hand(p, d_model) for p in positions.flatten().tolist()]).view(2, 2, d_model)
    torch.testing.assert_close(pe.encoding(positions), hand, rtol=0, atol=1e-11)


def test_sinusoidal_forward_adds_the_rows_at_the_offset_even_past_the_cached_table():
    pe = SinusoidalPositionalEncoding(8, max_length=10).double()
    x = randn(2, 5, 8)
    for offset in (0, 3, 5, 8, 40):  # 8 and 40 run past the 10 cached positions
        expected = x + torch.stack([sinusoid_by_hand(offset + t, 8) for t in range(5)])
        torch.testing.assert_close(pe(x, offset=offset), expected, rtol=0, atol=1e-13)


def test_sinusoidal_forward_keeps_the_input_dtype_and_has_no_state_in_checkpoints():
    pe = SinusoidalPositionalEncoding(6, max_length=16)
    x = randn(1, 4, 6, dtype=torch.float32)
    out = pe(x, offset=2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, x + pe.encoding(torch.arange(2, 6)).float())
    assert dict(pe.state_dict()) == {}


@pytest.mark.parametrize("k", [1, 5, 37, 1000, -3])
def test_sinusoidal_shift_is_one_fixed_linear_map_for_every_position(k):
    # The seeds' claim (Vaswani et al. 2017, sec. 3.5): PE(pos + k) = M_k PE(pos), with M_k depending on k only.
    d_model = 12
    pe = SinusoidalPositionalEncoding(d_model)
    positions = torch.arange(5, 400, 7)
    m_k = shift_matrix(k, d_model)
    shifted = pe.encoding(positions + k)  # (P, D)
    torch.testing.assert_close(pe.encoding(positions) @ m_k.T, shifted, rtol=0, atol=1e-10)
    # M_k is a rotation (orthogonal) and not the identity, so the check above is not trivially true.
    torch.testing.assert_close(m_k @ m_k.T, torch.eye(d_model, dtype=F64), rtol=0, atol=1e-14)
    assert not torch.allclose(m_k, torch.eye(d_model, dtype=F64))


def test_sinusoidal_shift_matrix_depends_on_the_channel_layout():
    # The same rotation blocks do not map PE(pos) to PE(pos + k) if sin and cos swap places, so the previous
    # test checks the layout too.
    pe = SinusoidalPositionalEncoding(4)
    positions = torch.arange(0, 50)
    swapped = pe.encoding(positions)[:, [1, 0, 3, 2]]
    target = pe.encoding(positions + 3)[:, [1, 0, 3, 2]]
    assert not torch.allclose(swapped @ shift_matrix(3, 4).T, target)


def test_sinusoidal_dropout_applies_only_in_train_mode():
    pe = SinusoidalPositionalEncoding(8, dropout=0.5).double()
    x = randn(2, 6, 8)
    torch.manual_seed(0)
    dropped = pe(x)
    assert bool((dropped == 0).any())
    pe.eval()
    torch.testing.assert_close(pe(x), x + pe.table[:6], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: SinusoidalPositionalEncoding(5),
            "d_model (5) must be even and >= 2: each frequency has a sin and a cos",
        ),
        (lambda: SinusoidalPositionalEncoding(4, max_length=0), "max_length (0) must be an integer >= 1"),
        (
            lambda: SinusoidalPositionalEncoding(4)(torch.zeros(2, 3, 6)),
            "x must be (B, T, D) with D = d_model (4), got shape (2, 3, 6)",
        ),
        (
            lambda: SinusoidalPositionalEncoding(4)(torch.zeros(3, 4)),
            "x must be (B, T, D) with D = d_model (4), got shape (3, 4)",
        ),
        (lambda: SinusoidalPositionalEncoding(4)(torch.zeros(1, 3, 4), offset=-1), "offset (-1) must be >= 0"),
    ],
)
def test_sinusoidal_errors(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


# ---------------------------------------------------------------- learned


def test_learned_adds_the_rows_at_the_offset_and_trains_only_those():
    torch.manual_seed(0)
    pe = LearnedPositionalEncoding(10, 4).double()
    x = randn(2, 3, 4)
    out = pe(x, offset=6)
    torch.testing.assert_close(out, x + pe.weight[6:9], rtol=0, atol=0)
    out.sum().backward()
    expected_grad = torch.zeros(10, 4, dtype=F64)
    expected_grad[6:9] = 2.0  # each used row gets one gradient of 1 per batch element
    torch.testing.assert_close(pe.weight.grad, expected_grad, rtol=0, atol=0)


def test_learned_init_and_state():
    torch.manual_seed(0)
    pe = LearnedPositionalEncoding(2000, 16)
    assert list(pe.state_dict()) == ["weight"]
    assert abs(pe.weight.std().item() - 0.02) < 1e-3  # 32000 draws from N(0, 0.02^2)
    torch.testing.assert_close(pe(torch.zeros(1, 2000, 16)), pe.weight.detach().unsqueeze(0))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: LearnedPositionalEncoding(8, 4)(torch.zeros(1, 9, 4)),
            "positions 0..8 exceed the learned positions 0..7 (max_length 8)",
        ),
        (
            lambda: LearnedPositionalEncoding(8, 4)(torch.zeros(1, 3, 4), offset=6),
            "positions 6..8 exceed the learned positions 0..7 (max_length 8)",
        ),
        (lambda: LearnedPositionalEncoding(8, 4)(torch.zeros(1, 3, 4), offset=-2), "offset (-2) must be >= 0"),
        (
            lambda: LearnedPositionalEncoding(8, 4)(torch.zeros(1, 3, 5)),
            "x must be (B, T, D) with D = d_model (4), got shape (1, 3, 5)",
        ),
        (lambda: LearnedPositionalEncoding(0, 4), "max_length (0) must be an integer >= 1"),
    ],
)
def test_learned_errors(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


def test_learned_accepts_the_last_position():
    pe = LearnedPositionalEncoding(8, 4)
    torch.testing.assert_close(pe(torch.zeros(1, 3, 4), offset=5), pe.weight.detach()[5:8].unsqueeze(0))


# ---------------------------------------------------------------- rotary


def test_rotary_2d_by_hand():
    # Dh = 2: theta_1 = 1, so position m turns (x1, x2) by m radians.
    rotary = RotaryEmbedding(2).double()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, -2.0]], dtype=F64)  # positions 0, 1, 2
    m = torch.tensor([0.0, 1.0, 2.0], dtype=F64)
    expected = torch.stack(
        [
            torch.tensor([1.0, 0.0], dtype=F64),
            torch.tensor([-math.sin(1.0), math.cos(1.0)], dtype=F64),
            torch.tensor([3 * math.cos(2.0) + 2 * math.sin(2.0), 3 * math.sin(2.0) - 2 * math.cos(2.0)], dtype=F64),
        ]
    )
    torch.testing.assert_close(rotary(x), expected, rtol=0, atol=1e-15)
    # The same vectors at positions 10, 11, 12.
    turned = torch.stack(
        [torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=F64) for a in (m + 10).tolist()]
    )
    torch.testing.assert_close(rotary(x, offset=10), (turned @ x.unsqueeze(-1)).squeeze(-1), rtol=0, atol=1e-14)


def test_rotary_equals_the_block_diagonal_rotation_of_eq_15():
    head_dim, T = 8, 6
    rotary = RotaryEmbedding(head_dim)
    x = randn(2, 3, T, head_dim)  # (B, N, T, Dh)
    expected = torch.stack([x[:, :, t] @ rotation_by_hand(4 + t, head_dim).T for t in range(T)], dim=2)
    torch.testing.assert_close(rotary(x, offset=4), expected, rtol=0, atol=1e-14)


def test_rotary_dot_products_depend_only_on_the_relative_position():
    head_dim, T = 16, 40
    rotary = RotaryEmbedding(head_dim, max_length=64)
    q, k = randn(1, 1, 1, head_dim, seed=1), randn(1, 1, 1, head_dim, seed=2)
    # scores[m, n] = <R(m) q, R(n) k> for the same q and k placed at every position.
    scores = rotary(q.expand(1, 1, T, head_dim))[0, 0] @ rotary(k.expand(1, 1, T, head_dim))[0, 0].T  # (T, T)
    torch.testing.assert_close(scores[1:, 1:], scores[:-1, :-1], rtol=0, atol=1e-12)  # constant along diagonals
    for shift in (7, 300):  # 300 runs past the cached table
        shifted = (
            rotary(q.expand(1, 1, T, head_dim), offset=shift)[0, 0]
            @ rotary(k.expand(1, 1, T, head_dim), offset=shift)[0, 0].T
        )
        torch.testing.assert_close(shifted, scores, rtol=0, atol=1e-12)
    # <R(m) q, R(n) k> = <q, R(n - m) k>, and it does vary with n - m (so position information is there).
    for m, n in [(0, 5), (3, 11), (20, 21)]:
        torch.testing.assert_close(scores[m, n], (q @ rotary(k, offset=n - m).mT)[0, 0, 0, 0], rtol=0, atol=1e-12)
    assert scores[0].unique().numel() == T


def test_rotary_preserves_norms():
    rotary = RotaryEmbedding(12, max_length=16)
    x = randn(3, 2, 30, 12)
    out = rotary(x, offset=5)
    torch.testing.assert_close(
        torch.linalg.vector_norm(out, dim=-1), torch.linalg.vector_norm(x, dim=-1), rtol=1e-14, atol=0
    )
    assert not torch.allclose(out[:, :, 1:], x[:, :, 1:])


@pytest.mark.parametrize("max_length", [4, 64])  # with a short table the slices straddle the cached range
def test_rotary_with_offset_equals_a_slice_of_the_longer_sequence(max_length):
    rotary = RotaryEmbedding(6, max_length=max_length)
    x = randn(2, 2, 20, 6)
    full = rotary(x)
    for offset, length in [(0, 1), (3, 1), (3, 5), (15, 5)]:
        part = rotary(x[:, :, offset : offset + length], offset=offset)
        torch.testing.assert_close(part, full[:, :, offset : offset + length], rtol=0, atol=1e-15)


def test_rotary_float32_input_keeps_its_dtype_and_matches_float64():
    rotary = RotaryEmbedding(8)
    x = randn(1, 2, 5, 8)
    out = rotary(x.float(), offset=3)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, rotary(x, offset=3).float())
    assert dict(rotary.state_dict()) == {}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RotaryEmbedding(7), "head_dim (7) must be even and >= 2: RoPE rotates channel pairs"),
        (lambda: RotaryEmbedding(0), "head_dim (0) must be an integer >= 2"),
        (lambda: RotaryEmbedding(4, max_length=0), "max_length (0) must be an integer >= 1"),
        (
            lambda: RotaryEmbedding(4)(torch.zeros(1, 2, 3, 6)),
            "x must be (..., T, Dh) with Dh = head_dim (4), got shape (1, 2, 3, 6)",
        ),
        (lambda: RotaryEmbedding(4)(torch.zeros(4)), "x must be (..., T, Dh) with Dh = head_dim (4), got shape (4,)"),
        (lambda: RotaryEmbedding(4)(torch.zeros(1, 3, 4), offset=-1), "offset (-1) must be >= 0"),
    ],
)
def test_rotary_errors(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


def test_rotary_does_not_shadow_module_apply():
    # Models initialise weights with model.apply(fn); a rotary submodule must take part like any module.
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), RotaryEmbedding(4))
    seen = []
    model.apply(lambda module: seen.append(type(module).__name__))
    assert seen == ["Linear", "RotaryEmbedding", "Sequential"]


def test_rotary_offset_as_a_tensor_equals_the_int_offset_within_and_past_the_table():
    torch.manual_seed(0)
    rotary = RotaryEmbedding(8, max_length=10)
    x = torch.randn(2, 3, 4, 8)
    for offset in (0, 5, 9):  # 9 + 4 > max_length: the int path computes those angles too
        torch.testing.assert_close(rotary(x, offset=torch.tensor([offset])), rotary(x, offset=offset), rtol=0, atol=0)
