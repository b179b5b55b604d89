"""LoRA fine-tuning (``train.lora_rank``; Hu et al., 2021): freeze a pretrained body and adapt some of its Linear
layers with trainable low-rank updates (``seqlab.nn.lora``).

The pretrained body is the set of parameters a recipe loaded (``model.init_from``, or an arch that starts
pretrained, like classify's ``minilm``). Every one of them is frozen; each Linear layer of the body whose name
ends with one of ``train.lora_targets`` becomes a ``LoRALinear``; the parameters that are not pretrained (a new
task head) train in full. The optimizer then sees the adapters and the head only, since it takes the trainable
parameters (``seqlab.training.optim``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from torch import nn

from seqlab.errors import ConfigError
from seqlab.nn.lora import add_lora
from seqlab.training.train_config import TrainConfig


def adapt_pretrained(
    model: nn.Module, config: TrainConfig, pretrained: Collection[str], *, log: Callable[[str], None]
) -> list[str]:
    """Freeze the ``pretrained`` parameters of ``model`` and add LoRA adapters (rank ``config.lora_rank``) to its
    pretrained Linear layers named by ``config.lora_targets``, in place; nothing if ``config.lora_rank`` is None.

    Args:
        model: the model about to be trained, its pretrained body loaded.
        config: supplies lora_rank, lora_alpha, lora_dropout and lora_targets.
        pretrained: names (as ``model.named_parameters()``) of the pretrained body's parameters.
        log: receives one line: the adapted layers and the count of trainable parameters.
    Returns:
        The qualified names of the adapted layers, in module order ([] without ``lora_rank``).
    Raises:
        ConfigError: (one line) ``lora_rank`` without a pretrained body, a target that names no Linear layer
            of the body (the message lists the names of the body's Linear layers), or a rank above the smallest
            size (in or out features) of the adapted layers.
    """
    if config.lora_rank is None:
        return []
    if not pretrained:
        raise ConfigError("train.lora_rank: no pretrained body to adapt; set model.init_from (or an arch with one)")
    body = set(pretrained)
    linears = [name for name, m in model.named_modules() if type(m) is nn.Linear and f"{name}.weight" in body]
    if not linears:
        raise ConfigError("train.lora_rank: the pretrained body has no Linear layer to adapt")
    targets = [t.strip() for t in config.lora_targets.split(",") if t.strip()]
    chosen: set[str] = set()
    for target in targets:
        matched = [name for name in linears if name == target or name.endswith("." + target)]
        if not matched:
            known = ", ".join(sorted({name.rpartition(".")[2] for name in linears}))
            raise ConfigError(
                f"train.lora_targets: {target!r} names no Linear layer of the pretrained body; its Linear layers "
                f"are {known}"
            )
        chosen.update(matched)
    adapted = [name for name in linears if name in chosen]
    modules = dict(model.named_modules())
    smallest = min(min(modules[name].in_features, modules[name].out_features) for name in adapted)
    if config.lora_rank > smallest:  # bounded before A and B are allocated
        raise ConfigError(
            f"train.lora_rank ({config.lora_rank}) must be <= {smallest}, the smallest size of the adapted layers"
        )
    for name, parameter in model.named_parameters():
        if name in body:
            parameter.requires_grad_(False)
    add_lora(model, adapted, rank=config.lora_rank, alpha=config.lora_alpha, dropout=config.lora_dropout)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log(
        f"train.lora_rank={config.lora_rank}: adapters on {len(adapted)} Linear layers ({', '.join(targets)}); "
        f"{trainable:,} of {total:,} parameters train"
    )
    return adapted
