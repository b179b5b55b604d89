"""seqlab.nn.state_space: the discretisation by hand, the kernel against explicit matrix powers, the parallel form
(FFT convolution) against the recurrent scan in float64 (outputs, final state, gradients), causality, the step, the
S4D-Lin / S4D-Inv initialisations, and the messages of bad sizes."""

import math

import pytest
import torch

from seqlab.errors import ConfigError
from seqlab.nn.state_space import S4D, S4DBlock, causal_convolution, s4d_stack, ssm_kernel, zoh_discretize


def _double(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return module.double()


def test_zoh_of_a_one_state_system_is_the_hand_computed_value() -> None:
    # x' = -2 x + 3 u, step 0.1: A_bar = exp(-0.2); B_bar = (exp(-0.2) - 1) / (-2) * 3 (the exact integral
    # of exp(-2 s) * 3 over one step of held input).
    A = torch.tensor([[-2.0 + 0j]], dtype=torch.complex128)
    B = torch.tensor([[3.0 + 0j]], dtype=torch.complex128)
    A_bar, B_bar = zoh_discretize(A, B, torch.tensor([0.1], dtype=torch.float64))
    assert A_bar.item() == pytest.approx(math.exp(-0.2))
    assert B_bar.item() == pytest.approx(3 * (1 - math.exp(-0.2)) / 2)
    # A complex mode: exp(0.1 (-0.5 + i pi)).
    A = torch.tensor([[-0.5 + 1j * math.pi]], dtype=torch.complex128)
    A_bar, B_bar = zoh_discretize(A, torch.ones_like(A), torch.tensor([0.1], dtype=torch.float64))
    expected = complex(math.exp(-0.05) * math.cos(0.1 * math.pi), math.exp(-0.05) * math.sin(0.1 * math.pi))
    assert A_bar.item() == pytest.approx(expected)
    assert B_bar.item() == pytest.approx((expected - 1) / complex(-0.5, math.pi))


def test_zoh_matches_the_matrix_exponential_of_the_augmented_system() -> None:
    # Van Loan: exp([[A, B], [0, 0]] dt) = [[A_bar, B_bar], [0, 1]], an independent route to the same numbers.
    A = torch.tensor([[-0.7 + 2.0j]], dtype=torch.complex128)
    B = torch.tensor([[0.4 - 1.1j]], dtype=torch.complex128)
    dt = 0.3
    M = torch.tensor([[A.item() * dt, B.item() * dt], [0, 0]], dtype=torch.complex128)
    E = torch.linalg.matrix_exp(M)
    A_bar, B_bar = zoh_discretize(A, B, torch.tensor([dt], dtype=torch.float64))
    torch.testing.assert_close(A_bar.flatten(), E[0, :1])
    torch.testing.assert_close(B_bar.flatten(), E[0, 1:])


def test_kernel_is_c_times_powers_of_a_times_b() -> None:
    torch.manual_seed(0)
    D, M, T = 2, 3, 7
    A_bar = 0.9 * torch.exp(1j * torch.rand(D, M, dtype=torch.float64))
    B_bar = torch.randn(D, M, dtype=torch.complex128)
    C = torch.randn(D, M, dtype=torch.complex128)
    K = ssm_kernel(A_bar, B_bar, C, T)
    for d in range(D):
        A = torch.diag(A_bar[d])
        for ell in range(T):
            # C A^l B for the N/2 modes, plus the conjugate half: 2 Re.
            expected = 2 * (C[d] @ torch.linalg.matrix_power(A, ell) @ B_bar[d]).real
            torch.testing.assert_close(K[d, ell], expected)


def test_causal_convolution_is_the_direct_sum() -> None:
    torch.manual_seed(0)
    u, K = torch.randn(2, 9, 3, dtype=torch.float64), torch.randn(3, 9, dtype=torch.float64)
    y = causal_convolution(u, K)
    expected = torch.stack([sum(K[:, t - k] * u[:, k] for k in range(t + 1)) for t in range(9)], dim=1)  # (B, T, D)
    torch.testing.assert_close(y, expected)


@pytest.mark.parametrize("init", ["lin", "inv"])
def test_parallel_form_equals_the_scan_in_float64_outputs_state_and_gradients(init: str) -> None:
    layer = _double(S4D(4, 6, init=init))
    torch.manual_seed(1)
    u = torch.randn(3, 11, 4, dtype=torch.float64, requires_grad=True)
    x0 = torch.randn(3, 4, 3, dtype=torch.complex128)
    for state in (None, x0):
        fast, slow = layer(u, state), layer.scan(u, state)
        torch.testing.assert_close(fast.outputs, slow.outputs)
        torch.testing.assert_close(fast.state, slow.state)
        weights = torch.randn_like(fast.outputs)
        grads_fast = torch.autograd.grad(
            (fast.outputs * weights).sum() + fast.state.abs().sum(), [u, *layer.parameters()]
        )
        grads_slow = torch.autograd.grad(
            (slow.outputs * weights).sum() + slow.state.abs().sum(), [u, *layer.parameters()]
        )
        for a, b in zip(grads_fast, grads_slow, strict=True):
            torch.testing.assert_close(a, b)


def test_chunks_continue_where_the_previous_chunk_stopped() -> None:
    layer = _double(S4D(3, 4))
    u = torch.randn(2, 10, 3, dtype=torch.float64)
    whole = layer(u)
    first = layer(u[:, :4])
    second = layer(u[:, 4:], first.state)
    torch.testing.assert_close(torch.cat([first.outputs, second.outputs], 1), whole.outputs)
    torch.testing.assert_close(second.state, whole.state)


def test_block_scan_equals_its_parallel_form_outputs_and_gradients() -> None:
    block = _double(S4DBlock(4, 4))
    h = torch.randn(2, 9, 4, dtype=torch.float64, requires_grad=True)
    fast, slow = block(h), block.scan(h)
    torch.testing.assert_close(fast.outputs, slow.outputs)
    torch.testing.assert_close(fast.state, slow.state)
    grads_fast = torch.autograd.grad(fast.outputs.square().sum(), [h, *block.parameters()])
    grads_slow = torch.autograd.grad(slow.outputs.square().sum(), [h, *block.parameters()])
    for a, b in zip(grads_fast, grads_slow, strict=True):
        torch.testing.assert_close(a, b)


def test_output_at_t_does_not_depend_on_later_inputs() -> None:
    block = _double(S4DBlock(4, 4))
    u = torch.randn(2, 12, 4, dtype=torch.float64)
    changed = u.clone()
    changed[:, 7:] = torch.randn(2, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(block(u).outputs[:, :7], block(changed).outputs[:, :7])
    assert not torch.allclose(block(u).outputs[:, 7:], block(changed).outputs[:, 7:])


def test_stack_steps_equal_its_parallel_form() -> None:
    stack = _double(s4d_stack(4, 2, state_size=4)).eval()
    h = torch.randn(2, 8, 4, dtype=torch.float64)
    whole = stack(h)
    state, outputs = None, []
    for t in range(8):
        y_t, state = stack.step(h[:, t], state)
        outputs.append(y_t)
    torch.testing.assert_close(torch.stack(outputs, 1), whole.outputs)
    for a, b in zip(state, whole.state, strict=True):
        torch.testing.assert_close(a, b)


def test_left_padding_masked_out_gives_the_unpadded_result() -> None:
    stack = _double(s4d_stack(3, 2, state_size=4)).eval()
    h = torch.randn(1, 5, 3, dtype=torch.float64)
    padded = torch.cat([torch.randn(1, 3, 3, dtype=torch.float64), h], dim=1)
    keep = torch.tensor([[False] * 3 + [True] * 5])
    alone, masked = stack(h), stack(padded, keep_mask=keep)
    torch.testing.assert_close(masked.outputs[:, 3:], alone.outputs)
    for a, b in zip(masked.state, alone.state, strict=True):
        torch.testing.assert_close(a, b)


def test_initialisations_are_the_papers() -> None:
    lin, inv = S4D(2, 8, init="lin"), S4D(2, 8, init="inv")
    A, B, _, dt = lin.continuous()
    n = torch.arange(4, dtype=torch.float32)
    torch.testing.assert_close(A, torch.complex(torch.full((2, 4), -0.5), (math.pi * n).expand(2, 4)))
    torch.testing.assert_close(B, torch.ones(2, 4, dtype=torch.cfloat))
    assert bool(((dt >= 0.001) & (dt <= 0.1)).all())
    A_inv = inv.continuous()[0]
    torch.testing.assert_close(A_inv.imag, (8 / math.pi * (8 / (2 * n + 1) - 1)).expand(2, 4))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"state_size": 5}, "state_size (5) must be even: N/2 complex modes and their conjugates"),
        ({"state_size": 0}, "state_size (0) must be an integer >= 2"),
        ({"init": "legs"}, "init ('legs') must be one of 'lin', 'inv'"),
        ({"dt_min": 0.2}, "dt_max (0.1) must be a finite number >= 0.2"),
    ],
)
def test_bad_sizes_give_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        S4D(4, **kwargs)
    assert str(error.value) == message


def test_bad_input_shapes_name_the_expected_shape() -> None:
    layer = S4D(4, 4)
    with pytest.raises(ValueError, match=r"u must be \(B, T, 4\), got shape \(2, 3\)"):
        layer(torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"state must be complex \(2, 4, 2\)"):
        layer(torch.randn(2, 3, 4), torch.zeros(2, 4, 3, dtype=torch.cfloat))
