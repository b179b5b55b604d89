"""Exposure bias: how much worse a seq2seq decoder does on its own prefixes than on the gold ones.

Teacher forcing trains p(y_t | y_<t, x) on gold prefixes; at test time the decoder conditions on what it produced
itself, so an early mistake leads it into prefixes it never saw in training (Bengio et al. 2015, Sec. 1; Ranzato et
al. 2016, "exposure bias"). Measured per target token over a data set, for both ways of feeding the decoder:

    teacher-forced:  loss_TF = -(1/N) sum_{b,t} log p(y_t | y_<t, x),   acc_TF: share of t, argmax p(. | y_<t, x) = y_t
    free-running:    loss_FR = -(1/N) sum_{b,t} log p(y_t | y^_<t, x),  acc_FR: share of t with y^_t = y_t

where y^ is the greedy decode (y^_t = argmax p(. | y^_<t, x), ``seqlab.models.seq2seq.unroll`` with eps = 0) and
N counts the real target tokens (EOS included). A free-running position after the decoder has emitted EOS counts
as wrong, so acc_FR is the token agreement of greedy decoding with the reference, position by position. The gap
loss_FR - loss_TF (nats per token) is the exposure bias of the model on that data.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.data.batching import Seq2SeqBatch
from seqlab.errors import DataError
from seqlab.models.seq2seq.unroll import unroll


class ExposureBias(NamedTuple):
    """Teacher-forced against free-running loss (nats per token) and token accuracy (%) over ``num_tokens``."""

    teacher_forced_loss: float
    free_running_loss: float
    teacher_forced_accuracy: float
    free_running_accuracy: float
    num_tokens: int

    @property
    def loss_gap(self) -> float:
        """free_running_loss - teacher_forced_loss, nats per token."""
        return self.free_running_loss - self.teacher_forced_loss


class _Sums(NamedTuple):
    nll: float
    correct: int


def _sums(logits: Tensor, tgt_out: Tensor, real: Tensor, correct: Tensor) -> _Sums:
    """Summed NLL (nats) of tgt_out (B, T) under logits (B, T, V) and count of ``correct`` over real positions."""
    nll = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), reduction="none").view_as(tgt_out)
    return _Sums(float(nll[real].sum()), int((correct & real).sum()))


@torch.no_grad()
def exposure_bias(model: nn.Module, batches: Iterable[Seq2SeqBatch], *, pad_id: int, eos_id: int) -> ExposureBias:
    """Teacher-forced and free-running loss and accuracy of a seq2seq model over a data set (module docstring).

    Args:
        model: ``model(src, src_lengths, tgt_in).logits`` (B, T, V), ``encode(src, src_lengths)`` and the
            ``StepModel`` interface (``RNNSeq2Seq``, ``TransformerSeq2Seq``). Run in eval mode (dropout off); its
            mode is restored after.
        batches: Seq2SeqBatch objects (tgt_in = [BOS] + y, tgt_out = y + [EOS], padded with ``pad_id``); moved to
            the model's device.
        pad_id: padding of tgt_out; those positions are not counted.
        eos_id: the end-of-sequence token, after which a free-running decode has ended.
    Returns: ExposureBias(teacher_forced_loss, free_running_loss (nats per token), teacher_forced_accuracy,
        free_running_accuracy (%), num_tokens).
    Raises:
        DataError: the batches hold no real target token.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    teacher, free, tokens = _Sums(0.0, 0), _Sums(0.0, 0), 0
    try:
        for batch in batches:
            batch = batch.to(device)
            real = batch.tgt_out != pad_id  # (B, T)
            forced = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
            state = model.encode(batch.src, batch.src_lengths)
            running = unroll(model, state, batch.tgt_in, teacher_forcing=0.0).logits  # (B, T, V)
            greedy = running.argmax(dim=-1)  # (B, T)
            # Positions after the first EOS of the greedy decode do not exist in its output.
            ended = torch.cumsum(greedy == eos_id, dim=1) - (greedy == eos_id).long() > 0  # (B, T)
            t_sums = _sums(forced, batch.tgt_out, real, forced.argmax(dim=-1) == batch.tgt_out)
            f_sums = _sums(running, batch.tgt_out, real, (greedy == batch.tgt_out) & ~ended)
            teacher = _Sums(teacher.nll + t_sums.nll, teacher.correct + t_sums.correct)
            free = _Sums(free.nll + f_sums.nll, free.correct + f_sums.correct)
            tokens += int(real.sum())
    finally:
        model.train(was_training)
    if tokens == 0:
        raise DataError("no target tokens to measure exposure bias on")
    return ExposureBias(
        teacher_forced_loss=teacher.nll / tokens,
        free_running_loss=free.nll / tokens,
        teacher_forced_accuracy=100.0 * teacher.correct / tokens,
        free_running_accuracy=100.0 * free.correct / tokens,
        num_tokens=tokens,
    )


def plot_exposure(result: ExposureBias, path: Path, *, title: str) -> None:
    """Two panels of paired bars, teacher-forced beside free-running: loss (nats per token) and token accuracy
    (%); a PNG at ``path``."""
    fig = new_figure(figsize=(9, 4), layout="constrained")
    loss, accuracy = fig.subplots(1, 2)
    feeds = ("teacher-forced", "free-running")
    for ax, values, ylabel in (
        (loss, (result.teacher_forced_loss, result.free_running_loss), "loss (nats per target token)"),
        (accuracy, (result.teacher_forced_accuracy, result.free_running_accuracy), "token accuracy (%)"),
    ):
        bars = ax.bar(feeds, values, color=("C0", "C3"))
        ax.bar_label(bars, fmt="%.3g")
        ax.set(ylabel=ylabel, xlabel="decoder input")
    loss.set_title(f"gap {result.loss_gap:.3f} nats/token")
    accuracy.set(ylim=(0, 100), title=f"{result.num_tokens:,} target tokens")
    fig.suptitle(title)
    save_figure(fig, path, dpi=110)
