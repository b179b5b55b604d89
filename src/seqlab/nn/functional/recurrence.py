"""The recurrence equations of the Elman RNN, LSTM and GRU as pure step functions.

Each takes the input projection xw_t = W_ih x_t + b_ih, computed for all steps at once outside the time loop,
and the previous state; the cells in ``cells.py`` bind their parameters to these functions. Parameters use
torch.nn's layout and gate order (LSTM: i, f, g, o; GRU: r, z, n).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LSTMState(NamedTuple):
    """Hidden and cell state of an LSTM: each (B, H) for a cell, (L*C, B, H) for a layer; with a projection
    h has P = proj_size features instead of H."""

    h: Tensor
    c: Tensor


def dropped(h: Tensor, h_mask: Tensor | None) -> Tensor:
    """h_{t-1} (B, H) as the recurrent matmuls see it: times the variational dropout mask, if any (Gal & Ghahramani,
    2016). Only the matmul inputs are masked; the GRU's interpolation and the LSTM's c_t carry the full state."""
    return h if h_mask is None else h * h_mask


def rnn_step(
    xw_t: Tensor,
    h: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor | None,
    *,
    nonlinearity: str,
    h_mask: Tensor | None = None,
) -> Tensor:
    """Elman step: h_t = act(xw_t + W_hh h_{t-1} + b_hh), with xw_t = W_ih x_t + b_ih precomputed."""
    pre = xw_t + F.linear(dropped(h, h_mask), weight_hh, bias_hh)
    return torch.tanh(pre) if nonlinearity == "tanh" else torch.relu(pre)


def lstm_step(
    xw_t: Tensor,
    state: LSTMState,
    weight_hh: Tensor,
    bias_hh: Tensor | None,
    *,
    weight_hr: Tensor | None = None,
    h_mask: Tensor | None = None,
) -> LSTMState:
    """LSTM step on the precomputed input projection xw_t = W_ih x_t + b_ih (equations in ``LSTMCell``);
    weight_hr (P, H) projects h_t when given."""
    h, c = state
    gates = xw_t + F.linear(dropped(h, h_mask), weight_hh, bias_hh)  # (B, 4H) in torch's order i, f, g, o
    # chunk, not four slices: backward then joins the gate gradients with one cat instead of building a
    # zero-filled (B, 4H) gradient per slice.
    i, f, g, o = gates.chunk(4, dim=1)
    i_t, f_t, g_t, o_t = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_t = torch.addcmul(f_t * c, i_t, g_t)  # f_t * c_{t-1} + i_t * g_t
    h_t = o_t * torch.tanh(c_t)
    if weight_hr is not None:
        h_t = F.linear(h_t, weight_hr)  # (B, P)
    return LSTMState(h_t, c_t)


def gru_reset_after_step(
    xw_t: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None, *, h_mask: Tensor | None = None
) -> Tensor:
    """GRU step with r applied after the recurrent matmul (torch.nn.GRU / cuDNN form, see ``GRUCell``)."""
    H = h.shape[1]
    hw = F.linear(dropped(h, h_mask), weight_hh, bias_hh)  # (B, 3H) in torch's order r, z, n
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
    *,
    h_mask: Tensor | None = None,
) -> Tensor:
    """GRU step in the seeds' textbook form (see ``GRUCell``): r applied to h_{t-1} before the recurrent matmul,
    and z_t weighting the candidate, h_t = (1 - z_t) * h_{t-1} + z_t * h~_t.

    The recurrent weights come pre-split into the (r, z) rows (2H, H) and the n rows (H, H): a layer splits
    them once per sequence, because slicing inside the time loop makes backward build a full-size
    gradient of weight_hh at every step.
    """
    xw_rz, xw_n = xw_t.split([2 * h.shape[1], h.shape[1]], dim=1)
    h_in = dropped(h, h_mask)
    r_t, z_t = torch.sigmoid(xw_rz + F.linear(h_in, weight_hh_rz, bias_hh_rz)).chunk(2, dim=1)
    h_tilde = torch.tanh(xw_n + F.linear(r_t * h_in, weight_hh_n, bias_hh_n))
    return torch.lerp(h, h_tilde, z_t)  # (1 - z_t) * h_{t-1} + z_t * h~_t


def orthogonal_gate_blocks_(weight_hh: Tensor, num_gates: int) -> None:
    """Make each gate's block of weight_hh (G*H, R) orthogonal in place (Saxe et al., 2014), one
    ``torch.nn.init.orthogonal_`` per (H, R) block; semi-orthogonal, W^T W = I, when R < H."""
    with torch.no_grad():
        for block in weight_hh.chunk(num_gates):  # (H, R) per gate
            nn.init.orthogonal_(block)
