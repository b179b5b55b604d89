"""How the classify recipe trains: read the labelled texts, build the arch's vocabulary and model (pre-training the
elmo arm's biLM first), and hand the skeleton the classifier's loss, batches, validation and test report."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from seqlab.data.labelled_text import LabelledText
from seqlab.data.names import unlabelled_names
from seqlab.data.vocab import Vocabulary
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.models.classifier import TCNClassifier
from seqlab.models.elmo import ELMo
from seqlab.models.elmo.sentences import load_elmo_encoder
from seqlab.recipes.base import Report, TrainingRun
from seqlab.recipes.classify.config import ClassifyModelConfig, Config, ELMoArmConfig
from seqlab.recipes.classify.models import BUILDERS, BuildContext, arch_tokenizer, pretrained_names
from seqlab.recipes.classify.system import ClassifySystem
from seqlab.recipes.common.labelled_text import LabelledSplits, read_labelled_splits
from seqlab.recipes.common.text_classifier import ClassifierTraining, predict_classes

TEST_EXAMPLES = 10  # about this many test texts are shown after training


def log(line: str) -> None:
    """One line of what preparing a run does (the biLM's corpus and pre-training), to standard error as
    ``seqlab train`` logs."""
    print(line, file=sys.stderr)


def pretraining_texts(
    model: ClassifyModelConfig, train_set: Sequence[LabelledText], *, held_out: Sequence[LabelledText]
) -> list[str]:
    """The unlabelled texts the ``elmo`` arm's biLM pre-trains on; none for other arms or with ``model.elmo_path``.

    ``model.elmo_corpus``: ``names``, every name of nameCreator's and the census lists
    (``seqlab.data.names.unlabelled_names``) and the training texts, less the ``held_out`` texts (validation and
    test), about 14 times the names data's training texts; ``train``, the training texts alone (the biLM then
    reads nothing the task's labels do not cover).

    Raises: ConfigError as ``unlabelled_names`` (a package missing).
    """
    if not isinstance(model, ELMoArmConfig) or model.elmo_path is not None:
        return []
    texts = [e.text for e in train_set]
    if model.elmo_corpus == "train":
        return texts
    held = {e.text for e in held_out}
    return sorted(set(unlabelled_names(exclude=held)) | set(texts))


def vocabulary(
    model: ClassifyModelConfig, corpus: Sequence[str], data: LabelledSplits
) -> tuple[Vocabulary | WordPieceTokenizer, ELMo | None]:
    """The arch's vocabulary, and the pre-trained biLM of ``model.elmo_path`` (None without): a BERT arm's
    WordPiece, the biLM's own characters, or the characters of ``corpus`` and of every split.

    Raises: CheckpointError for an unreadable ``model.elmo_path`` or tokenizer folder; ConfigError as
        ``arch_tokenizer``.
    """
    tokenizer = arch_tokenizer(model)
    if tokenizer is not None:
        return tokenizer, None
    if isinstance(model, ELMoArmConfig) and model.elmo_path is not None:
        bilm, _, vocab = load_elmo_encoder(Path(model.elmo_path))
        return vocab, bilm
    return Vocabulary.build([*corpus, *(e.text for e in (*data.train, *data.valid, *data.test))]), None


@dataclass(frozen=True)
class ClassifyTest:
    """The test report of a trained classifier: accuracy (%) on the test texts, and some of them as examples."""

    system: ClassifySystem
    data: LabelledSplits
    test_ids: Sequence[Sequence[int]]
    test_targets: Sequence[int]

    def report(self) -> Report:
        """``accuracy`` (%), ``test_texts`` and ``train_texts``; about ``TEST_EXAMPLES`` evenly spaced test texts
        as (text, class, predicted class)."""
        labels, test_set, targets = self.system.labels, self.data.test, self.test_targets
        predictions = predict_classes(self.system.model, self.test_ids)
        correct = sum(p == t for p, t in zip(predictions, targets, strict=True))
        examples = [
            (test_set[i].text, labels[targets[i]], labels[predictions[i]])
            for i in range(0, len(test_set), max(1, len(test_set) // TEST_EXAMPLES))
        ]
        counts = {"test_texts": float(len(targets)), "train_texts": float(len(self.data.train))}
        return Report({"accuracy": 100.0 * correct / len(targets), **counts}, examples)


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read the data, build the vocabulary and the classifier of ``model.arch`` (pre-training the elmo arm's biLM
    on its corpus first, ``BuildContext``), and return the parts that train it (``ClassifierTraining``) and test
    it (``ClassifyTest``); the best validation is the lowest ``valid_loss``, reported as ``valid_error`` (%).

    Raises:
        ConfigError: nameCreator missing, data.test_path without data.train_path, MiniLM missing.
        DataError: a data file is missing or malformed, a split is empty, fewer than 2 classes, the test data
            has classes absent from training, or a text is longer than a BERT's positions.
    """
    data = read_labelled_splits(config.data)
    labels = data.labels()
    corpus = pretraining_texts(config.model, data.train, held_out=(*data.valid, *data.test))
    vocab, bilm = vocabulary(config.model, corpus, data)
    system = ClassifySystem(nn.Identity(), vocab, labels)
    encoded = {}
    for name, part in data.parts():
        where = f"{data.source} ({name})"
        encoded[name] = (system.encode([e.text for e in part], source=where), system.targets(part, source=where))
    system.model = build_model(config, system, encoded, corpus, bilm)
    for name, (ids, _) in encoded.items():
        system.check_lengths(ids, source=f"{data.source} ({name})")
    training = ClassifierTraining(*encoded["train"], *encoded["valid"])
    return TrainingRun(
        config,
        system.model,
        loss_fn=training.loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=system.save,
        test=ClassifyTest(system, data, *encoded["test"]).report,
        summary=(
            f"data: {data.source}, {len(data.train)} train / {len(data.valid)} valid / {len(data.test)} test "
            f"texts, {len(labels)} classes, {system.vocab_size} symbols"
        ),
        summary_model=f"arch {config.model.arch}{_receptive_field_note(system.model)}",
        valid_metric="valid_error",
        pretrained=pretrained_names(config.model.arch, system.model),
    )


def _receptive_field_note(model: nn.Module) -> str:
    """ ", receptive field R characters" for the tcn arm (the log line's model note), else nothing."""
    return f", receptive field {model.receptive_field} characters" if isinstance(model, TCNClassifier) else ""


def build_model(
    config: Config,
    system: ClassifySystem,
    encoded: dict[str, tuple[list[list[int]], list[int]]],
    corpus: Sequence[str],
    bilm: ELMo | None,
) -> nn.Module:
    """The classifier of ``config.model.arch`` for ``system``'s vocabulary and classes (``BUILDERS``), the elmo
    arm's biLM pre-trained on ``corpus`` (encoded by ``system``) unless ``bilm`` is given.

    Raises: DataError for a corpus text the vocabulary cannot encode; ConfigError as the builders.
    """
    pretrain_ids: list[list[int]] = []
    if corpus:
        log(f"biLM corpus: {len(corpus)} unlabelled texts ({config.model.elmo_corpus})")
        pretrain_ids = system.encode(corpus, source=f"biLM corpus ({config.model.elmo_corpus})")
    context = BuildContext(
        config.model,
        system.vocab_size,
        len(system.labels),
        train_ids=encoded["train"][0],
        valid_ids=encoded["valid"][0],
        pretrain=config.pretrain,
        log=log,
        pretrain_ids=pretrain_ids,
        bilm=bilm,
    )
    return BUILDERS[config.model.arch](context)
