"""Training objectives: teacher forcing for sequence transduction, and mean squared error for regression.

Teacher forcing (Williams & Zipser 1989): the decoder reads the gold previous token y_{t-1} at every step and is
trained on the token-level negative log-likelihood

    loss = -(1 / N) sum_{b, t : t < len_b} log p(y_{b,t} | y_{b,<t}, x_b)

over the N real (non-padding) target tokens, in nats per token; with label smoothing eps the target distribution is
(1 - eps) one-hot + eps / V (Szegedy et al. 2016), as in ``torch.nn.functional.cross_entropy``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.batching import Seq2SeqBatch
from seqlab.nn.alignment import guided_attention_loss


class LossOutput(NamedTuple):
    """What every objective (a trainer's ``loss_fn``) returns.

    Attributes:
        loss: scalar tensor, the mean loss per token over the batch's real tokens (nats for cross-entropy).
        num_tokens: how many tokens that mean is over; it weights the batch in the step's gradient under
            gradient accumulation and in the logged ``train_loss``.
    """

    loss: torch.Tensor
    num_tokens: int


def teacher_forcing_loss(
    model: nn.Module, batch: Seq2SeqBatch, *, pad_id: int = 0, label_smoothing: float = 0.0
) -> LossOutput:
    """Mean token cross-entropy of a seq2seq model under teacher forcing.

    Args:
        model: called as model(src, src_lengths, tgt_in) and returning an object with ``logits`` (B, T, V).
        batch: Seq2SeqBatch with tgt_in = [BOS] + y and tgt_out = y + [EOS], padded with ``pad_id``.
        pad_id: target positions equal to it are ignored.
        label_smoothing: eps in [0, 1).
    Returns:
        LossOutput(loss: scalar, nats per real target token; num_tokens: N).
    """
    logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
    loss = F.cross_entropy(
        logits.flatten(0, 1),  # (B*T, V)
        batch.tgt_out.flatten(),  # (B*T,)
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )
    return LossOutput(loss, int((batch.tgt_out != pad_id).sum()))


def guided_attention_teacher_forcing_loss(
    model: nn.Module,
    batch: Seq2SeqBatch,
    *,
    weight: float,
    sigma: float = 0.2,
    heads: int | None = None,
    layers: int | None = None,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
) -> LossOutput:
    """``teacher_forcing_loss`` plus weight * the guided attention loss (Tachibana et al. 2018, eq. 1;
    ``seqlab.nn.alignment.guided_attention_loss``) of the decoder's cross-attention, from the same forward pass.

    The penalty is averaged over the first ``heads`` heads of the last ``layers`` decoder layers (ESPnet's
    ``num_heads_applied_guided_attn`` and ``num_layers_applied_guided_attn``), each sequence's target length T
    counting the decoder inputs [BOS] + y.

    Args:
        model: with ``forward_with_cross_weights(src, src_lengths, tgt_in) -> (logits (B, T, V), [(B, N, T, S)]
            per decoder layer)`` (``TransformerSeq2Seq``).
        batch: as for ``teacher_forcing_loss``.
        weight: lambda >= 0 of the penalty.
        sigma: g of the penalty's band.
        heads: first heads of each chosen layer; None = all.
        layers: last decoder layers; None = all.
        pad_id, label_smoothing: as for ``teacher_forcing_loss``.
    Returns:
        LossOutput(loss: cross-entropy per real target token + lambda * L_att; num_tokens: N).
    """
    logits, cross_weights = model.forward_with_cross_weights(batch.src, batch.src_lengths, batch.tgt_in)
    real = batch.tgt_out != pad_id  # (B, T)
    loss = F.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=pad_id, label_smoothing=label_smoothing
    )
    chosen = cross_weights if layers is None else cross_weights[len(cross_weights) - layers :]
    attention = torch.cat([w[:, :heads] for w in chosen], dim=1)  # (B, H, T, S)
    penalty = guided_attention_loss(attention, batch.src_lengths.to(real.device), real.sum(1), sigma)
    return LossOutput(loss + weight * penalty, int(real.sum()))


@torch.no_grad()
def token_weighted_loss(losses: Iterable[LossOutput]) -> float:
    """The mean loss per token over batches: sum_b loss_b * N_b / sum_b N_b, where loss_b is batch b's mean over its
    N_b tokens; equal to the mean over all tokens at once, whatever the batch sizes (a validation loss).

    Args:
        losses: each batch's ``LossOutput`` (loss: scalar tensor, the batch's token mean; num_tokens: N_b).
    Returns: the token mean (the objective's unit, nats for cross-entropy).
    Raises: ValueError if the batches hold no token (an empty mean).
    """
    total, tokens = 0.0, 0
    for out in losses:
        total += out.loss.item() * out.num_tokens
        tokens += out.num_tokens
    if tokens == 0:
        raise ValueError("no tokens to average the loss over")
    return total / tokens


class RegressionBatch(Protocol):
    """A batch of regression examples: inputs ``x`` (B, ...) and targets ``y`` (B, ...), any float tensors."""

    x: torch.Tensor
    y: torch.Tensor


def mse_loss(model: nn.Module, batch: RegressionBatch) -> LossOutput:
    """Mean squared error of ``model(batch.x)`` against ``batch.y`` (in the targets' units, squared), counted per
    example (``num_tokens`` = B), with both moved to the model's device first: the objective of the forecasting and
    denoising recipes.

    Raises: RuntimeError (from torch) if the model's output and ``batch.y`` differ in shape.
    """
    device = next(model.parameters()).device
    return LossOutput(F.mse_loss(model(batch.x.to(device)), batch.y.to(device)), len(batch.x))
