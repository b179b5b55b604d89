"""Recurrent cells: Elman RNN, LSTM and GRU (reset-after and textbook), one time step each.

Parameters follow torch.nn's names and layout so weights copy 1:1 and the fused kernels can run on them:
``weight_ih`` (G*H, E), ``weight_hh`` (G*H, H), ``bias_ih`` and ``bias_hh`` (G*H,), with the G gate blocks
stacked in torch's order (LSTM: i, f, g, o; GRU: r, z, n; RNN: G = 1).

Every cell splits its step in two so that layers can hoist the input projection out of the time loop:
``input_projection(x)`` computes x W_ih^T + b_ih for all steps at once, and ``step(xw_t, state)`` does the
recurrent part. ``forward(x, state)`` is ``step(input_projection(x), state)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_NONLINEARITIES = ("tanh", "relu")
_GRU_VARIANTS = ("reset_after", "textbook")


class LSTMState(NamedTuple):
    """Hidden and cell state of an LSTM: each (B, H) for a cell, (L*C, B, H) for a layer."""

    h: Tensor
    c: Tensor


def rnn_step(xw_t: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None, *, nonlinearity: str) -> Tensor:
    """Elman step: h_t = act(xw_t + W_hh h_{t-1} + b_hh), with xw_t = W_ih x_t + b_ih precomputed."""
    pre = xw_t + F.linear(h, weight_hh, bias_hh)
    return torch.tanh(pre) if nonlinearity == "tanh" else torch.relu(pre)


def lstm_step(xw_t: Tensor, state: LSTMState, weight_hh: Tensor, bias_hh: Tensor | None) -> LSTMState:
    """LSTM step on the precomputed input projection xw_t = W_ih x_t + b_ih (equations in ``LSTMCell``)."""
    h, c = state
    gates = xw_t + F.linear(h, weight_hh, bias_hh)  # (B, 4H) in torch's order i, f, g, o
    # chunk, not four slices: backward then joins the gate gradients with one cat instead of building a
    # zero-filled (B, 4H) gradient per slice.
    i, f, g, o = gates.chunk(4, dim=1)
    i_t, f_t, g_t, o_t = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_t = torch.addcmul(f_t * c, i_t, g_t)  # f_t * c_{t-1} + i_t * g_t
    h_t = o_t * torch.tanh(c_t)
    return LSTMState(h_t, c_t)


def gru_reset_after_step(xw_t: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None) -> Tensor:
    """GRU step with r applied after the recurrent matmul (torch.nn.GRU / cuDNN form, see ``GRUCell``)."""
    H = h.shape[1]
    hw = F.linear(h, weight_hh, bias_hh)  # (B, 3H) in torch's order r, z, n
    xw_rz, xw_n = xw_t.split([2 * H, H], dim=1)
    hw_rz, hw_n = hw.split([2 * H, H], dim=1)
    r_t, z_t = torch.sigmoid(xw_rz + hw_rz).chunk(2, dim=1)
    n_t = torch.tanh(torch.addcmul(xw_n, r_t, hw_n))  # W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn)
    return torch.lerp(n_t, h, z_t)  # (1 - z_t) * n_t + z_t * h_{t-1}


def gru_textbook_step(
    xw_t: Tensor,
    h: Tensor,
    weight_hh_rz: Tensor,
    bias_hh_rz: Tensor | None,
    weight_hh_n: Tensor,
    bias_hh_n: Tensor | None,
) -> Tensor:
    """GRU step with r applied to h_{t-1} before the recurrent matmul (Cho et al., 2014, see ``GRUCell``).

    The recurrent weights come pre-split into the (r, z) rows (2H, H) and the n rows (H, H): a layer splits
    them once per sequence, because slicing inside the time loop makes backward build a full-size
    gradient of weight_hh at every step.
    """
    xw_rz, xw_n = xw_t.split([2 * h.shape[1], h.shape[1]], dim=1)
    r_t, z_t = torch.sigmoid(xw_rz + F.linear(h, weight_hh_rz, bias_hh_rz)).chunk(2, dim=1)
    n_t = torch.tanh(xw_n + F.linear(r_t * h, weight_hh_n, bias_hh_n))
    return torch.lerp(n_t, h, z_t)  # (1 - z_t) * n_t + z_t * h_{t-1}


class _CellParameters(nn.Module):
    """Holds the torch.nn-layout parameters shared by every cell and the input projection."""

    num_gates: int = 1
    torch_class: type[nn.Module] = nn.RNNCell

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool,
        device: torch.device | str | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        if input_size < 1 or hidden_size < 1:
            raise ValueError(f"input_size ({input_size}) and hidden_size ({hidden_size}) must be >= 1")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        factory = {"device": device, "dtype": dtype}
        gh = self.num_gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(gh, input_size, **factory))
        self.weight_hh = nn.Parameter(torch.empty(gh, hidden_size, **factory))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(gh, **factory))
            self.bias_hh = nn.Parameter(torch.empty(gh, **factory))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """U(-1/sqrt(H), 1/sqrt(H)) for every parameter, as torch.nn."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias}"

    def input_projection(self, x: Tensor) -> Tensor:
        """x W_ih^T + b_ih, x (..., E) -> (..., G*H): the part that layers hoist out of the time loop."""
        return F.linear(x, self.weight_ih, self.bias_ih)

    def _check_input(self, x: Tensor) -> None:
        if x.dim() != 2:
            raise ValueError(f"expected x of shape (B, E), got shape {tuple(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"expected x with {self.input_size} features (input_size), got {x.shape[-1]}")

    def _zeros(self, x: Tensor) -> Tensor:
        return x.new_zeros(x.shape[0], self.hidden_size)

    def _check_state(self, name: str, state: Tensor, batch: int) -> None:
        expected = (batch, self.hidden_size)
        if tuple(state.shape) != expected:
            raise ValueError(f"state {name} must have shape (B, H) = {expected}, got {tuple(state.shape)}")

    def _copy_from(self, module: nn.Module) -> None:
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(getattr(module, name))

    def _to_torch_module(self, **options: object) -> nn.Module:
        w = self.weight_ih
        module = self.torch_class(
            self.input_size, self.hidden_size, bias=self.bias, device=w.device, dtype=w.dtype, **options
        )
        with torch.no_grad():
            for name, p in self.named_parameters():
                getattr(module, name).copy_(p)
        return module


class RNNCell(_CellParameters):
    """Elman recurrent cell (Elman, 1990).

    h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), or relu instead of tanh.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn b_ih and b_hh.
        nonlinearity: "tanh" or "relu".
        device, dtype: where and how the parameters are created.

    Inputs: x (B, E); state h (B, H), zeros if None.
    Outputs: h_t (B, H).
    Raises:
        ValueError: nonlinearity is not "tanh" or "relu"; x.shape[-1] != input_size (message shows both
            numbers); x is not 2-D or state is not (B, H).
    """

    num_gates = 1
    torch_class = nn.RNNCell

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if nonlinearity not in _NONLINEARITIES:
            raise ValueError(f"nonlinearity must be one of {_NONLINEARITIES}, got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias=bias, device=device, dtype=dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nonlinearity={self.nonlinearity!r}"

    def step(self, xw_t: Tensor, h: Tensor) -> Tensor:
        """One step from the precomputed xw_t = W_ih x_t + b_ih (B, G*H) and h_{t-1} (B, H) -> h_t (B, H)."""
        return rnn_step(xw_t, h, self.weight_hh, self.bias_hh, nonlinearity=self.nonlinearity)

    def recurrence(self) -> Callable[[Tensor, Tensor], Tensor]:
        """``step`` with the recurrent parameters bound once, for a layer's time loop."""
        return partial(rnn_step, weight_hh=self.weight_hh, bias_hh=self.bias_hh, nonlinearity=self.nonlinearity)

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        self._check_input(x)
        if state is None:
            state = self._zeros(x)
        self._check_state("h", state, x.shape[0])
        return self.step(self.input_projection(x), state)

    @classmethod
    def from_torch(cls, module: nn.RNNCell) -> RNNCell:
        """A cell with the sizes, nonlinearity, device, dtype and a copy of the weights of ``module``."""
        w = module.weight_ih
        cell = cls(
            module.input_size,
            module.hidden_size,
            bias=module.bias,
            nonlinearity=module.nonlinearity,
            device=w.device,
            dtype=w.dtype,
        )
        cell._copy_from(module)
        return cell

    def to_torch(self) -> nn.RNNCell:
        """The equivalent torch.nn.RNNCell with a copy of the weights."""
        return self._to_torch_module(nonlinearity=self.nonlinearity)


class LSTMCell(_CellParameters):
    """Long short-term memory cell (Hochreiter & Schmidhuber, 1997; forget gate of Gers et al., 2000).

    i_t = sigmoid(W_ii x_t + b_ii + W_hi h_{t-1} + b_hi)
    f_t = sigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf)
    g_t = tanh(W_ig x_t + b_ig + W_hg h_{t-1} + b_hg)
    o_t = sigmoid(W_io x_t + b_io + W_ho h_{t-1} + b_ho)
    c_t = f_t * c_{t-1} + i_t * g_t
    h_t = o_t * tanh(c_t)

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn b_ih and b_hh.
        forget_bias: added to b_if at init so f_t starts near 1 and the cell remembers by default
            (Jozefowicz et al., 2015); no effect when bias=False. 0.0 gives torch.nn's init.
        device, dtype: where and how the parameters are created.

    Inputs: x (B, E); state LSTMState(h, c), each (B, H), zeros if None.
    Outputs: LSTMState(h_t, c_t), each (B, H).
    Raises:
        ValueError: x.shape[-1] != input_size (message shows both numbers); x not 2-D; h or c not (B, H).
    """

    num_gates = 4
    torch_class = nn.LSTMCell

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool = True,
        forget_bias: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.forget_bias = forget_bias
        super().__init__(input_size, hidden_size, bias=bias, device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        """torch.nn's uniform init, then forget_bias added to the forget-gate block of b_ih."""
        super().reset_parameters()
        if self.bias_ih is not None:
            H = self.hidden_size
            with torch.no_grad():
                self.bias_ih[H : 2 * H] += self.forget_bias

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, forget_bias={self.forget_bias}"

    def step(self, xw_t: Tensor, state: LSTMState) -> LSTMState:
        """One step from the precomputed xw_t = W_ih x_t + b_ih (B, 4H) and (h, c), each (B, H)."""
        return lstm_step(xw_t, state, self.weight_hh, self.bias_hh)

    def recurrence(self) -> Callable[[Tensor, LSTMState], LSTMState]:
        """``step`` with the recurrent parameters bound once, for a layer's time loop."""
        return partial(lstm_step, weight_hh=self.weight_hh, bias_hh=self.bias_hh)

    def forward(self, x: Tensor, state: LSTMState | tuple[Tensor, Tensor] | None = None) -> LSTMState:
        self._check_input(x)
        if state is None:
            state = LSTMState(self._zeros(x), self._zeros(x))
        state = LSTMState(*state)
        self._check_state("h", state.h, x.shape[0])
        self._check_state("c", state.c, x.shape[0])
        return self.step(self.input_projection(x), state)

    @classmethod
    def from_torch(cls, module: nn.LSTMCell) -> LSTMCell:
        """A cell with the sizes, device, dtype and a copy of the weights of ``module`` (forget_bias=0.0: the
        copied biases already are what they are)."""
        w = module.weight_ih
        cell = cls(
            module.input_size,
            module.hidden_size,
            bias=module.bias,
            forget_bias=0.0,
            device=w.device,
            dtype=w.dtype,
        )
        cell._copy_from(module)
        return cell

    def to_torch(self) -> nn.LSTMCell:
        """The equivalent torch.nn.LSTMCell with a copy of the weights."""
        return self._to_torch_module()


class GRUCell(_CellParameters):
    """Gated recurrent unit (Cho et al., 2014), in torch.nn's reset-after form or the paper's textbook form.

    r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
    z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
    reset_after: n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))       (torch.nn.GRU, cuDNN)
    textbook:    n_t = tanh(W_in x_t + b_in + W_hn (r_t * h_{t-1}) + b_hn)       (Cho et al., 2014, eq. 8)
    h_t = (1 - z_t) * n_t + z_t * h_{t-1}

    The variants differ only in where r_t is applied. Both use torch.nn's interpolation, in which z_t weights
    the old state h_{t-1}, as in Cho et al.'s eq. (7): h_t = z * h_{t-1} + (1 - z) * h~_t. Chung et al. (2014)
    and several textbooks write h_t = (1 - z_t) * h_{t-1} + z_t * h~_t instead: their z_t is 1 - z_t here, a
    relabelling of the same gate, not a different model. In the textbook form b_hn sits outside r_t, so it
    only adds to b_in; it is kept for torch's parameter layout.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn b_ih and b_hh.
        variant: "reset_after" (torch.nn.GRU semantics, fused kernel available) or "textbook".
        device, dtype: where and how the parameters are created.

    Inputs: x (B, E); state h (B, H), zeros if None.
    Outputs: h_t (B, H).
    Raises:
        ValueError: variant is not "reset_after" or "textbook"; x.shape[-1] != input_size (message shows both
            numbers); x is not 2-D or state is not (B, H); ``to_torch`` on the textbook variant.
    """

    num_gates = 3
    torch_class = nn.GRUCell

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool = True,
        variant: str = "reset_after",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if variant not in _GRU_VARIANTS:
            raise ValueError(f"variant must be one of {_GRU_VARIANTS}, got {variant!r}")
        self.variant = variant
        super().__init__(input_size, hidden_size, bias=bias, device=device, dtype=dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}"

    def step(self, xw_t: Tensor, h: Tensor) -> Tensor:
        """One step from the precomputed xw_t = W_ih x_t + b_ih (B, 3H) and h_{t-1} (B, H) -> h_t (B, H)."""
        return self.recurrence()(xw_t, h)

    def recurrence(self) -> Callable[[Tensor, Tensor], Tensor]:
        """``step`` with the recurrent parameters bound (and for textbook, split) once, for a time loop."""
        if self.variant == "reset_after":
            return partial(gru_reset_after_step, weight_hh=self.weight_hh, bias_hh=self.bias_hh)
        H = self.hidden_size
        weight_hh_rz, weight_hh_n = self.weight_hh.split([2 * H, H])  # (2H, H), (H, H)
        bias_hh_rz, bias_hh_n = self.bias_hh.split([2 * H, H]) if self.bias else (None, None)
        return partial(
            gru_textbook_step,
            weight_hh_rz=weight_hh_rz,
            bias_hh_rz=bias_hh_rz,
            weight_hh_n=weight_hh_n,
            bias_hh_n=bias_hh_n,
        )

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        self._check_input(x)
        if state is None:
            state = self._zeros(x)
        self._check_state("h", state, x.shape[0])
        return self.step(self.input_projection(x), state)

    @classmethod
    def from_torch(cls, module: nn.GRUCell) -> GRUCell:
        """A reset-after cell with the sizes, device, dtype and a copy of the weights of ``module``."""
        w = module.weight_ih
        cell = cls(module.input_size, module.hidden_size, bias=module.bias, device=w.device, dtype=w.dtype)
        cell._copy_from(module)
        return cell

    def to_torch(self) -> nn.GRUCell:
        """The equivalent torch.nn.GRUCell with a copy of the weights (reset_after only).

        Raises:
            ValueError: the cell is the textbook variant, which torch.nn does not implement.
        """
        if self.variant != "reset_after":
            raise ValueError(
                f"torch.nn.GRUCell implements only variant='reset_after'; this cell is variant={self.variant!r}"
            )
        return self._to_torch_module()
