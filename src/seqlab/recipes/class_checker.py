"""A classifier trained on real labelled texts, to check that generated texts carry the class they were asked for.

A conditioned generator is judged by whether an independent model recognises the condition in what it generates
(the "classifier-based" evaluation of conditional generators, e.g. Hu et al., 2017, Sec. 4; the inception score
uses a pretrained classifier alike). The checker is the ``classify`` recipe's BiLSTM arm
(``seqlab.recipes.classify_models.build_bilstm``) trained on the generator's training texts only, and its
accuracy on real held-out texts is the reference the samples' accuracy is read against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.labelled_text import LabelledText, token_batches
from seqlab.data.vocab import Vocabulary
from seqlab.recipes.base import model_device
from seqlab.recipes.classify import ClassifyModelConfig, ClassifySystem
from seqlab.recipes.classify_models import PAD_ID, BuildContext, build_bilstm
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer


def train_class_checker(
    train: Sequence[LabelledText],
    valid: Sequence[LabelledText],
    vocab: Vocabulary,
    labels: Sequence[str],
    model: ClassifyModelConfig,
    config: TrainConfig,
    *,
    progress: bool,
    log: Callable[[str], None],
) -> ClassifySystem:
    """Train the classify recipe's BiLSTM arm (sizes from ``model``) on ``train`` with ``config``, keeping the
    parameters of the lowest validation loss on ``valid``; returns it with ``vocab`` and ``labels``.

    Raises: DataError if a text has characters outside ``vocab`` or a label outside ``labels``.
    """
    system = ClassifySystem(nn.Identity(), vocab, list(labels))
    splits = {}
    for name, part in (("train", train), ("valid", valid)):
        splits[name] = (system.encode([e.text for e in part], source=name), system.targets(part, source=name))
    context = BuildContext(
        model, len(vocab), len(labels), splits["train"][0], splits["valid"][0], config, progress, log
    )
    system.model = build_bilstm(context)

    def loss_fn(m, batch):
        return LossOutput(F.cross_entropy(m(batch.x, batch.lengths).logits, batch.targets), len(batch.targets))

    def train_batches(epoch, generator, batch_size):
        return token_batches(*splits["train"], batch_size=batch_size, pad_id=PAD_ID, shuffle=True, generator=generator)

    @torch.no_grad()
    def validate(m):
        device, loss = model_device(m), 0.0
        for batch in token_batches(*splits["valid"], batch_size=256, pad_id=PAD_ID, shuffle=False):
            logits = m(batch.x.to(device), batch.lengths).logits
            loss += F.cross_entropy(logits, batch.targets.to(device), reduction="sum").item()
        return {"valid_loss": loss / len(splits["valid"][1])}

    def log_line(line: str) -> None:
        log(f"class checker: {line}")

    Trainer(
        system.model,
        config,
        loss_fn=loss_fn,
        train_batches=train_batches,
        validate=validate,
        progress=progress,
        log=log_line,
    ).fit()
    system.model.eval()
    return system


def class_accuracies(system: ClassifySystem, texts: Sequence[str], targets: Sequence[int]) -> tuple[float, float]:
    """(accuracy, balanced accuracy) in percent of the checker on ``texts`` of class ids ``targets``; balanced is
    the mean over classes of each class's recall, so a class with many texts counts as much as one with few."""
    predictions = system.classify(system.encode(texts, source="checked texts"))
    targets = list(targets)
    hits = [p == t for p, t in zip(predictions, targets, strict=True)]
    recalls = [
        sum(h for h, t in zip(hits, targets, strict=True) if t == c) / targets.count(c) for c in sorted(set(targets))
    ]
    return 100.0 * sum(hits) / len(hits), 100.0 * sum(recalls) / len(recalls)
