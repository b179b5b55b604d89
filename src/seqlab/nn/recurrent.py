"""Stacked, optionally bidirectional recurrent layers built from the cells in ``cells.py``.

Two paths compute the same function (both in ``_recurrent_base.py``). The reference path follows the
equations: per layer and direction it computes the input projection x W_ih^T + b_ih for all steps in one
matmul, then runs the cell's step over the time steps, carrying each sequence's state unchanged past its
length. The fused path hands seqlab's own parameters to PyTorch's fused RNN kernels (``lstm`` / ``gru`` /
``rnn_tanh`` / ``rnn_relu``, as torch.nn.LSTM does, with packed sequences when lengths are given), called only
through ``seqlab.nn.functional.fused_rnn``.
The fused path runs whenever the configuration has torch.nn semantics; recurrent dropout, layer
normalisation, the textbook GRU and merge modes other than concat between stacked layers run the reference
path. ``layer.fused`` says which.

Parameters live in ``layer.cells``, index ``layer * C + direction`` (direction 1 runs backwards in time),
which is torch.nn's flat weight order, so state_dict keys read ``cells.{l * C + d}.weight_ih`` etc.
"""

from __future__ import annotations

import torch
from torch import nn

from seqlab.nn._recurrent_base import RecurrentBase, RecurrentOutput
from seqlab.nn.cells import GRUCell, LSTMCell, RNNCell
from seqlab.nn.layer_norm_cells import LayerNormGRUCell, LayerNormLSTMCell

__all__ = ["GRU", "LSTM", "RNN", "RecurrentOutput"]


class RNN(RecurrentBase):
    """Stacked, optionally bidirectional Elman RNN (``RNNCell``).

    h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh) per layer and direction, act = tanh or relu.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        num_layers: L stacked layers; layer l > 0 reads layer l-1's merged outputs.
        bidirectional: add a layer running backwards in time (C = 2), combined by merge_mode.
        dropout: dropout on each layer's outputs except the last, in training only.
        batch_first: x and outputs are (B, T, ...) if True, else (T, B, ...). States are always (L*C, B, H).
        bias: learn b_ih and b_hh.
        nonlinearity: "tanh" or "relu".
        merge_mode: how a bidirectional layer combines its forward and backward h_t, after every layer, as
            stacked Keras ``Bidirectional`` layers: "concat" [forward, backward] (C*H features, torch.nn),
            "sum", "mean" (Keras: "ave") or "mul" elementwise (H features). Anything but "concat" needs
            bidirectional=True (a ValueError otherwise, rather than silently ignoring it).
        recurrent_dropout: p of variational dropout (Gal & Ghahramani, 2016), in training only: each layer and
            direction draws one Bernoulli(1 - p) / (1 - p) mask per sequence for its input x_t and one for
            h_{t-1} where it enters the recurrent matmuls, and reuses both at every step. The state carried
            forward and the outputs are not masked. Forces the reference path.
        recurrent_init: "uniform" (torch.nn's init) or "orthogonal" (each gate's block of weight_hh
            orthogonal, Saxe et al., 2014).
        residual: residual connections between stacked layers (Wu et al., 2016, GNMT, Sec. 3.1; the remedy for
            depth): from layer 2 on, a layer's merged output plus its input (after the between-layer dropout),
            x_{l+1} = layer_l(x_l) + x_l; sizes always match there. Needs num_layers >= 2. Forces the reference path.
        use_fused: run torch's fused kernel when the configuration allows (see ``fused``); False forces the
            reference loop.
        device: where the parameters are created.
        dtype: the parameters' floating-point type.

    Inputs: x (B, T, E) or (T, B, E), T >= 1, floating point with the weights' dtype; lengths (B,) integers in
        [1, T] (a tensor or a sequence of ints) or None for all T; state h_0 (L*C, B, H) or None for zeros.
    Outputs: RecurrentOutput(outputs (B, T, C*H) or (T, B, C*H), H instead of C*H unless merge_mode is
        "concat", state h_n (L*C, B, H)).
    Raises:
        ValueError: bad nonlinearity, merge_mode or recurrent_init; merge_mode other than "concat" without
            bidirectional; num_layers < 1; residual with num_layers < 2; dropout or recurrent_dropout outside
            [0, 1); x not 3-D or x.shape[-1] != input_size or T = 0; lengths not of shape (B,), not integers, or
            outside [1, T]; state not
            (L*C, B, H); ``to_torch`` with recurrent_dropout or merge_mode other than "concat". Messages show
            the numbers.
        TypeError: x of an integer dtype, or (outside autocast) of a float dtype other than the weights'.
    """

    torch_class = nn.RNN

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        batch_first: bool = True,
        bias: bool = True,
        nonlinearity: str = "tanh",
        merge_mode: str = "concat",
        recurrent_dropout: float = 0.0,
        residual: bool = False,
        recurrent_init: str = "uniform",
        use_fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.nonlinearity = nonlinearity
        self.fused_kernel = f"rnn_{nonlinearity}"
        super().__init__(
            input_size,
            hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            batch_first=batch_first,
            bias=bias,
            merge_mode=merge_mode,
            recurrent_dropout=recurrent_dropout,
            residual=residual,
            recurrent_init=recurrent_init,
            use_fused=use_fused,
            make_cell=lambda size: RNNCell(
                size,
                hidden_size,
                bias=bias,
                nonlinearity=nonlinearity,
                recurrent_init=recurrent_init,
                device=device,
                dtype=dtype,
            ),
        )

    def _torch_options(self) -> dict[str, object]:
        return {"nonlinearity": self.nonlinearity}

    @classmethod
    def _options_from_torch(cls, module: nn.RNNBase) -> dict[str, object]:
        return {"nonlinearity": module.nonlinearity}


class LSTM(RecurrentBase):
    """Stacked, optionally bidirectional LSTM (``LSTMCell``, Hochreiter & Schmidhuber, 1997).

    input_size, hidden_size, num_layers, bidirectional, dropout, batch_first, bias, merge_mode, recurrent_dropout,
    recurrent_init, residual, use_fused, device and dtype are as for ``RNN``.

    Args:
        forget_bias: added to every cell's forget-gate bias b_if at init (Jozefowicz et al., 2015).
        proj_size: P > 0 projects every h_t to P features, h_t = W_hr (o_t * tanh(c_t)) (Sak et al., 2014), as
            torch.nn.LSTM's proj_size: h (and each direction's outputs) has P features, c keeps H; the fused
            path runs it. 0 for no projection.
        layer_norm: use ``LayerNormLSTMCell`` (Ba et al., 2016) in every layer; reference path only, and not
            with proj_size > 0 (those cells have no projection).

    Inputs: x (B, T, E) or (T, B, E); lengths (B,) integers in [1, T] or None; state LSTMState(h_0, c_0) or a
        (h_0, c_0) tuple, h_0 (L*C, B, H) or (L*C, B, P), c_0 (L*C, B, H), or None for zeros.
    Outputs: RecurrentOutput(outputs (B, T, C*H) or (T, B, C*H), with P for H under a projection and without
        C unless merge_mode is "concat"; state LSTMState(h_n, c_n) shaped as (h_0, c_0)).
    Raises:
        ValueError: as for ``RNN``; proj_size outside [0, H); h or c of the wrong shape; layer_norm with
            proj_size > 0; ``to_torch`` with layer_norm.
    """

    torch_class = nn.LSTM
    has_cell_state = True

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        batch_first: bool = True,
        bias: bool = True,
        forget_bias: float = 1.0,
        proj_size: int = 0,
        merge_mode: str = "concat",
        recurrent_dropout: float = 0.0,
        residual: bool = False,
        recurrent_init: str = "uniform",
        layer_norm: bool = False,
        use_fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if layer_norm and proj_size:
            raise ValueError(f"layer_norm=True does not support proj_size, got proj_size={proj_size}")
        self.forget_bias = forget_bias
        self.layer_norm = layer_norm

        def make_cell(size: int) -> nn.Module:
            if layer_norm:
                return LayerNormLSTMCell(
                    size,
                    hidden_size,
                    bias=bias,
                    forget_bias=forget_bias,
                    recurrent_init=recurrent_init,
                    device=device,
                    dtype=dtype,
                )
            return LSTMCell(
                size,
                hidden_size,
                bias=bias,
                forget_bias=forget_bias,
                proj_size=proj_size,
                recurrent_init=recurrent_init,
                device=device,
                dtype=dtype,
            )

        super().__init__(
            input_size,
            hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            batch_first=batch_first,
            bias=bias,
            merge_mode=merge_mode,
            recurrent_dropout=recurrent_dropout,
            residual=residual,
            recurrent_init=recurrent_init,
            use_fused=use_fused,
            make_cell=make_cell,
            proj_size=proj_size,
        )

    def _options_torch_lacks(self) -> dict[str, object]:
        lacking = super()._options_torch_lacks()
        if self.layer_norm:
            lacking["layer_norm"] = True
        return lacking

    fused_kernel = "lstm"

    def _torch_options(self) -> dict[str, object]:
        return {"proj_size": self.proj_size}

    @classmethod
    def _options_from_torch(cls, module: nn.RNNBase) -> dict[str, object]:
        return {"forget_bias": 0.0, "proj_size": module.proj_size}


class GRU(RecurrentBase):
    """Stacked, optionally bidirectional GRU (``GRUCell``, Cho et al., 2014), reset-after or textbook form.

    input_size, hidden_size, num_layers, bidirectional, dropout, batch_first, bias, merge_mode, recurrent_dropout,
    recurrent_init, device and dtype are as for ``RNN``.

    Args:
        variant: "reset_after" (torch.nn.GRU semantics) or "textbook" (the seeds' equations: r_t applied to
            h_{t-1} before W_hn, h_t = (1 - z_t) * h_{t-1} + z_t * h~_t; see ``GRUCell`` and
            ``flip_update_gate`` for the weight map between the two z conventions).
        layer_norm: use ``LayerNormGRUCell`` (Ba et al., 2016) of the same variant in every layer; reference
            path only.
        use_fused: run torch's fused kernel when the configuration allows; the textbook form, layer_norm and
            recurrent_dropout always run the reference loop (see ``fused``).

    Inputs: x (B, T, E) or (T, B, E); lengths (B,) integers in [1, T] or None; state h_0 (L*C, B, H) or None.
    Outputs: RecurrentOutput(outputs (B, T, C*H) or (T, B, C*H), H unless merge_mode is "concat", state h_n
        (L*C, B, H)).
    Raises:
        ValueError: as for ``RNN``; bad variant; ``to_torch`` on the textbook variant or with layer_norm.
    """

    torch_class = nn.GRU

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        batch_first: bool = True,
        bias: bool = True,
        variant: str = "reset_after",
        merge_mode: str = "concat",
        recurrent_dropout: float = 0.0,
        residual: bool = False,
        recurrent_init: str = "uniform",
        layer_norm: bool = False,
        use_fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.variant = variant
        self.layer_norm = layer_norm

        def make_cell(size: int) -> nn.Module:
            if layer_norm:
                return LayerNormGRUCell(
                    size,
                    hidden_size,
                    bias=bias,
                    variant=variant,
                    recurrent_init=recurrent_init,
                    device=device,
                    dtype=dtype,
                )
            return GRUCell(
                size,
                hidden_size,
                bias=bias,
                variant=variant,
                recurrent_init=recurrent_init,
                device=device,
                dtype=dtype,
            )

        super().__init__(
            input_size,
            hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            batch_first=batch_first,
            bias=bias,
            merge_mode=merge_mode,
            recurrent_dropout=recurrent_dropout,
            residual=residual,
            recurrent_init=recurrent_init,
            use_fused=use_fused,
            make_cell=make_cell,
        )

    def _options_torch_lacks(self) -> dict[str, object]:
        lacking = super()._options_torch_lacks()
        if self.variant != "reset_after":
            lacking["variant"] = self.variant
        if self.layer_norm:
            lacking["layer_norm"] = True
        return lacking

    fused_kernel = "gru"
