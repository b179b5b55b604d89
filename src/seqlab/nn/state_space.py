"""Diagonal linear state-space layer S4D (Gu, Gupta, Goel & Re, 2022, "On the Parameterization and Initialization
of Diagonal State Space Models"), in both of its forms, and the residual block that stacks it.

Each of the D channels of the input u (B, T, D) runs its own single-input single-output system with a diagonal
complex state of N/2 modes (the conjugate half of an N-dimensional real system is implied, so the output is twice
a real part). Continuous time (the paper's eq. 1):

    x'(t) = A x(t) + B u(t),      y(t) = C x(t) + D u(t),      A = diag(a_1 .. a_{N/2}),  Re a_n < 0

Zero-order hold with step Delta (u held constant over each step; section 2, "discretization"):

    A_bar = exp(Delta A),      B_bar = (Delta A)^{-1} (exp(Delta A) - I) Delta B = (exp(Delta A) - 1) / A * B

Recurrent form (the scan, O(T) steps, O(N) memory per channel; used for generation):

    x_t = A_bar x_{t-1} + B_bar u_t,      y_t = 2 Re(C x_t) + D u_t

Parallel form (used for training): unrolling the scan from x_{-1} = 0 gives a causal convolution with the SSM
kernel (section 2 and section 3.1, where the diagonal A makes the kernel a Vandermonde product):

    K = (C B_bar, C A_bar B_bar, ..., C A_bar^{T-1} B_bar),  K_l = 2 Re sum_n C_n A_bar_n^l B_bar_n,
    y = K * u + D u,

computed with FFTs of length 2T in O(T log T) per channel. From a state x_{-1} != 0 the convolution gains the
free response 2 Re(C A_bar^{t+1} x_{-1}), and the state after the last step is
x_{T-1} = A_bar^T x_{-1} + sum_k A_bar^{T-1-k} B_bar u_k, so a long stream can be read chunk by chunk in the
parallel form and continued one step at a time in the recurrent form.

Initialisation (section 4): Re a_n = -1/2 for every mode and Im a_n = pi n (S4D-Lin) or
(N / pi) (N / (2n + 1) - 1) (S4D-Inv); Delta log-uniform in [dt_min, dt_max] per channel; B = 1; C ~ CN(0, 1);
D ~ N(0, 1). A is parameterised as -exp(log_a_real) + i a_imag, so Re a_n < 0 stays true while training.
Complex parameters are stored as real (..., 2) views, so ``.double()`` and safetensors treat them as real tensors.

The block (the S4D repository's standard block, pre-norm): h + Dropout(GLU(W GELU(S4D(LayerNorm(h))))).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.validation import check_choice, check_int, check_probability, check_real

INITS = ("lin", "inv")


class SSMOutput(NamedTuple):
    """outputs: (B, T, D) for a sequence, (B, D) for one step. state: the state after the last step, a complex
    (B, D, N/2) tensor for a layer or block, a tuple of them (one per block) for a stack."""

    outputs: Tensor
    state: Tensor | tuple[Tensor, ...]


def check_state_size(state_size: object) -> None:
    """``state_size`` N is an even integer >= 2 (N/2 complex modes and their conjugates).

    Raises: ConfigError naming the value otherwise.
    """
    check_int("state_size", state_size, minimum=2)
    if state_size % 2:  # type: ignore[operator]
        raise ConfigError(f"state_size ({state_size}) must be even: N/2 complex modes and their conjugates")


def zoh_discretize(A: Tensor, B: Tensor, dt: Tensor) -> tuple[Tensor, Tensor]:
    """Zero-order hold of a diagonal system (module docstring): A_bar = exp(dt A), B_bar = (exp(dt A) - 1) / A * B.

    Inputs: A, B complex (D, N/2) (A's entries nonzero); dt (D,) real, positive.
    Outputs: (A_bar, B_bar), each complex (D, N/2).
    """
    dtA = dt.unsqueeze(-1) * A  # (D, N/2)
    A_bar = torch.exp(dtA)
    return A_bar, (A_bar - 1) / A * B


def vandermonde_powers(log_A_bar: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """The real and imaginary parts, each (D, N/2, T), of A_bar^l = exp(l log A_bar) for l = 0 .. T-1: no
    sequential products, and real exp / cos / sin, which run vectorised where a complex exp does not (about 10x
    on a CPU).

    Inputs: log_A_bar complex (D, N/2) (Delta A under zero-order hold).
    """
    steps = torch.arange(length, device=log_A_bar.device, dtype=log_A_bar.real.dtype)
    magnitude = torch.exp(log_A_bar.real.unsqueeze(-1) * steps)  # |A_bar|^l, (D, N/2, T)
    angle = log_A_bar.imag.unsqueeze(-1) * steps  # l arg(A_bar)
    return magnitude * torch.cos(angle), magnitude * torch.sin(angle)


def _real_part_sum(W: Tensor, powers: tuple[Tensor, Tensor]) -> Tensor:
    """(D, T): Re sum_n W_n A_bar_n^l = sum_n Re(W_n) Re(A_bar_n^l) - Im(W_n) Im(A_bar_n^l), in real arithmetic."""
    return torch.einsum("dn,dnl->dl", W.real, powers[0]) - torch.einsum("dn,dnl->dl", W.imag, powers[1])


def ssm_kernel(A_bar: Tensor, B_bar: Tensor, C: Tensor, length: int) -> Tensor:
    """The SSM convolution kernel K_l = 2 Re sum_n C_n A_bar_n^l B_bar_n, l = 0 .. T-1 (module docstring).

    Inputs: A_bar, B_bar, C complex (D, N/2); length T >= 1.
    Outputs: K (D, T) real.
    """
    return 2 * _real_part_sum(C * B_bar, vandermonde_powers(torch.log(A_bar), length))


def causal_convolution(u: Tensor, K: Tensor) -> Tensor:
    """y_t = sum_{k <= t} K_{t-k} u_k per channel, by FFTs of length 2T (no wrap-around, so causal).

    Inputs: u (B, T, D) real; K (D, T) real.
    Outputs: y (B, T, D).
    """
    T = u.shape[1]
    n = 2 * T  # zero padding to 2T turns the FFT's circular convolution into the linear one
    u_f = torch.fft.rfft(u.transpose(1, 2), n=n)  # (B, D, T + 1)
    K_f = torch.fft.rfft(K, n=n)  # (D, T + 1)
    return torch.fft.irfft(u_f * K_f, n=n)[..., :T].transpose(1, 2)  # (B, T, D)


class S4D(nn.Module):
    """Diagonal state-space layer S4D (Gu et al., 2022; equations in the module docstring), D independent channels.

    ``forward`` runs the parallel form (FFT convolution with the kernel, plus the free response of a given
    state), ``scan`` the recurrent form over the whole sequence, ``step`` one recurrent step; the three agree
    (tests/nn/test_state_space.py holds them together in float64, outputs and gradients).

    Args:
        d_model: D, channels in and out.
        state_size: N, the real state dimension per channel (even: N/2 complex modes are stored).
        init: "lin" (S4D-Lin) or "inv" (S4D-Inv), the imaginary parts of A.
        dt_min, dt_max: range of the log-uniform initial step Delta (0 < dt_min <= dt_max).
    Inputs of forward / scan: u (B, T, D) real; state complex (B, D, N/2), the state x_{-1} before the first
        step (None = zeros); keep_mask (B, T) bool or None: where False the input counts as zero, so left padding
        leaves a zero state at zero and a padded prompt gives its own results (a nonzero state would decay
        through the padding).
    Outputs: SSMOutput(outputs y (B, T, D), state x_{T-1} (B, D, N/2)).
    Raises: ConfigError (a ValueError) for an odd or non-positive state_size, an unknown init or a bad dt range;
        ValueError for an input that is not (B, T, D) or a state of the wrong shape (messages show both).
    """

    def __init__(
        self, d_model: int, state_size: int = 64, *, init: str = "lin", dt_min: float = 0.001, dt_max: float = 0.1
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_state_size(state_size)
        check_choice("init", init, INITS)
        check_real("dt_min", dt_min, greater_than=0.0)
        check_real("dt_max", dt_max, at_least=dt_min)
        self.d_model, self.state_size, self.init = d_model, state_size, init
        D, M = d_model, state_size // 2
        n = torch.arange(M, dtype=torch.float32)
        # S4D-Lin: Im a_n = pi n; S4D-Inv: Im a_n = (N / pi) (N / (2n + 1) - 1).
        imag = math.pi * n if init == "lin" else state_size / math.pi * (state_size / (2 * n + 1) - 1)
        log_dt = torch.rand(D) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = nn.Parameter(log_dt)  # (D,)
        self.log_a_real = nn.Parameter(torch.full((D, M), math.log(0.5)))  # Re a = -exp(log_a_real) = -1/2
        self.a_imag = nn.Parameter(imag.expand(D, M).clone())  # (D, N/2)
        self.B = nn.Parameter(torch.view_as_real(torch.ones(D, M, dtype=torch.cfloat)).clone())  # (D, N/2, 2)
        self.C = nn.Parameter(torch.view_as_real(torch.randn(D, M, dtype=torch.cfloat)))  # (D, N/2, 2)
        self.D = nn.Parameter(torch.randn(D))  # (D,) the skip term

    def continuous(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(A, B, C) complex (D, N/2) and Delta (D,) of the continuous system."""
        A = torch.complex(-torch.exp(self.log_a_real), self.a_imag)
        return A, torch.view_as_complex(self.B), torch.view_as_complex(self.C), torch.exp(self.log_dt)

    def discrete(self) -> tuple[Tensor, Tensor, Tensor]:
        """(A_bar, B_bar, C), each complex (D, N/2), by zero-order hold (``zoh_discretize``)."""
        A, B, C, dt = self.continuous()
        A_bar, B_bar = zoh_discretize(A, B, dt)
        return A_bar, B_bar, C

    def kernel(self, length: int) -> Tensor:
        """K (D, T) real, the convolution kernel of the discretised system (``ssm_kernel``)."""
        return ssm_kernel(*self.discrete(), length)

    def zero_state(self, batch_size: int) -> Tensor:
        """x = 0, complex (B, D, N/2), on the parameters' device, in their precision."""
        dtype = torch.complex128 if self.C.dtype == torch.float64 else torch.complex64
        return torch.zeros(batch_size, self.d_model, self.state_size // 2, dtype=dtype, device=self.C.device)

    def forward(self, u: Tensor, state: Tensor | None = None, *, keep_mask: Tensor | None = None) -> SSMOutput:
        """The parallel form (class docstring)."""
        u = self._check(u, state, keep_mask)
        T = u.shape[1]
        A, B, C, dt = self.continuous()
        B_bar = zoh_discretize(A, B, dt)[1]
        P_re, P_im = vandermonde_powers(dt.unsqueeze(-1) * A, T + 1)  # A_bar^0 .. A_bar^T, each (D, N/2, T + 1)
        K = 2 * _real_part_sum(C * B_bar, (P_re[..., :T], P_im[..., :T]))  # (D, T), as ssm_kernel
        y = causal_convolution(u, K) + self.D * u  # (B, T, D)
        # x_{T-1} = B_bar sum_j A_bar^j u_{T-1-j}: the inputs reversed in time, B_bar applied after the sum.
        u_reversed = u.flip(1)  # (B, T, D)
        summed = torch.complex(
            torch.einsum("dnt,btd->bdn", P_re[..., :T], u_reversed),
            torch.einsum("dnt,btd->bdn", P_im[..., :T], u_reversed),
        )  # (B, D, N/2)
        final = B_bar * summed
        if state is not None:
            Z = C * state  # (B, D, N/2); the free response is 2 Re sum_n Z_n A_bar_n^{t+1}
            free = torch.einsum("bdn,dnt->btd", Z.real, P_re[..., 1:]) - torch.einsum(
                "bdn,dnt->btd", Z.imag, P_im[..., 1:]
            )
            y = y + 2 * free
            final = final + torch.complex(P_re[..., T], P_im[..., T]) * state
        return SSMOutput(y, final)

    def scan(self, u: Tensor, state: Tensor | None = None, *, keep_mask: Tensor | None = None) -> SSMOutput:
        """The recurrent form over the whole sequence, one ``step`` per position (class docstring)."""
        u = self._check(u, state, keep_mask)
        x = self.zero_state(u.shape[0]) if state is None else state
        outputs = []
        for t in range(u.shape[1]):
            y_t, x = self.step(u[:, t], x)
            outputs.append(y_t)
        return SSMOutput(torch.stack(outputs, dim=1), x)

    def step(self, u_t: Tensor, state: Tensor | None) -> SSMOutput:
        """One recurrent step: u_t (B, D), state x_{t-1} (B, D, N/2) or None (zeros) -> SSMOutput(y_t (B, D), x_t).

        Raises: ValueError for u_t not (B, D) or a state of the wrong shape.
        """
        if u_t.dim() != 2 or u_t.shape[-1] != self.d_model:
            raise ValueError(f"u_t must be (B, {self.d_model}), got shape {tuple(u_t.shape)}")
        x = self.zero_state(u_t.shape[0]) if state is None else self._check_state(state, u_t.shape[0])
        A_bar, B_bar, C = self.discrete()
        x = A_bar * x + B_bar * u_t.unsqueeze(-1)  # x_t = A_bar x_{t-1} + B_bar u_t, (B, D, N/2)
        return SSMOutput(2 * (C * x).sum(-1).real + self.D * u_t, x)  # y_t = 2 Re(C x_t) + D u_t

    def _check(self, u: Tensor, state: Tensor | None, keep_mask: Tensor | None) -> Tensor:
        """u with its masked positions zeroed, after checking the shapes."""
        if u.dim() != 3 or u.shape[-1] != self.d_model:
            raise ValueError(f"u must be (B, T, {self.d_model}), got shape {tuple(u.shape)}")
        if state is not None:
            self._check_state(state, u.shape[0])
        if keep_mask is None:
            return u
        if keep_mask.shape != u.shape[:2] or keep_mask.dtype != torch.bool:
            raise ValueError(
                f"keep_mask must be bool {tuple(u.shape[:2])}, got {keep_mask.dtype} {tuple(keep_mask.shape)}"
            )
        return u * keep_mask.unsqueeze(-1)

    def _check_state(self, state: Tensor, batch_size: int) -> Tensor:
        expected = (batch_size, self.d_model, self.state_size // 2)
        if tuple(state.shape) != expected or not state.is_complex():
            raise ValueError(f"state must be complex {expected}, got {state.dtype} {tuple(state.shape)}")
        return state

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, state_size={self.state_size}, init={self.init!r}"


class S4DBlock(nn.Module):
    """Pre-norm residual block around S4D: h + Dropout(GLU(W GELU(Dropout(S4D(LayerNorm(h)))))), W: D -> 2D.

    The S4D repository's standard block (GELU after the SSM, a position-wise linear map to 2D halved by a GLU,
    Dauphin et al., 2017). Everything but the SSM acts on each position alone, so the block is causal and
    its ``forward`` (parallel form) and ``step`` (recurrent form) agree.

    Args:
        d_model: D.  state_size: N (even).  dropout: after the SSM's activation and after the GLU.
        init, dt_min, dt_max: of the S4D layer.
    Inputs of forward: h (B, T, D); state complex (B, D, N/2) or None; keep_mask (B, T) or None (``S4D``).
    Outputs: SSMOutput(outputs (B, T, D), state (B, D, N/2)). ``step``: h_t (B, D) -> SSMOutput((B, D), state);
        ``scan``: the recurrent form over the whole sequence.
    Raises: as ``S4D``; ConfigError for a dropout outside [0, 1).
    """

    def __init__(
        self,
        d_model: int,
        state_size: int = 64,
        *,
        dropout: float = 0.0,
        init: str = "lin",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
    ) -> None:
        super().__init__()
        check_probability("dropout", dropout)
        self.norm = nn.LayerNorm(d_model)
        self.ssm = S4D(d_model, state_size, init=init, dt_min=dt_min, dt_max=dt_max)
        self.output = nn.Linear(d_model, 2 * d_model)  # W, halved by the GLU
        self.dropout = nn.Dropout(dropout)

    def _mix(self, y: Tensor) -> Tensor:
        """The position-wise part after the SSM: (..., D) -> (..., D)."""
        return self.dropout(nn.functional.glu(self.output(self.dropout(nn.functional.gelu(y))), dim=-1))

    def forward(self, h: Tensor, state: Tensor | None = None, *, keep_mask: Tensor | None = None) -> SSMOutput:
        y, state = self.ssm(self.norm(h), state, keep_mask=keep_mask)
        return SSMOutput(h + self._mix(y), state)

    def step(self, h_t: Tensor, state: Tensor | None) -> SSMOutput:
        """One position: h_t (B, D) -> SSMOutput(outputs (B, D), state)."""
        y_t, state = self.ssm.step(self.norm(h_t), state)
        return SSMOutput(h_t + self._mix(y_t), state)

    def scan(self, h: Tensor, state: Tensor | None = None) -> SSMOutput:
        """The recurrent form over a whole sequence, one ``step`` per position: h (B, T, D) -> SSMOutput((B, T, D),
        state)."""
        outputs = []
        for t in range(h.shape[1]):
            y_t, state = self.step(h[:, t], state)
            outputs.append(y_t)
        return SSMOutput(torch.stack(outputs, dim=1), state)


class S4DStack(nn.Module):
    """Blocks applied in order, then an optional final norm; the state is one tensor per block.

    Args:
        blocks: the ``S4DBlock``s (at least one).  final_norm: applied to the last block's outputs, or None.
    Inputs of forward: h (B, T, D); state: a tuple of per-block states (``SSMOutput``), or None (zeros);
        keep_mask (B, T) or None (``S4D``).
    Outputs: SSMOutput(outputs (B, T, D), state tuple). ``step``: h_t (B, D) -> SSMOutput((B, D), state tuple).
    Raises: ValueError for an empty list of blocks or a state with another number of parts than blocks.
    """

    def __init__(self, blocks: Sequence[S4DBlock], final_norm: nn.Module | None = None) -> None:
        super().__init__()
        if not blocks:
            raise ValueError("S4DStack needs at least one block")
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm if final_norm is not None else nn.Identity()

    def _states(self, state: Sequence[Tensor] | None) -> Sequence[Tensor | None]:
        if state is None:
            return [None] * len(self.blocks)
        if len(state) != len(self.blocks):
            raise ValueError(f"state has {len(state)} parts, one per block expected ({len(self.blocks)})")
        return state

    def forward(
        self, h: Tensor, state: Sequence[Tensor] | None = None, *, keep_mask: Tensor | None = None
    ) -> SSMOutput:
        states = []
        for block, block_state in zip(self.blocks, self._states(state), strict=True):
            h, block_state = block(h, block_state, keep_mask=keep_mask)
            states.append(block_state)
        return SSMOutput(self.final_norm(h), tuple(states))

    def step(self, h_t: Tensor, state: Sequence[Tensor] | None) -> SSMOutput:
        """One position through every block: h_t (B, D) -> SSMOutput((B, D), state tuple)."""
        states = []
        for block, block_state in zip(self.blocks, self._states(state), strict=True):
            h_t, block_state = block.step(h_t, block_state)
            states.append(block_state)
        return SSMOutput(self.final_norm(h_t), tuple(states))


def s4d_stack(
    d_model: int,
    num_layers: int,
    *,
    state_size: int = 64,
    dropout: float = 0.0,
    init: str = "lin",
    final_norm: bool = True,
) -> S4DStack:
    """``num_layers`` ``S4DBlock``s of width D and state size N, and a final LayerNorm unless ``final_norm`` is
    False: the stack seqlab's models use.

    Raises: ConfigError for num_layers < 1, and as ``S4DBlock``.
    """
    check_int("num_layers", num_layers)
    blocks = [S4DBlock(d_model, state_size, dropout=dropout, init=init) for _ in range(num_layers)]
    return S4DStack(blocks, nn.LayerNorm(d_model) if final_norm else None)
