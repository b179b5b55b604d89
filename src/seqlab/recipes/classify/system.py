"""A trained classify run: the classifier, its vocabulary (characters, or a BERT arm's WordPiece) and class names."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from torch import nn

from seqlab.data.labelled_text import LabelledText, read_labelled_file
from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.vocab import Vocabulary
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.files import atomic_write
from seqlab.models.bert import BertTaskModel
from seqlab.models.pretrained import load_pretrained
from seqlab.recipes.classify.config import Config
from seqlab.recipes.common.labelled_text import character_ids, class_ids
from seqlab.recipes.common.text_classifier import predict_classes, predict_logits
from seqlab.recipes.saved_run import load_recipe_config, read_json_list
from seqlab.recipes.system import SystemOptions

VOCAB_FILE = "vocab.json"
LABELS_FILE = "labels.json"
TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class ClassPrediction:
    """The predicted class of one text, with the probability of every class (the model's softmax).

    Attributes:
        text: the input text.
        label: the most likely class.
        probabilities: class name -> p(class | text), in the run's order of classes; they sum to 1.
    """

    text: str
    label: str
    probabilities: dict[str, float]

    def lines(self) -> list[str]:
        """``TEXT<TAB>LABEL``, the line ``seqlab predict`` prints."""
        return [f"{self.text}\t{self.label}"]


@dataclass
class ClassifySystem:
    """A trained classifier with its vocabulary (characters, or a BERT arm's WordPiece) and class names: what a
    run directory holds. Its one option is ``backend``.

    Attributes:
        onnx_model: what predictions call instead of ``model``: the run's exported graph under onnxruntime
            (``--backend onnxruntime``), else None.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})

    model: nn.Module
    vocab: Vocabulary | WordPieceTokenizer
    labels: list[str]
    onnx_model: OnnxModel | None = None

    def save(self, directory: Path) -> None:
        """Write the model, the vocabulary and the class names (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        if isinstance(self.vocab, WordPieceTokenizer):
            self.vocab.save(directory / TOKENIZER_FILE)
        else:
            self.vocab.save(directory / VOCAB_FILE)
        atomic_write(directory / LABELS_FILE, json.dumps({"labels": self.labels}, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> ClassifySystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", predictions run its export in
        ``directory/onnx``.

        Raises:
            CheckpointError: (one line naming the file) for a missing or malformed file, or a vocabulary of the
                other kind than the model (WordPiece for a BERT, characters otherwise); (onnxruntime) the export is
                missing, stale or of another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        load_recipe_config(directory, Config)
        labels = read_json_list(directory / LABELS_FILE, "labels")
        if (directory / TOKENIZER_FILE).is_file():
            vocab = load_tokenizer(directory)
        else:
            vocab = Vocabulary.load(directory / VOCAB_FILE)
        system = cls(load_pretrained(directory), vocab, labels)
        if isinstance(vocab, WordPieceTokenizer) != isinstance(system.model, BertTaskModel):
            raise CheckpointError(f"{directory}: its vocabulary does not belong to its {system.model.model_type} model")
        if options.backend == "onnxruntime":
            system.onnx_model = load_onnx_model(directory)
        return system

    @property
    def vocab_size(self) -> int:
        """V, the symbols the model reads: characters and the specials, or WordPiece pieces."""
        return self.vocab.vocab_size if isinstance(self.vocab, WordPieceTokenizer) else len(self.vocab)

    def encode(self, texts: Sequence[str], *, source: str) -> list[list[int]]:
        """The model input of each text: BOS, character ids, EOS, or ``[CLS]`` pieces ``[SEP]`` (WordPiece);
        ``source`` names the texts for errors.

        Raises: DataError for a character the vocabulary lacks, or a text longer than a BERT's positions.
        """
        if not isinstance(self.vocab, WordPieceTokenizer):
            return character_ids(self.vocab, texts, source=source)
        ids = [self.vocab.encode_with_special_tokens(text).input_ids for text in texts]
        self.check_lengths(ids, source=source)
        return ids

    def check_lengths(self, ids: Sequence[Sequence[int]], *, source: str) -> None:
        """DataError naming the first text (1-based) longer than a BERT model's positions; nothing for others."""
        if not isinstance(self.model, BertTaskModel):
            return
        limit = self.model.config.max_positions
        for line, row in enumerate(ids, start=1):
            if len(row) > limit:
                raise DataError(f"{source}: text {line} has {len(row)} WordPiece tokens, more than {limit} positions")

    def targets(self, examples: Sequence[LabelledText], *, source: str) -> list[int]:
        """Class ids of the examples' labels. Raises: DataError naming the labels the model never saw."""
        return class_ids(self.labels, examples, source=source)

    def accuracy(self, examples: Sequence[LabelledText], *, source: str) -> float:
        """Percent of examples whose predicted class is the labelled one."""
        targets = self.targets(examples, source=source)
        predictions = predict_classes(
            self.model, self.encode([e.text for e in examples], source=source), forward=self.onnx_model
        )
        return 100.0 * sum(p == t for p, t in zip(predictions, targets, strict=True)) / len(targets)

    def predict(self, inputs: Sequence[str]) -> list[ClassPrediction]:
        """The class of each input text and the probability of every class.

        Raises: DataError (``inputs: ...``) for a text the vocabulary cannot encode.
        """
        ids = self.encode(inputs, source="inputs")
        logits = predict_logits(self.model, ids, forward=self.onnx_model)  # (N, C)
        probabilities = logits.softmax(-1).tolist()
        return [
            ClassPrediction(text, self.labels[best], dict(zip(self.labels, p, strict=True)))
            for text, best, p in zip(inputs, logits.argmax(-1).tolist(), probabilities, strict=True)
        ]

    def evaluate(self, data_path: str) -> dict[str, float]:
        """``accuracy`` (%) on a ``TEXT<TAB>LABEL`` file, and the number of ``texts``.

        Raises: DataError naming the file for a malformed line, an unknown character or class.
        """
        examples = read_labelled_file(data_path)
        return {"accuracy": self.accuracy(examples, source=data_path), "texts": float(len(examples))}
