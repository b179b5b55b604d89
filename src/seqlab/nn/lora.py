"""Low-rank adaptation (LoRA; Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3): a
Linear layer whose pretrained weight W stays fixed while a low-rank update B A is trained beside it.

    h = W x + b + (alpha / r) B A dropout(x),    A (r, in), B (out, r), r << min(in, out)

A starts Kaiming-uniform (as ``nn.Linear`` initialises its weight, and as ``peft`` does) and B at zero, so an
adapted model computes exactly what the pretrained model computed until B has been trained. Merging folds the
update into the weight, W' = W + (alpha / r) B A, and gives back a plain ``nn.Linear``.

``LoRALinear`` is an ``nn.Linear`` subclass that keeps the adapted layer's own ``weight`` and ``bias`` (the same
Parameter objects, under the same names) and adds ``lora_A`` and ``lora_B``: a state dict of an adapted model is
the pretrained one plus ``NAME.lora_A`` / ``NAME.lora_B`` per adapted layer. Because its class is not
``nn.Linear`` itself, every fast path that inlines plain Linear layers (``seqlab.nn.direct_calls``) calls it as a
module instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.validation import check_int, check_probability, check_real

LORA_PARAMETERS = ("lora_A", "lora_B")  # the names of an adapter's parameters within its layer


class LoRALinear(nn.Linear):
    """A Linear layer with a LoRA update: h = x W^T + b + (alpha / r) dropout(x) A^T B^T (Hu et al., 2021).

    Args:
        in_features, out_features, bias, device, dtype: as ``nn.Linear``.
        rank: r, the rank of the update B A.
        alpha: the update is scaled by alpha / r, so a change of r needs no change of learning rate (Hu et al.,
            sec. 4.1).
        dropout: p of the dropout on the adapter's input (the pretrained path sees x undropped), as ``peft``'s
            ``lora_dropout``.
    Inputs: x (..., in).
    Outputs: (..., out).
    Raises: ConfigError (a ValueError) for a rank < 1, alpha <= 0 or dropout outside [0, 1), showing the value.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        rank: int,
        alpha: float,
        dropout: float = 0.0,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        check_lora_settings(rank=rank, alpha=alpha, dropout=dropout)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.rank, self.alpha = rank, float(alpha)
        self.lora_A = nn.Parameter(self.weight.new_empty(rank, in_features))  # (r, in), W's device and dtype
        self.lora_B = nn.Parameter(self.weight.new_zeros(out_features, rank))  # (out, r)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's own init of a weight of this shape
        self.lora_dropout = nn.Dropout(dropout)

    @property
    def scaling(self) -> float:
        """alpha / r, the factor of the low-rank update."""
        return self.alpha / self.rank

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, rank: int, alpha: float, dropout: float = 0.0) -> LoRALinear:
        """An adapted copy of ``linear`` that holds ``linear``'s own weight and bias Parameters (not copies: a
        frozen flag or an optimizer entry of them still applies), with new A and B on their device and dtype.

        Raises: ConfigError as the constructor.
        """
        adapted = cls(
            linear.in_features,
            linear.out_features,
            rank=rank,
            alpha=alpha,
            dropout=dropout,
            bias=linear.bias is not None,
            device=linear.weight.device,
            dtype=linear.weight.dtype,
        )
        adapted.weight = linear.weight
        adapted.bias = linear.bias
        adapted.train(linear.training)
        return adapted

    def forward(self, x: Tensor) -> Tensor:
        update = F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B)  # B A x, (..., out)
        return F.linear(x, self.weight, self.bias) + self.scaling * update

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` computing what this layer computes in eval mode: W' = W + (alpha / r) B A, the
        same bias. Its parameters are new tensors, trainable as the weight was."""
        linear = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=self.weight.device,
            dtype=self.weight.dtype,
        )
        linear.weight.data.copy_(self.weight.detach() + self.scaling * (self.lora_B.detach() @ self.lora_A.detach()))
        if self.bias is not None:
            linear.bias.data.copy_(self.bias.detach())
        linear.weight.requires_grad_(self.weight.requires_grad)
        linear.train(self.training)
        return linear

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, alpha={self.alpha:g}, dropout={self.lora_dropout.p:g}"


def check_lora_settings(*, rank: object, alpha: object, dropout: object) -> None:
    """Refuse a LoRA rank < 1, an alpha <= 0 (or not finite) or a dropout outside [0, 1).

    Raises: ConfigError (a ValueError) naming the setting and the value.
    """
    check_int("lora_rank", rank)
    check_real("lora_alpha", alpha, greater_than=0)
    check_probability("lora_dropout", dropout)


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """The adapted layers of ``model`` by qualified name, in module order ({} for a model without LoRA)."""
    return {name: module for name, module in model.named_modules() if isinstance(module, LoRALinear)}


def add_lora(model: nn.Module, names: Sequence[str], *, rank: int, alpha: float, dropout: float = 0.0) -> None:
    """Replace each ``nn.Linear`` of ``model`` named in ``names`` (qualified names, as ``named_modules``) by a
    ``LoRALinear`` holding its parameters, in place.

    Raises:
        ValueError: a name is not an ``nn.Linear`` of the model (already adapted, another module, or absent).
        ConfigError: as ``LoRALinear`` for a bad rank, alpha or dropout.
    """
    check_lora_settings(rank=rank, alpha=alpha, dropout=dropout)
    modules = dict(model.named_modules())
    for name in names:
        linear = modules.get(name)
        if type(linear) is not nn.Linear:
            found = "absent" if linear is None else type(linear).__name__
            raise ValueError(f"{name!r} is not an nn.Linear of the model ({found})")
        _replace(model, name, LoRALinear.from_linear(linear, rank=rank, alpha=alpha, dropout=dropout))


def merge_lora(model: nn.Module) -> list[str]:
    """Fold every ``LoRALinear`` of ``model`` into a plain ``nn.Linear`` (``LoRALinear.merged``), in place, and
    return the merged layers' names; the model then has the state-dict names of the model before ``add_lora``."""
    layers = lora_layers(model)
    for name, layer in layers.items():
        _replace(model, name, layer.merged())
    return list(layers)


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    """Set the submodule at qualified ``name`` of ``model`` to ``module``."""
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name), child, module)


def lora_settings(model: nn.Module) -> dict[str, dict[str, float]]:
    """What ``add_lora`` needs to rebuild the adapters of ``model``: adapted layer name -> {"rank", "alpha",
    "dropout"}, in module order ({} for a model without LoRA); JSON-ready, saved in a checkpoint's config.json."""
    return {
        name: {"rank": layer.rank, "alpha": layer.alpha, "dropout": layer.lora_dropout.p}
        for name, layer in lora_layers(model).items()
    }


def add_lora_settings(model: nn.Module, settings: object) -> None:
    """Adapt ``model`` as ``lora_settings`` described it (read back from JSON), in place.

    Raises:
        ValueError: ``settings`` is not a mapping of layer name -> {"rank", "alpha", "dropout"}, or a name is not
            an ``nn.Linear`` of the model, or a setting is out of range (one line).
    """
    if not isinstance(settings, dict):
        raise ValueError(f"LoRA settings must map layer names to settings, got {type(settings).__name__}")
    for name, layer in settings.items():
        if not isinstance(layer, dict) or set(layer) != {"rank", "alpha", "dropout"}:
            raise ValueError(f"LoRA settings of {name!r} must hold exactly rank, alpha and dropout, got {layer!r}")
        add_lora(model, [name], rank=layer["rank"], alpha=layer["alpha"], dropout=layer["dropout"])
