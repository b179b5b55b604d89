"""Masked language modelling (Devlin et al., 2019, sec. 3.1 "Task #1" and appendix A.1).

Each maskable token (not special, not padding) is selected with probability ``mask_prob`` (15%); a selected token
is replaced by [MASK] with probability 0.8, by a token drawn uniformly from the vocabulary with probability 0.1,
and left unchanged with probability 0.1 (so the model cannot learn that only [MASK] positions matter). The model
predicts the original token at the selected positions only:

    loss = -(1 / M) sum_{selected t} log p(x_t | x_masked)       in nats per selected token,

and every other position's label is ``IGNORE_INDEX`` (-100, ``torch.nn.functional.cross_entropy``'s default
``ignore_index``, as Hugging Face's ``DataCollatorForLanguageModeling`` writes it). Selection is an independent
Bernoulli draw per token, as that collator does, so M varies from batch to batch around 15% of the maskable tokens.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.training.objectives import LossOutput
from seqlab.validation import check_probability, check_token_id

IGNORE_INDEX = -100


class MaskedTokens(NamedTuple):
    """input_ids (B, T) long with the selected tokens replaced; labels (B, T) long, the original token at the
    selected positions and ``IGNORE_INDEX`` everywhere else."""

    input_ids: Tensor
    labels: Tensor


def mask_tokens(
    input_ids: Tensor,
    maskable: Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    mask_prob: float = 0.15,
    replace_prob: float = 0.8,
    random_prob: float = 0.1,
) -> MaskedTokens:
    """BERT's 80/10/10 masking of ``input_ids`` (module docstring).

    Args:
        input_ids: (B, T) long.
        maskable: (B, T) bool, True at tokens that may be selected (real, non-special tokens).
        mask_id: the [MASK] id.
        vocab_size: V; random replacements are drawn uniformly from [0, V).
        generator: the random source, for reproducible masks; torch's global one if None.
        mask_prob: probability that a maskable token is selected.
        replace_prob, random_prob: probabilities that a selected token becomes [MASK] / a random token; it stays
            unchanged with probability 1 - replace_prob - random_prob.
    Returns: ``MaskedTokens(input_ids, labels)``, new tensors (the inputs are not modified).
    Raises:
        ValueError (ConfigError) for a probability outside [0, 1), replace_prob + random_prob > 1, or a bad
            mask_id; ValueError if maskable is not a bool tensor of input_ids' shape.
    """
    for name, p in (("mask_prob", mask_prob), ("replace_prob", replace_prob), ("random_prob", random_prob)):
        check_probability(name, p)
    if replace_prob + random_prob > 1.0:
        raise ValueError(f"replace_prob + random_prob ({replace_prob} + {random_prob}) must be <= 1")
    check_token_id("mask_id", mask_id, vocab_size)
    if maskable.dtype != torch.bool or maskable.shape != input_ids.shape:
        raise ValueError(
            f"maskable must be bool of input_ids' shape {tuple(input_ids.shape)}, got {maskable.dtype} "
            f"{tuple(maskable.shape)}"
        )
    device = input_ids.device
    draw = torch.rand(input_ids.shape, generator=generator, device=device)  # selection
    selected = maskable & (draw < mask_prob)
    how = torch.rand(input_ids.shape, generator=generator, device=device)  # [MASK] | random | unchanged
    random_tokens = torch.randint(0, vocab_size, input_ids.shape, generator=generator, device=device)
    masked = input_ids.masked_fill(selected & (how < replace_prob), mask_id)
    use_random = selected & (how >= replace_prob) & (how < replace_prob + random_prob)
    masked = torch.where(use_random, random_tokens, masked)
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)
    return MaskedTokens(masked, labels)


class MaskedLMLoss(NamedTuple):
    """output: LossOutput(loss nats per selected token, M selected tokens); correct: how many of the M the
    model's argmax predicts (masked-token accuracy = correct / M)."""

    output: LossOutput
    correct: int


def masked_lm_loss(
    model: nn.Module, batch: MaskedTokens, *, keep_mask: Tensor | None = None, token_type_ids: Tensor | None = None
) -> MaskedLMLoss:
    """Mean cross-entropy of the original tokens at the selected positions (module docstring).

    Args:
        model: called as ``model(input_ids, keep_mask=..., token_type_ids=..., select=selected)``, returning
            ``logits`` (M, V) at the M selected positions (a ``BertForMaskedLM``).
        batch: ``MaskedTokens`` from ``mask_tokens``.
        keep_mask: (B, T) bool, True at real tokens, or None.
        token_type_ids: (B, T) long segment ids, or None.
    Returns: ``MaskedLMLoss(LossOutput(loss, M), correct)``.
    Raises: ValueError if no position is selected (nothing to score).
    """
    selected = batch.labels != IGNORE_INDEX
    count = int(selected.sum())
    if count == 0:
        raise ValueError("no token is selected for prediction: nothing to score")
    # (M, V): only the selected positions are projected to the vocabulary
    chosen = model(batch.input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids, select=selected).logits
    targets = batch.labels[selected]  # (M,)
    loss = F.cross_entropy(chosen, targets)
    correct = int((chosen.argmax(dim=-1) == targets).sum())
    return MaskedLMLoss(LossOutput(loss, count), correct)
