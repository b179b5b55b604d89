"""Optimizers by name, with weight decay on the weight matrices only.

Weight decay shrinks the weights that multiply inputs; it is not applied to biases, to the gains and biases of
normalisation layers (a decayed gain fights the normalisation it scales), nor to embedding tables (rare tokens' rows
would shrink toward zero between their few updates). The rule: a trainable parameter decays if it has two or more
dimensions (nanoGPT's ``configure_optimizers`` stops there, so it also decays embeddings) and is not the weight of an
embedding (``nn.Embedding``, ``nn.EmbeddingBag`` or seqlab's ``LearnedPositionalEncoding``). A weight shared by an
embedding and another layer (tied input and output embeddings) counts as an embedding.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import torch
from torch import nn

from seqlab.errors import ConfigError
from seqlab.nn.lora import lora_layers
from seqlab.nn.positional import LearnedPositionalEncoding
from seqlab.training.train_config import TrainConfig

EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag, LearnedPositionalEncoding)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """The model's trainable parameters in two optimizer groups: with and without weight decay.

    Args:
        model: any module; parameters with ``requires_grad=False`` are left out.
        weight_decay: the decay of the first group (the second has 0.0).
    Returns:
        ``[{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]`` in
        the order of ``model.parameters()``, without an empty group.
    """
    embedding_weights = {
        id(parameter)
        for module in model.modules()
        if isinstance(module, EMBEDDINGS)
        for parameter in module.parameters(recurse=False)
    }
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for parameter in model.parameters():
        if not parameter.requires_grad:
            continue
        if parameter.dim() >= 2 and id(parameter) not in embedding_weights:
            decay.append(parameter)
        else:
            no_decay.append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def fused_available(parameters: Collection[nn.Parameter]) -> bool | None:
    """True where torch has a fused Adam / AdamW kernel for every parameter: torch >= 2.4 and floating-point
    parameters on a CPU or a CUDA device (torch 2.4 added the CPU kernels); else None (torch's default choice)."""
    supported = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in parameters)
    return True if supported and torch.__version__ >= "2.4" else None


def freeze_parameters(model: nn.Module, freeze: str) -> list[str]:
    """Set ``requires_grad=False`` on the parameters named by ``freeze`` and return their names.

    Args:
        model: any module.
        freeze: comma-separated prefixes, each a module path ("rnn" covers "rnn.cells.0.weight_ih", not
            "rnn2.weight"); "" freezes nothing.
    Raises:
        ConfigError: a prefix names no parameter (the message lists the model's top-level modules).
    """
    prefixes = [p.strip().rstrip(".") for p in freeze.split(",") if p.strip()]
    frozen = []
    for prefix in prefixes:
        names = [n for n, _ in model.named_parameters() if n == prefix or n.startswith(prefix + ".")]
        if not names:
            tops = sorted({n.partition(".")[0] for n, _ in model.named_parameters()})
            raise ConfigError(f"train.freeze: {prefix!r} names no parameter; the model's modules are {', '.join(tops)}")
        frozen += names
    for name, parameter in model.named_parameters():
        if name in frozen:
            parameter.requires_grad_(False)
    return frozen


def build_optimizer(
    model: nn.Module, config: TrainConfig, *, pretrained: Collection[str] = ()
) -> torch.optim.Optimizer:
    """The optimizer named by ``config.optimizer`` over ``parameter_groups(model, config.weight_decay)``.

    First the parameters named by ``config.freeze`` are frozen (``freeze_parameters``). The parameters named in
    ``pretrained`` (a pretrained body) go into groups of their own, after the others, with learning rate
    ``config.lr * config.body_lr_scale``; schedules scale every group's rate alike.

    "adam": ``torch.optim.Adam`` (Kingma & Ba, 2015) with ``betas``, weight decay as L2 added to the gradient; "adamw":
    ``torch.optim.AdamW`` (Loshchilov & Hutter, 2019), decay decoupled from the adaptive step; "sgd":
    ``torch.optim.SGD`` with ``momentum`` and ``nesterov`` (Sutskever et al., 2013), decay as L2. Adam and AdamW
    take torch's fused kernel where it has one (``fused_available``): the same update, one kernel for all the
    parameters instead of a loop over them (on a CPU, where torch otherwise loops, a small GPT's training step
    costs 2-4 % less: ``benchmarks/nanogpt_step.py``).

    Args:
        model: the module whose trainable parameters to optimize.
        config: supplies optimizer, lr, weight_decay, betas, momentum, nesterov, freeze and body_lr_scale.
        pretrained: names (as in ``model.named_parameters()``) of the pretrained body's parameters.
    Returns:
        The optimizer, with learning rate ``config.lr`` in every group but the pretrained ones.
    Raises:
        ValueError: if the model has no trainable parameters.
        ConfigError: a ``config.freeze`` prefix names no parameter, or ``config.lora_rank`` is set for a model
            without LoRA adapters (``seqlab.training.lora.adapt_pretrained`` adds them).
    """
    freeze_parameters(model, config.freeze)
    if config.lora_rank is not None and not lora_layers(model):
        raise ConfigError(
            f"lora_rank ({config.lora_rank}): the model has no LoRA adapters; it applies where a recipe fine-tunes "
            "a pretrained body (seqlab.training.lora)"
        )
    groups = parameter_groups(model, config.weight_decay)
    if not groups:
        raise ValueError("model has no trainable parameters (all have requires_grad=False)")
    if pretrained:
        body = {id(p) for n, p in model.named_parameters() if n in set(pretrained)}
        new = [{**g, "params": [p for p in g["params"] if id(p) not in body]} for g in groups]
        old = [
            {**g, "params": [p for p in g["params"] if id(p) in body], "lr": config.lr * config.body_lr_scale}
            for g in groups
        ]
        groups = [g for g in new + old if g["params"]]
    fused = fused_available([p for g in groups for p in g["params"]])
    if config.optimizer == "adam":
        return torch.optim.Adam(groups, lr=config.lr, betas=config.betas, fused=fused)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, fused=fused)
    return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, nesterov=config.nesterov)
