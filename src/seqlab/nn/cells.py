"""Recurrent cells: Elman RNN, LSTM and GRU (reset-after and textbook), one time step each.

Parameters follow torch.nn's names and layout so weights copy 1:1 and the fused kernels can run on them:
``weight_ih`` (G*H, E), ``weight_hh`` (G*H, H), ``bias_ih`` and ``bias_hh`` (G*H,), with the G gate blocks
stacked in torch's order (LSTM: i, f, g, o; GRU: r, z, n; RNN: G = 1); an LSTM with a projection adds
``weight_hr`` (P, H) and its ``weight_hh`` is (4H, P).

Every cell splits its step in two so that layers can hoist the input projection out of the time loop:
``input_projection(x)`` computes x W_ih^T + b_ih for all steps at once, and ``step(xw_t, state)`` does the
recurrent part. ``forward(x, state)`` is ``step(input_projection(x), state)``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from seqlab.nn.cell_parameters import RECURRENT_INITS, CellParameters
from seqlab.nn.functional.recurrence import (
    LSTMState,
    gru_reset_after_step,
    gru_textbook_step,
    lstm_step,
    orthogonal_gate_blocks_,
    rnn_step,
)
from seqlab.validation import check_choice, check_int

_NONLINEARITIES = ("tanh", "relu")
GRU_VARIANTS = ("reset_after", "textbook")

__all__ = [
    "GRU_VARIANTS",
    "RECURRENT_INITS",
    "GRUCell",
    "LSTMCell",
    "LSTMState",
    "RNNCell",
    "flip_update_gate",
    "orthogonal_gate_blocks_",
]

# Parameters whose z rows flip_update_gate negates: a plain GRU's matmul weights and biases; a layer-norm GRU's
# LN gains and shifts (its bias_ih / bias_hh), never its weights, which LN_rz normalises together with r's.
_PLAIN_GATE_PARAMETERS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
_LAYER_NORM_GATE_PARAMETERS = ("gain_ih", "gain_hh", "bias_ih", "bias_hh")


class RNNCell(CellParameters):
    """Elman recurrent cell (Elman, 1990).

    h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), or relu instead of tanh.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn b_ih and b_hh.
        nonlinearity: "tanh" or "relu".
        recurrent_init: "uniform" (torch.nn's U(-1/sqrt(H), 1/sqrt(H))) or "orthogonal" (each gate's block of
            weight_hh orthogonal, Saxe et al., 2014; the other parameters stay uniform).
        device: where the parameters are created.
        dtype: the parameters' floating-point type.

    Inputs: x (B, E); state h (B, H), zeros if None.
    Outputs: h_t (B, H).
    Raises:
        ValueError: nonlinearity is not "tanh" or "relu"; recurrent_init is not "uniform" or "orthogonal";
            x.shape[-1] != input_size (message shows both numbers); x is not 2-D or state is not (B, H).
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
        recurrent_init: str = "uniform",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        check_choice("nonlinearity", nonlinearity, _NONLINEARITIES)
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias=bias, recurrent_init=recurrent_init, device=device, dtype=dtype)
        self.reset_parameters()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nonlinearity={self.nonlinearity!r}"

    def step(self, xw_t: Tensor, h: Tensor) -> Tensor:
        """One step from the precomputed xw_t = W_ih x_t + b_ih (B, G*H) and h_{t-1} (B, H) -> h_t (B, H)."""
        return rnn_step(xw_t, h, self.weight_hh, self.bias_hh, nonlinearity=self.nonlinearity)

    def recurrence(self, h_mask: Tensor | None = None) -> Callable[[Tensor, Tensor], Tensor]:
        """``step`` with the recurrent parameters bound once, for a layer's time loop; h_mask (B, H), if
        given, multiplies h_{t-1} where it enters the recurrent matmul (variational dropout)."""
        return partial(
            rnn_step,
            weight_hh=self.weight_hh,
            bias_hh=self.bias_hh,
            nonlinearity=self.nonlinearity,
            h_mask=h_mask,
        )

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        self._check_input(x)
        if state is None:
            state = self._zeros(x, self.hidden_size)
        self._check_state("h", state, x.shape[0], self.hidden_size)
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


class LSTMCell(CellParameters):
    """Long short-term memory cell (Hochreiter & Schmidhuber, 1997; forget gate of Gers et al., 2000).

    i_t = sigmoid(W_ii x_t + b_ii + W_hi h_{t-1} + b_hi)
    f_t = sigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf)
    g_t = tanh(W_ig x_t + b_ig + W_hg h_{t-1} + b_hg)
    o_t = sigmoid(W_io x_t + b_io + W_ho h_{t-1} + b_ho)
    c_t = f_t * c_{t-1} + i_t * g_t
    h_t = o_t * tanh(c_t), or with proj_size = P > 0: h_t = W_hr (o_t * tanh(c_t))

    The projection (LSTMP, Sak et al., 2014, as torch.nn.LSTM's proj_size) makes h_t, and so the recurrent
    input of every gate, P < H features wide while c_t keeps H.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn b_ih and b_hh.
        forget_bias: added to b_if at init so f_t starts near 1 and the cell remembers by default
            (Jozefowicz et al., 2015); no effect when bias=False. 0.0 gives torch.nn's init.
        proj_size: P; 0 for no projection. weight_hh becomes (4H, P) and weight_hr (P, H) is added.
        recurrent_init: "uniform" (torch.nn's U(-1/sqrt(H), 1/sqrt(H))) or "orthogonal" (each gate's block of
            weight_hh, (H, H) or (H, P), orthogonal, Saxe et al., 2014; weight_hr and the rest stay uniform).
        device: where the parameters are created.
        dtype: the parameters' floating-point type.

    Inputs: x (B, E); state LSTMState(h, c), h (B, H) or (B, P), c (B, H), zeros if None.
    Outputs: LSTMState(h_t, c_t), h_t (B, H) or (B, P), c_t (B, H).
    Raises:
        ValueError: proj_size outside [0, H); recurrent_init is not "uniform" or "orthogonal";
            x.shape[-1] != input_size (message shows both numbers); x not 2-D; h or c of the wrong shape;
            ``to_torch`` with proj_size > 0 (torch.nn.LSTMCell has no projection).
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
        proj_size: int = 0,
        recurrent_init: str = "uniform",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        check_int("proj_size", proj_size, minimum=0, maximum=hidden_size - 1)
        self.forget_bias = forget_bias
        self.proj_size = proj_size
        super().__init__(
            input_size,
            hidden_size,
            bias=bias,
            recurrent_init=recurrent_init,
            proj_size=proj_size,
            device=device,
            dtype=dtype,
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The base init (uniform, optionally orthogonal recurrent blocks), then forget_bias added to the
        forget-gate block of b_ih."""
        super().reset_parameters()
        self._add_forget_bias(self.forget_bias)

    def extra_repr(self) -> str:
        proj = f", proj_size={self.proj_size}" if self.proj_size else ""
        return f"{super().extra_repr()}, forget_bias={self.forget_bias}{proj}"

    def step(self, xw_t: Tensor, state: LSTMState) -> LSTMState:
        """One step from the precomputed xw_t = W_ih x_t + b_ih (B, 4H) and (h, c)."""
        return self.recurrence()(xw_t, state)

    def recurrence(self, h_mask: Tensor | None = None) -> Callable[[Tensor, LSTMState], LSTMState]:
        """``step`` with the recurrent parameters bound once, for a layer's time loop; h_mask (B, H) or (B, P), if
        given, multiplies h_{t-1} where it enters the recurrent matmul (variational dropout)."""
        weight_hr = self.weight_hr if self.proj_size else None
        return partial(lstm_step, weight_hh=self.weight_hh, bias_hh=self.bias_hh, weight_hr=weight_hr, h_mask=h_mask)

    def forward(self, x: Tensor, state: LSTMState | tuple[Tensor, Tensor] | None = None) -> LSTMState:
        self._check_input(x)
        if state is None:
            state = LSTMState(self._zeros(x, self.output_size), self._zeros(x, self.hidden_size))
        state = LSTMState(*state)
        self._check_state("h", state.h, x.shape[0], self.output_size)
        self._check_state("c", state.c, x.shape[0], self.hidden_size)
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
        """The equivalent torch.nn.LSTMCell with a copy of the weights.

        Raises:
            ValueError: proj_size > 0, which torch.nn.LSTMCell does not implement (torch.nn.LSTM does).
        """
        if self.proj_size:
            raise ValueError(f"torch.nn.LSTMCell has no projection; this cell has proj_size={self.proj_size}")
        return self._to_torch_module()


class GRUCell(CellParameters):
    """Gated recurrent unit (Cho et al., 2014), in torch.nn's reset-after form or the seeds' textbook form.

    reset_after (torch.nn.GRU, cuDNN; fused kernel available):
        r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
        z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
        n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
        h_t = (1 - z_t) * n_t + z_t * h_{t-1}                    z_t weights the old state
    textbook (the seeds, as Chung et al., 2014 write it):
        r_t = sigmoid(W_r x_t + U_r h_{t-1} + b_r)
        z_t = sigmoid(W_z x_t + U_z h_{t-1} + b_z)
        h~_t = tanh(W x_t + U (r_t * h_{t-1}) + b)              reset before the matmul (Cho et al., eq. 8)
        h_t = (1 - z_t) * h_{t-1} + z_t * h~_t                   z_t weights the candidate

    The forms differ in two places. Where r_t applies is a different model. Which way z_t points is a
    relabelling of the same gate: since sigmoid(-a) = 1 - sigmoid(a), a gate z' = 1 - z is computed by
    the same equation with the z rows of W_ih, W_hh, b_ih and b_hh negated, and ``flip_update_gate``
    does exactly that to a state dict (it is its own inverse). Weights from torch's convention, flipped,
    give the seeds' textbook cell the interpolation of torch's; with W_hn = 0 and b_hn = 0, where r_t has
    nothing to act on, such a cell equals torch.nn.GRUCell. In the textbook form b_hn sits outside r_t,
    so it only adds to b_in (the seeds' b); it is kept for torch's parameter layout. Parameters use
    torch's names and gate order r, z, n in both forms: W_r, W_z, W are the row blocks of weight_ih and
    U_r, U_z, U those of weight_hh.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn b_ih and b_hh.
        variant: "reset_after" (torch.nn.GRU semantics, fused kernel available) or "textbook".
        recurrent_init: "uniform" (torch.nn's U(-1/sqrt(H), 1/sqrt(H))) or "orthogonal" (each gate's block of
            weight_hh orthogonal, Saxe et al., 2014; the other parameters stay uniform).
        device: where the parameters are created.
        dtype: the parameters' floating-point type.

    Inputs: x (B, E); state h (B, H), zeros if None.
    Outputs: h_t (B, H).
    Raises:
        ValueError: variant is not "reset_after" or "textbook"; recurrent_init is not "uniform" or
            "orthogonal"; x.shape[-1] != input_size (message shows both numbers); x is not 2-D or state is
            not (B, H); ``to_torch`` on the textbook variant.
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
        recurrent_init: str = "uniform",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        check_choice("variant", variant, GRU_VARIANTS)
        self.variant = variant
        super().__init__(input_size, hidden_size, bias=bias, recurrent_init=recurrent_init, device=device, dtype=dtype)
        self.reset_parameters()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}"

    def step(self, xw_t: Tensor, h: Tensor) -> Tensor:
        """One step from the precomputed xw_t = W_ih x_t + b_ih (B, 3H) and h_{t-1} (B, H) -> h_t (B, H)."""
        return self.recurrence()(xw_t, h)

    def recurrence(self, h_mask: Tensor | None = None) -> Callable[[Tensor, Tensor], Tensor]:
        """``step`` with the recurrent parameters bound (and for textbook, split) once, for a time loop;
        h_mask (B, H), if given, multiplies h_{t-1} where it enters the recurrent matmuls (variational
        dropout), not in the interpolation with z_t."""
        if self.variant == "reset_after":
            return partial(gru_reset_after_step, weight_hh=self.weight_hh, bias_hh=self.bias_hh, h_mask=h_mask)
        H = self.hidden_size
        weight_hh_rz, weight_hh_n = self.weight_hh.split([2 * H, H])  # (2H, H), (H, H)
        bias_hh_rz, bias_hh_n = self.bias_hh.split([2 * H, H]) if self.bias else (None, None)
        if torch.compiler.is_exporting():  # torch.export's scan refuses two views of one tensor among its inputs
            weight_hh_rz, weight_hh_n = weight_hh_rz.clone(), weight_hh_n.clone()
            if self.bias:
                bias_hh_rz, bias_hh_n = bias_hh_rz.clone(), bias_hh_n.clone()
        return partial(
            gru_textbook_step,
            weight_hh_rz=weight_hh_rz,
            bias_hh_rz=bias_hh_rz,
            weight_hh_n=weight_hh_n,
            bias_hh_n=bias_hh_n,
            h_mask=h_mask,
        )

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        self._check_input(x)
        if state is None:
            state = self._zeros(x, self.hidden_size)
        self._check_state("h", state, x.shape[0], self.hidden_size)
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


def flip_update_gate(state_dict: dict[str, Tensor], hidden_size: int) -> dict[str, Tensor]:
    """A copy of a GRU state dict with its update gate pointing the other way, z' = 1 - z.

    sigmoid(-a) = 1 - sigmoid(a), so negating the z row block (rows H:2H, torch's order r, z, n) of every
    parameter that enters z_t's pre-activation linearly turns torch's z (weighting h_{t-1}) into the seeds'
    z (weighting h~_t) and back: ``GRUCell(variant="textbook")`` loaded with ``flip_update_gate(sd, H)`` of a
    textbook state dict ``sd`` trained in torch's z convention computes what that cell computed. Works on a
    cell's or a whole layer's (``GRU``) state dict, plain or layer-normalised (detected by ``gain_ih``: there
    the z blocks of the LN gains and shifts are negated, see ``LayerNormGRUCell``).

    Args:
        state_dict: parameter name -> tensor, names ending in torch's weight_ih, weight_hh, bias_ih, bias_hh
            (and gain_ih, gain_hh for layer norm), first dimension 3H.
        hidden_size: H.
    Returns: a new dict; tensors not flipped are shared with the input.
    Raises:
        ValueError: a flipped tensor's first dimension is not 3 * hidden_size (message shows both).
    """
    layer_norm = any(name.rsplit(".", 1)[-1] == "gain_ih" for name in state_dict)
    targets = _LAYER_NORM_GATE_PARAMETERS if layer_norm else _PLAIN_GATE_PARAMETERS
    flipped = dict(state_dict)
    for name, tensor in state_dict.items():
        if name.rsplit(".", 1)[-1] not in targets:
            continue
        if tensor.shape[0] != 3 * hidden_size:
            raise ValueError(f"{name} has {tensor.shape[0]} rows, expected 3 * hidden_size = {3 * hidden_size}")
        r, z, n = tensor.split(hidden_size)
        flipped[name] = torch.cat([r, -z, n])
    return flipped
