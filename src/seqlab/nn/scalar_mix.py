"""Scalar mix: a learned, softmax-weighted sum of a model's layers (ELMo, Peters et al. 2018, eq. 1).

    ELMo_k^task = gamma^task * sum_{j=0}^{L} s_j^task h_{k,j}        s^task = softmax(w^task)

gamma scales the whole vector (the paper: "of practical importance to aid the optimization process"); with the
optional ``layer_norm`` each layer h_j is first layer-normalised over its features without a learned gain or bias
(Ba et al., 2016), as the paper's section 3.2 allows "in some cases". w starts at zeros (equal weights), gamma at 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.validation import check_bool, check_int


class ScalarMix(nn.Module):
    """gamma * sum_j softmax(w)_j h_j over J stacked layers (module docstring).

    Args:
        num_layers: J, the number of layers mixed (L + 1 for ELMo: the token layer and L biLSTM layers).
        layer_norm: layer-normalise each h_j over its last dimension before mixing.
    Inputs: layers (J, B, T, F): the stacked layers (any shape after J; F the features).
    Outputs: (B, T, F), the mix.
    Raises:
        ValueError: num_layers < 1 or layer_norm not a bool (at construction); layers.shape[0] != num_layers
            (the message shows both).
    """

    def __init__(self, num_layers: int, *, layer_norm: bool = False) -> None:
        super().__init__()
        check_int("num_layers", num_layers)
        check_bool("layer_norm", layer_norm)
        self.num_layers = num_layers
        self.layer_norm = layer_norm
        self.scalars = nn.Parameter(torch.zeros(num_layers))  # w^task
        self.gamma = nn.Parameter(torch.ones(()))  # gamma^task

    def extra_repr(self) -> str:
        return f"num_layers={self.num_layers}, layer_norm={self.layer_norm}"

    @property
    def weights(self) -> Tensor:
        """s = softmax(w), (J,): each layer's share of the mix."""
        return torch.softmax(self.scalars, dim=0)

    def forward(self, layers: Tensor) -> Tensor:
        if layers.shape[0] != self.num_layers:
            raise ValueError(
                f"layers must stack {self.num_layers} layers at dimension 0, got shape {tuple(layers.shape)}"
            )
        if self.layer_norm:
            layers = F.layer_norm(layers, layers.shape[-1:])
        s = self.weights.to(layers.dtype).view(-1, *([1] * (layers.dim() - 1)))  # (J, 1, ..., 1)
        return self.gamma * (s * layers).sum(0)
