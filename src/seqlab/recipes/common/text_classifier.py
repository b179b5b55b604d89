"""Training and running a classifier of token-id sequences (the classify recipe, and vec2seq's class checker).

A classifier here is a ``Seq2VecClassifier``-like module, ``forward(x (B, T), lengths (B,)) -> .logits (B, C)``,
or a ``BertTaskModel`` that reads a keep mask instead of lengths; :func:`class_logits` calls either. Its training
minimises the cross-entropy of the labelled class (nats per text), validated by the same loss and the error rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.labelled_text import TokenBatch, token_batches
from seqlab.models.bert import BertTaskModel
from seqlab.models.classifier import Seq2VecClassifierConfig
from seqlab.nn.pooling import PoolingName
from seqlab.recipes.base import model_device
from seqlab.training.trainer import LossOutput

PAD_ID = 0  # seqlab.data.vocab.Vocabulary's <pad>
EVAL_BATCH_SIZE = 256  # texts per batch when validating and predicting


def bilstm_config(
    *, vocab_size: int, num_labels: int, embedding_size: int, hidden_size: int, pooling: PoolingName, dropout: float
) -> Seq2VecClassifierConfig:
    """The BiLSTM baseline: a learned embedding of ``embedding_size`` (E), a one-layer BiLSTM of ``hidden_size``
    (H per direction), ``pooling`` over its states and a dropout-regularised softmax layer over ``num_labels``
    classes (the model config saves them as ``num_classes``)."""
    return Seq2VecClassifierConfig(
        num_classes=num_labels,
        vocab_size=vocab_size,
        embedding_size=embedding_size,
        hidden_size=hidden_size,
        cell="lstm",
        bidirectional=True,
        pooling=pooling,
        dropout=dropout,
    )


def class_logits(
    model: nn.Module, x: torch.Tensor, lengths: torch.Tensor, *, forward: Callable[..., Any] | None = None
) -> torch.Tensor:
    """(B, C) logits of right-padded inputs x (B, T) of lengths (B,), for a character model or a BERT task model;
    ``forward`` is called as ``model`` instead of it (the run's exported graph, ``seqlab.export.OnnxModel``)."""
    forward = model if forward is None else forward
    if isinstance(model, BertTaskModel):
        keep_mask = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        return forward(x, keep_mask=keep_mask).logits
    return forward(x, lengths).logits


@torch.no_grad()
def predict_logits(
    model: nn.Module, ids: Sequence[Sequence[int]], *, forward: Callable[..., Any] | None = None
) -> torch.Tensor:
    """(N, C) logits of the N id sequences, in their order, with ``model`` in eval mode (on CPU), or ``forward``
    called as it (``class_logits``)."""
    model.eval()
    device = model_device(model)
    rows: list[torch.Tensor] = [torch.empty(0)] * len(ids)
    for batch in token_batches(ids, [0] * len(ids), batch_size=EVAL_BATCH_SIZE, pad_id=PAD_ID, shuffle=False):
        logits = class_logits(model, batch.x.to(device), batch.lengths, forward=forward).cpu()
        for i, row in zip(batch.indices.tolist(), logits, strict=True):
            rows[i] = row
    return torch.stack(rows) if rows else torch.empty(0, 0)


def predict_classes(
    model: nn.Module, ids: Sequence[Sequence[int]], *, forward: Callable[..., Any] | None = None
) -> list[int]:
    """The most likely class id of each id sequence (``predict_logits``' argmax)."""
    return predict_logits(model, ids, forward=forward).argmax(-1).tolist() if ids else []


@dataclass(frozen=True)
class ClassifierTraining:
    """The training parts of a classifier over labelled id sequences (``TrainingRun``'s loss, batches,
    validation), each usable alone.

    Attributes:
        train_ids, train_targets: the training texts' ids and class ids.
        valid_ids, valid_targets: the validation texts'.
    """

    train_ids: Sequence[Sequence[int]]
    train_targets: Sequence[int]
    valid_ids: Sequence[Sequence[int]]
    valid_targets: Sequence[int]

    def loss(self, model: nn.Module, batch: TokenBatch) -> LossOutput:
        """Mean cross-entropy (nats per text) of the batch's classes, over its number of texts."""
        logits = class_logits(model, batch.x, batch.lengths)
        return LossOutput(F.cross_entropy(logits, batch.targets), len(batch.targets))

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[TokenBatch]:
        """The training texts in shuffled batches of ``batch_size`` (``generator`` draws the order)."""
        return token_batches(
            self.train_ids, self.train_targets, batch_size=batch_size, pad_id=PAD_ID, shuffle=True, generator=generator
        )

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: mean cross-entropy (nats per text); ``valid_error``: % of texts misclassified."""
        device = model_device(model)
        correct, loss = 0, 0.0
        batches = token_batches(
            self.valid_ids, self.valid_targets, batch_size=EVAL_BATCH_SIZE, pad_id=PAD_ID, shuffle=False
        )
        for batch in batches:
            logits = class_logits(model, batch.x.to(device), batch.lengths)
            targets = batch.targets.to(device)
            loss += F.cross_entropy(logits, targets, reduction="sum").item()
            correct += int((logits.argmax(-1) == targets).sum())
        total = len(self.valid_targets)
        return {"valid_loss": loss / total, "valid_error": 100.0 * (1 - correct / total)}
