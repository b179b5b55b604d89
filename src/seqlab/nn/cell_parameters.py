"""The parameters every recurrent cell shares, plain and layer-normalised: torch.nn's names and layout
(``weight_ih`` (G*H, E), ``weight_hh`` (G*H, H), ``bias_ih``/``bias_hh`` (G*H,), an LSTM projection's
``weight_hr`` (P, H)), their initialisation, the input projection that layers hoist out of the time loop, and
the checks of inputs and states (see ``seqlab.nn.cells`` for the cells themselves).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.functional.recurrence import orthogonal_gate_blocks_
from seqlab.validation import check_choice, check_int

RECURRENT_INITS = ("uniform", "orthogonal")


def check_input_dtype(x: Tensor, weight: Tensor) -> None:
    """A recurrent input must be floating point with the dtype of the layer's weights (under autocast, any float).

    Raises: TypeError naming both dtypes: integer inputs (token ids need an embedding first) or, outside
        autocast, a float dtype other than the weights' (convert the input or the layer with ``.to(dtype)``).
    """
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor (token ids need an embedding first), got {x.dtype}")
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(
            f"x has dtype {x.dtype} but the layer's weights are {weight.dtype}; convert one with .to(dtype)"
        )


class CellParameters(nn.Module):
    """Creates the torch.nn-layout parameters shared by every cell (plain and layer-normalised), checks inputs
    and states, and computes the input projection. ``__init__`` only creates the parameters; each concrete
    cell calls ``reset_parameters`` once its own options and parameters exist."""

    num_gates: int = 1
    torch_class: type[nn.Module] = nn.RNNCell

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool,
        recurrent_init: str,
        device: torch.device | str | None,
        dtype: torch.dtype | None,
        proj_size: int = 0,
    ) -> None:
        super().__init__()
        check_int("input_size", input_size)
        check_int("hidden_size", hidden_size)
        check_choice("recurrent_init", recurrent_init, RECURRENT_INITS)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.recurrent_init = recurrent_init
        self.output_size = proj_size or hidden_size  # features of h_t, the state fed back through W_hh
        factory = {"device": device, "dtype": dtype}
        gh = self.num_gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(gh, input_size, **factory))
        self.weight_hh = nn.Parameter(torch.empty(gh, self.output_size, **factory))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(gh, **factory))
            self.bias_hh = nn.Parameter(torch.empty(gh, **factory))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        if proj_size:  # registered last: torch's flat weight order is w_ih, w_hh, b_ih, b_hh, w_hr
            self.weight_hr = nn.Parameter(torch.empty(proj_size, hidden_size, **factory))

    def reset_parameters(self) -> None:
        """U(-1/sqrt(H), 1/sqrt(H)) for every parameter, as torch.nn; then, for recurrent_init="orthogonal",
        each gate's block of weight_hh (H, H), or (H, P) with a projection, becomes orthogonal (Saxe et al.,
        2014), semi-orthogonal (W^T W = I) when not square."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)
        if self.recurrent_init == "orthogonal":
            orthogonal_gate_blocks_(self.weight_hh, self.num_gates)

    def _add_forget_bias(self, forget_bias: float) -> None:
        """Add forget_bias to the forget-gate block (torch's LSTM order i, f, g, o) of bias_ih, if any."""
        if self.bias_ih is not None:
            H = self.hidden_size
            with torch.no_grad():
                self.bias_ih[H : 2 * H] += forget_bias

    def extra_repr(self) -> str:
        init = "" if self.recurrent_init == "uniform" else f", recurrent_init={self.recurrent_init!r}"
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias}{init}"

    def input_projection(self, x: Tensor) -> Tensor:
        """x W_ih^T + b_ih, x (..., E) -> (..., G*H): the part that layers hoist out of the time loop."""
        return F.linear(x, self.weight_ih, self.bias_ih)

    def _check_input(self, x: Tensor) -> None:
        if x.dim() != 2:
            raise ValueError(f"expected x of shape (B, E), got shape {tuple(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"expected x with {self.input_size} features (input_size), got {x.shape[-1]}")
        check_input_dtype(x, self.weight_ih)

    def _zeros(self, x: Tensor, size: int) -> Tensor:
        return x.new_zeros(x.shape[0], size)

    def _check_state(self, name: str, state: Tensor, batch: int, size: int) -> None:
        """state (B, size), size H or proj_size; ValueError showing both shapes otherwise."""
        expected = (batch, size)
        if tuple(state.shape) != expected:
            label = "(B, H)" if size == self.hidden_size else "(B, proj_size)"
            raise ValueError(f"state {name} must have shape {label} = {expected}, got {tuple(state.shape)}")

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
