"""A classifier trained on real labelled texts, to check that generated texts carry the class they were asked for.

A conditioned generator is judged by whether an independent model recognises the condition in what it generates
(the "classifier-based" evaluation of conditional generators, e.g. Hu et al., 2017, Sec. 4; the inception score
uses a pretrained classifier alike). The checker is a character BiLSTM with max pooling (the classify recipe's
``bilstm`` arm, ``text_classifier.bilstm_config``) trained on the generator's training texts only, and its
accuracy on real held-out texts is the reference the samples' accuracy is read against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from seqlab.data.labelled_text import LabelledText
from seqlab.data.vocab import Vocabulary
from seqlab.models.classifier import Seq2VecClassifier
from seqlab.recipes.common.labelled_text import character_ids, class_ids
from seqlab.recipes.common.text_classifier import ClassifierTraining, bilstm_config, predict_classes
from seqlab.training.trainer import TrainConfig, Trainer

CHECKER_POOLING = "max"
CHECKER_DROPOUT = 0.3


@dataclass(frozen=True)
class ClassChecker:
    """A trained character classifier with its vocabulary and class names."""

    model: Seq2VecClassifier
    vocab: Vocabulary
    labels: list[str]

    def classify(self, texts: Sequence[str]) -> list[int]:
        """The predicted class id of each text.

        Raises: DataError for a character outside the vocabulary.
        """
        return predict_classes(self.model, character_ids(self.vocab, texts, source="checked texts"))

    def accuracies(self, texts: Sequence[str], targets: Sequence[int]) -> tuple[float, float]:
        """(accuracy, balanced accuracy) in percent on ``texts`` of class ids ``targets``; balanced is the mean
        over classes of each class's recall, so a class with many texts counts as much as one with few."""
        predictions = self.classify(texts)
        targets = list(targets)
        hits = [p == t for p, t in zip(predictions, targets, strict=True)]
        recalls = [
            sum(h for h, t in zip(hits, targets, strict=True) if t == c) / targets.count(c)
            for c in sorted(set(targets))
        ]
        return 100.0 * sum(hits) / len(hits), 100.0 * sum(recalls) / len(recalls)


def train_class_checker(
    train: Sequence[LabelledText],
    valid: Sequence[LabelledText],
    vocab: Vocabulary,
    labels: Sequence[str],
    *,
    embedding_size: int,
    hidden_size: int,
    config: TrainConfig,
    log: Callable[[str], None],
) -> ClassChecker:
    """Train a BiLSTM of ``embedding_size`` (E) and ``hidden_size`` (H per direction) on ``train`` with
    ``config``, keeping the parameters of the lowest validation loss on ``valid``; log lines start with
    ``class checker:``.

    Raises: DataError if a text has characters outside ``vocab`` or a label outside ``labels``.
    """
    parts = {}
    for name, part in (("train", train), ("valid", valid)):
        texts = [e.text for e in part]
        parts[name] = (character_ids(vocab, texts, source=name), class_ids(labels, part, source=name))
    training = ClassifierTraining(*parts["train"], *parts["valid"])
    model = Seq2VecClassifier(
        bilstm_config(
            vocab_size=len(vocab),
            num_labels=len(labels),
            embedding_size=embedding_size,
            hidden_size=hidden_size,
            pooling=CHECKER_POOLING,
            dropout=CHECKER_DROPOUT,
        )
    )
    Trainer(
        model,
        config,
        loss_fn=training.loss,
        train_batches=training.train_batches,
        validate=training.validate,
        progress=False,
        log=lambda line: log(f"class checker: {line}"),
    ).fit()
    model.eval()
    return ClassChecker(model, vocab, list(labels))
