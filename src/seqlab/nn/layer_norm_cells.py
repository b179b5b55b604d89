"""Layer-normalised LSTM and GRU cells (Ba, Kiros & Hinton, 2016, "Layer Normalization", arXiv:1607.06450).

Ba et al. (Sec. 3.1) normalise the summed inputs of a recurrent layer over its hidden units at every step:

    LN(z; gamma, beta) = gamma * (z - mean(z)) / sqrt(var(z) + eps) + beta   (biased var over z's units)

and, for gated cells (their supplementary material, LN-LSTM), normalise the input term W_x x_t and the
recurrent term W_h h_{t-1} separately, each with its own gain and bias, before adding them.

Where the statistics are taken:
- LSTM: over the whole 4H pre-activation vector of each term, as Ba et al.'s equations write it and as the
  authors' reference code does (github.com/ryankiros/layer-norm, ``layers.py``, ``lnlstm_layer``: gains of
  size 4*dim). Some libraries normalise each gate's H-block on its own instead (TensorFlow's
  ``LayerNormBasicLSTMCell``); both are invariant to re-scaling W_hh, but only per-gate statistics are
  invariant to re-scaling one gate's rows.
- GRU: over the (r, z) block (2H) and the candidate block n (H) of each term separately, as the authors'
  ``lngru_layer`` does. The split is forced in the textbook form, where the recurrent part of n is a different
  product, W_hn (r_t * h_{t-1}); using it in both variants keeps one parameter layout for both.

Parameters keep torch.nn's names and layout (``weight_ih`` (G*H, E), ``weight_hh`` (G*H, H), gate order
LSTM i, f, g, o and GRU r, z, n) plus the LN gains ``gain_ih``, ``gain_hh`` (G*H,). No bias enters a
matmul: ``bias_ih`` and ``bias_hh`` are the LN shifts beta of the input and recurrent terms, so that
``input_projection(x)`` = LN(W_ih x; gain_ih, bias_ih) is still per step and per term, and layers hoist it
out of the time loop exactly as for the plain cells in ``cells.py``; ``step``, ``recurrence`` and
``forward`` follow the same protocol.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.cell_parameters import CellParameters
from seqlab.nn.cells import GRU_VARIANTS
from seqlab.nn.functional.recurrence import LSTMState, dropped, orthogonal_gate_blocks_
from seqlab.validation import check_choice, check_real


def _norm(z: Tensor, gain: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    """LN(z; gain, bias) over the last dimension of z, whose size is gain's."""
    return F.layer_norm(z, gain.shape, gain, bias, eps)


def layer_norm_lstm_step(
    xw_t: Tensor,
    state: LSTMState,
    weight_hh: Tensor,
    gain_hh: Tensor,
    bias_hh: Tensor | None,
    gain_c: Tensor,
    bias_c: Tensor | None,
    *,
    eps: float,
    h_mask: Tensor | None = None,
) -> LSTMState:
    """LN-LSTM step on the precomputed, normalised input term xw_t (equations in ``LayerNormLSTMCell``)."""
    h, c = state
    hw = _norm(F.linear(dropped(h, h_mask), weight_hh), gain_hh, bias_hh, eps)
    gates = xw_t + hw  # (B, 4H) in torch's order i, f, g, o
    i, f, g, o = gates.chunk(4, dim=1)
    i_t, f_t, g_t, o_t = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_t = torch.addcmul(f_t * c, i_t, g_t)  # f_t * c_{t-1} + i_t * g_t
    # Only the read-out sees LN(c_t); the carried c_t stays unnormalised, as in Ba et al.
    h_t = o_t * torch.tanh(_norm(c_t, gain_c, bias_c, eps))
    return LSTMState(h_t, c_t)


def layer_norm_gru_reset_after_step(
    xw_t: Tensor,
    h: Tensor,
    weight_hh: Tensor,
    gain_hh_rz: Tensor,
    bias_hh_rz: Tensor | None,
    gain_hh_n: Tensor,
    bias_hh_n: Tensor | None,
    *,
    eps: float,
    h_mask: Tensor | None = None,
) -> Tensor:
    """LN-GRU step, r applied after the recurrent matmul (equations in ``LayerNormGRUCell``)."""
    H = h.shape[1]
    hw_rz, hw_n = F.linear(dropped(h, h_mask), weight_hh).split([2 * H, H], dim=1)  # (B, 2H), (B, H)
    xw_rz, xw_n = xw_t.split([2 * H, H], dim=1)
    r_t, z_t = torch.sigmoid(xw_rz + _norm(hw_rz, gain_hh_rz, bias_hh_rz, eps)).chunk(2, dim=1)
    n_t = torch.tanh(torch.addcmul(xw_n, r_t, _norm(hw_n, gain_hh_n, bias_hh_n, eps)))
    return torch.lerp(n_t, h, z_t)  # (1 - z_t) * n_t + z_t * h_{t-1}


def layer_norm_gru_textbook_step(
    xw_t: Tensor,
    h: Tensor,
    weight_hh_rz: Tensor,
    gain_hh_rz: Tensor,
    bias_hh_rz: Tensor | None,
    weight_hh_n: Tensor,
    gain_hh_n: Tensor,
    bias_hh_n: Tensor | None,
    *,
    eps: float,
    h_mask: Tensor | None = None,
) -> Tensor:
    """LN-GRU step, r applied to h_{t-1} before W_hn and z_t weighting the candidate (equations in
    ``LayerNormGRUCell``).

    The recurrent parameters come pre-split into the (r, z) and n blocks: slicing them inside the time loop
    would make backward build a full-size gradient of each at every step.
    """
    xw_rz, xw_n = xw_t.split([2 * h.shape[1], h.shape[1]], dim=1)
    h_in = dropped(h, h_mask)
    hw_rz = _norm(F.linear(h_in, weight_hh_rz), gain_hh_rz, bias_hh_rz, eps)
    r_t, z_t = torch.sigmoid(xw_rz + hw_rz).chunk(2, dim=1)
    h_tilde = torch.tanh(xw_n + _norm(F.linear(r_t * h_in, weight_hh_n), gain_hh_n, bias_hh_n, eps))
    return torch.lerp(h, h_tilde, z_t)  # (1 - z_t) * h_{t-1} + z_t * h~_t, the seeds' z


class _LayerNormCell(CellParameters):
    """The plain cells' parameters (``CellParameters``: weight_ih, weight_hh, and bias_ih, bias_hh here used as LN
    shifts) plus the LN gains of both terms, shared by the LN-LSTM and LN-GRU cells."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool,
        eps: float,
        recurrent_init: str,
        device: torch.device | str | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias=bias, recurrent_init=recurrent_init, device=device, dtype=dtype)
        check_real("eps", eps, greater_than=0.0)
        self.eps = eps
        gh = self.num_gates * hidden_size
        self.gain_ih = nn.Parameter(torch.empty(gh, device=device, dtype=dtype))
        self.gain_hh = nn.Parameter(torch.empty(gh, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)) as torch.nn; LN gains 1 and shifts 0 (Ba et al.'s code); then, for
        recurrent_init="orthogonal", each gate's block of weight_hh orthogonal (Saxe et al., 2014)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for name, p in self.named_parameters():
            if name.startswith("weight"):
                nn.init.uniform_(p, -bound, bound)
            elif name.startswith("gain"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)
        if self.recurrent_init == "orthogonal":
            orthogonal_gate_blocks_(self.weight_hh, self.num_gates)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, eps={self.eps}"


class LayerNormLSTMCell(_LayerNormCell):
    """Layer-normalised LSTM cell (Ba, Kiros & Hinton, 2016, supplementary material, LN-LSTM).

    (i, f, g, o) = LN(W_ih x_t; gain_ih, bias_ih) + LN(W_hh h_{t-1}; gain_hh, bias_hh)    (4H, torch's order)
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
    h_t = sigmoid(o) * tanh(LN(c_t; gain_c, bias_c))

    Each LN takes its statistics over the whole 4H vector of its term (see the module docstring), so the
    gate order changes only the layout. Ba et al.'s (alpha_2, beta_2), (alpha_1, beta_1), (alpha_3, beta_3)
    are (gain_ih, bias_ih), (gain_hh, bias_hh), (gain_c, bias_c); their extra bias b only ever adds to
    beta_1 + beta_2, so it is folded into them (as torch.nn.LSTM's b_ih + b_hh are one bias in two tensors).
    The carried c_t is not normalised; only h_t's read-out is.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn the LN shifts bias_ih, bias_hh (4H,) and bias_c (H,); False leaves every LN unshifted.
        forget_bias: added to the forget-gate block of bias_ih at init so f_t starts near sigmoid(1)
            (Jozefowicz et al., 2015); no effect when bias=False.
        eps: added to the variance in every LN (1e-5, as Ba et al.'s code and torch.nn.LayerNorm).
        recurrent_init: "uniform" or "orthogonal" (each gate's block of weight_hh), as for ``LSTMCell``.
        device: where the parameters are created.
        dtype: the parameters' floating-point type.

    Inputs: x (B, E); state LSTMState(h, c), each (B, H), zeros if None.
    Outputs: LSTMState(h_t, c_t), each (B, H).
    Raises:
        ValueError: input_size or hidden_size < 1; eps <= 0; x.shape[-1] != input_size (message shows both
            numbers); x not 2-D; h or c not (B, H).
    """

    num_gates = 4

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool = True,
        forget_bias: float = 1.0,
        eps: float = 1e-5,
        recurrent_init: str = "uniform",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            input_size, hidden_size, bias=bias, eps=eps, recurrent_init=recurrent_init, device=device, dtype=dtype
        )
        self.forget_bias = forget_bias
        factory = {"device": device, "dtype": dtype}
        self.gain_c = nn.Parameter(torch.empty(hidden_size, **factory))
        if bias:
            self.bias_c = nn.Parameter(torch.empty(hidden_size, **factory))
        else:
            self.register_parameter("bias_c", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The shared init, then forget_bias added to the forget-gate block of bias_ih."""
        super().reset_parameters()
        self._add_forget_bias(self.forget_bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, forget_bias={self.forget_bias}"

    def input_projection(self, x: Tensor) -> Tensor:
        """LN(x W_ih^T; gain_ih, bias_ih), x (..., E) -> (..., 4H): per step, so a layer hoists it out of
        the time loop."""
        return _norm(F.linear(x, self.weight_ih), self.gain_ih, self.bias_ih, self.eps)

    def step(self, xw_t: Tensor, state: LSTMState) -> LSTMState:
        """One step from the precomputed input term xw_t (B, 4H) and (h, c), each (B, H)."""
        return self.recurrence()(xw_t, state)

    def recurrence(self, h_mask: Tensor | None = None) -> Callable[[Tensor, LSTMState], LSTMState]:
        """``step`` with the recurrent parameters bound once, for a layer's time loop; h_mask (B, H), if
        given, multiplies h_{t-1} where it enters W_hh (variational dropout), not c_{t-1}."""
        return partial(
            layer_norm_lstm_step,
            weight_hh=self.weight_hh,
            gain_hh=self.gain_hh,
            bias_hh=self.bias_hh,
            gain_c=self.gain_c,
            bias_c=self.bias_c,
            eps=self.eps,
            h_mask=h_mask,
        )

    def forward(self, x: Tensor, state: LSTMState | tuple[Tensor, Tensor] | None = None) -> LSTMState:
        self._check_input(x)
        if state is None:
            state = LSTMState(self._zeros(x, self.hidden_size), self._zeros(x, self.hidden_size))
        state = LSTMState(*state)
        self._check_state("h", state.h, x.shape[0], self.hidden_size)
        self._check_state("c", state.c, x.shape[0], self.hidden_size)
        return self.step(self.input_projection(x), state)


class LayerNormGRUCell(_LayerNormCell):
    """Layer-normalised GRU cell (Ba, Kiros & Hinton, 2016; block layout of the authors' ``lngru_layer``).

    With LN_rz over the (r, z) block (2H) and LN_n over the n block (H) of a term, each with its slice of
    that term's gain and bias:

    r_t, z_t = sigmoid(LN_rz(W_i{r,z} x_t) + LN_rz(W_h{r,z} h_{t-1}))
    reset_after: n_t = tanh(LN_n(W_in x_t) + r_t * LN_n(W_hn h_{t-1}))       (as torch.nn.GRU, normalised)
                 h_t = (1 - z_t) * n_t + z_t * h_{t-1}
    textbook:    h~_t = tanh(LN_n(W_in x_t) + LN_n(W_hn (r_t * h_{t-1})))    (the seeds' GRU, normalised)
                 h_t = (1 - z_t) * h_{t-1} + z_t * h~_t

    In reset_after, the normalised recurrent term LN(W_hh h_{t-1}) (shift bias_hh included) takes the place
    of torch.nn.GRU's W_hh h_{t-1} + b_hh, so r_t scales its n block after normalisation. In textbook,
    r_t * h_{t-1} must exist before W_hn can act, so the n block is normalised on its own product; bias_hn
    then only adds to bias_in, as b_hn does in the plain textbook GRU. As in ``GRUCell``, z_t weights the old
    state in reset_after (torch.nn.GRU) and the candidate in textbook (the seeds); ``flip_update_gate`` maps
    one convention onto the other by negating the z blocks of the LN gains and shifts (LN_rz normalises the
    r and z rows together, so negating the z rows of W would change its statistics; negating the z block's
    gain and shift negates its output exactly).

    Args:
        input_size: E, features per step.
        hidden_size: H.
        bias: learn the LN shifts bias_ih and bias_hh (3H,); False leaves every LN unshifted.
        variant: "reset_after" or "textbook" (where r_t is applied, see ``seqlab.nn.cells.GRUCell``).
        eps: added to the variance in every LN.
        recurrent_init: "uniform" or "orthogonal" (each gate's block of weight_hh), as for ``GRUCell``.
        device: where the parameters are created.
        dtype: the parameters' floating-point type.

    Inputs: x (B, E); state h (B, H), zeros if None.
    Outputs: h_t (B, H).
    Raises:
        ValueError: variant is not "reset_after" or "textbook"; input_size or hidden_size < 1; eps <= 0;
            x.shape[-1] != input_size (message shows both numbers); x not 2-D or state not (B, H).
    """

    num_gates = 3

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool = True,
        variant: str = "reset_after",
        eps: float = 1e-5,
        recurrent_init: str = "uniform",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        check_choice("variant", variant, GRU_VARIANTS)
        super().__init__(
            input_size, hidden_size, bias=bias, eps=eps, recurrent_init=recurrent_init, device=device, dtype=dtype
        )
        self.variant = variant
        self.reset_parameters()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}"

    def _blocks(self, p: Tensor | None) -> tuple[Tensor, Tensor] | tuple[None, None]:
        """p split into its (r, z) rows (2H, ...) and n rows (H, ...); (None, None) for an absent bias."""
        H = self.hidden_size
        return (None, None) if p is None else p.split([2 * H, H])

    def input_projection(self, x: Tensor) -> Tensor:
        """LN_rz and LN_n of x W_ih^T, x (..., E) -> (..., 3H): per step, so a layer hoists it out of the
        time loop."""
        H = self.hidden_size
        xw_rz, xw_n = F.linear(x, self.weight_ih).split([2 * H, H], dim=-1)  # (..., 2H), (..., H)
        (gain_rz, gain_n), (bias_rz, bias_n) = self._blocks(self.gain_ih), self._blocks(self.bias_ih)
        xw_rz, xw_n = _norm(xw_rz, gain_rz, bias_rz, self.eps), _norm(xw_n, gain_n, bias_n, self.eps)
        return torch.cat([xw_rz, xw_n], dim=-1)  # (..., 3H)

    def step(self, xw_t: Tensor, h: Tensor) -> Tensor:
        """One step from the precomputed input term xw_t (B, 3H) and h_{t-1} (B, H) -> h_t (B, H)."""
        return self.recurrence()(xw_t, h)

    def recurrence(self, h_mask: Tensor | None = None) -> Callable[[Tensor, Tensor], Tensor]:
        """``step`` with the recurrent parameters bound and split into blocks once, for a time loop; h_mask
        (B, H), if given, multiplies h_{t-1} where it enters the recurrent matmuls (variational dropout), not
        in the interpolation with z_t."""
        (gain_rz, gain_n), (bias_rz, bias_n) = self._blocks(self.gain_hh), self._blocks(self.bias_hh)
        shared = {"gain_hh_rz": gain_rz, "bias_hh_rz": bias_rz, "gain_hh_n": gain_n, "bias_hh_n": bias_n}
        shared |= {"eps": self.eps, "h_mask": h_mask}
        if self.variant == "reset_after":
            return partial(layer_norm_gru_reset_after_step, weight_hh=self.weight_hh, **shared)
        weight_rz, weight_n = self._blocks(self.weight_hh)  # (2H, H), (H, H)
        return partial(layer_norm_gru_textbook_step, weight_hh_rz=weight_rz, weight_hh_n=weight_n, **shared)

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        self._check_input(x)
        if state is None:
            state = self._zeros(x, self.hidden_size)
        self._check_state("h", state, x.shape[0], self.hidden_size)
        return self.step(self.input_projection(x), state)
