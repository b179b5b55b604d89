"""Recipe ``classify``: text classification; by default, which language a personal name is from.

Task: given a short text (a name), predict its class (the language of origin), the classic character-level
classification task (the PyTorch char-RNN tutorial classifies surnames into 18 languages). Data: names in 9
languages from the ``nameCreator`` package (``seqlab.data.names``: 14,100 first and last names), split
80/10/10 per class with a fixed seed; or the user's own ``TEXT<TAB>LABEL`` files. Models (``model.arch``, see
``seqlab.recipes.classify_models``): on characters, ``bilstm`` (BiLSTM baseline), ``static`` (static embeddings as
wide as ELMo's features) and ``elmo`` (a biLM pre-trained on unlabelled names, ``model.elmo_corpus``, or loaded
from ``model.elmo_path``, frozen, ScalarMix features), each ending in the same BiLSTM + pooling + softmax; on
MiniLM's WordPiece pieces, ``minilm`` (the pretrained MiniLM-L6 fine-tuned with a mean-pooled softmax head) and
``bert`` (the same architecture, small and from scratch). The run
directory keeps the arm's vocabulary: ``vocab.json`` (characters) or ``tokenizer.json`` (WordPiece). Metric: test
accuracy (%). ``model.init_from`` starts from another run or a Hugging Face folder.

Fine-tuning MiniLM wants a small learning rate for the body and a larger one for the new head, e.g.
``--set model.arch=minilm train.lr=1e-3 train.body_lr_scale=0.05``; ``train.freeze=bert`` trains the head alone.

ELMo against static embeddings of the same width, the biLM's pre-training the only difference (same head, same
labelled data, same head budget): pre-train once, then train heads from that biLM with any seed::

    seqlab train classify --out runs/elmo --set model.arch=elmo pretrain.time_budget=2400
    seqlab train classify --out runs/elmo-1 --set model.arch=elmo model.elmo_path=runs/elmo train.seed=1
    seqlab train classify --out runs/static-1 --set model.arch=static train.seed=1
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.labelled_text import (
    LabelledText,
    read_labelled_file,
    stratified_sample,
    stratified_split,
    token_batches,
)
from seqlab.data.names import name_origin_examples, unlabelled_names
from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.vocab import Vocabulary
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, ConfigError, DataError, UnknownSymbolError
from seqlab.files import atomic_write
from seqlab.models.bert import BertTaskModel
from seqlab.models.elmo import ELMo
from seqlab.models.elmo.sentences import load_elmo_encoder
from seqlab.models.pretrained import load_pretrained
from seqlab.nn.pooling import POOLING_NAMES, PoolingName
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, read_json_list, run_training
from seqlab.recipes.classify_models import BUILDERS, PAD_ID, BuildContext, arch_tokenizer, pretrained_names
from seqlab.recipes.init_from import InitFromConfig
from seqlab.recipes.run_directory import RunMode
from seqlab.training.trainer import LossOutput, TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real

NAME = "classify"
DESCRIPTION = (
    "text classification (names -> language, nameCreator): bilstm | static | elmo | minilm | bert, accuracy (%)"
)
PREDICT_OPTIONS: tuple[str, ...] = ()
VOCAB_FILE = "vocab.json"
LABELS_FILE = "labels.json"
TOKENIZER_FILE = "tokenizer.json"
ARCHS = ("bilstm", "static", "elmo", "minilm", "bert")
ELMO_CORPORA = ("names", "train")


@dataclass(frozen=True)
class ClassifyDataConfig:
    """Where the labelled texts come from and how they are split."""

    train_path: str | None = None  # TEXT<TAB>LABEL file; None = names by language (nameCreator)
    test_path: str | None = None  # TEXT<TAB>LABEL file; None = test_fraction of the training texts
    valid_fraction: float = 0.1  # share of each class held out for validation
    test_fraction: float = 0.1  # share of each class held out for testing when test_path is None
    split_seed: int = 0  # seed of the stratified split (and of the names data's per-class sample)
    min_per_class: int = 100  # names data: languages with fewer unambiguous names are left out
    max_per_class: int = 2500  # names data: at most this many names per language
    train_size: int | None = None  # labelled training texts kept: a class-stratified sample (a learning curve)

    def __post_init__(self) -> None:
        check_int("train_size", self.train_size, optional=True)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=0)
        check_int("min_per_class", self.min_per_class)
        check_int("max_per_class", self.max_per_class)


@dataclass(frozen=True)
class ClassifyModelConfig(InitFromConfig):
    """The architecture (module docstring); sizes of the task encoder and of ELMo."""

    arch: Literal["bilstm", "static", "elmo", "minilm", "bert"] = "bilstm"  # bilstm | static | elmo | minilm | bert
    embedding_size: int = 64  # bilstm: E of the character embedding
    hidden_size: int = 128  # H of the task encoder's BiLSTM, per direction
    pooling: PoolingName = "max"  # last | mean | max | attention over the encoder's states
    dropout: float = 0.3  # task model: on the pooled vector (elmo: also on the mixed features)
    elmo_hidden_size: int = 128  # elmo: the biLM's H (features 2H); static: the embedding is 2H wide
    elmo_num_layers: int = 2  # elmo: biLSTM layers of the biLM
    elmo_residual: bool = True  # elmo: residual connection between the biLM's layers
    elmo_dropout: float = 0.1  # elmo: dropout of the biLM during its pre-training
    elmo_corpus: Literal["names", "train"] = "names"  # elmo: the biLM's unlabelled text (pretraining_texts)
    elmo_path: str | None = None  # elmo: a pre-trained biLM to use as it is (an elmo run, or an ELMo + vocab.json)
    mix_layer_norm: bool = False  # elmo: layer-normalise each biLM layer before the ScalarMix
    elmo_concat: bool = False  # elmo: also read the static arm's own embedding (2H wide) beside ELMo, [x_t; ELMo_t]
    minilm_path: str | None = None  # minilm, bert: Hugging Face BERT folder (weights, tokenizer); None = MiniLM's
    bert_d_model: int = 128  # bert (from scratch): D
    bert_num_heads: int = 4  # bert: N
    bert_num_layers: int = 2  # bert: L
    bert_d_ff: int = 512  # bert: feed-forward inner size
    bert_max_positions: int = 64  # bert: most pieces of a text, [CLS] and [SEP] included
    bert_dropout: float = 0.1  # bert: embeddings, attention, sublayers and the head (minilm: its folder's rate)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("arch", self.arch, ARCHS)
        sizes = ("embedding_size", "hidden_size", "elmo_hidden_size", "elmo_num_layers", "bert_d_model")
        for name in (*sizes, "bert_num_heads", "bert_num_layers", "bert_d_ff"):
            check_int(name, getattr(self, name))
        check_int("bert_max_positions", self.bert_max_positions, minimum=3)
        check_probability("bert_dropout", self.bert_dropout)
        for name in ("minilm_path", "elmo_path"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a directory path or None, got {value!r}")
        check_choice("elmo_corpus", self.elmo_corpus, ELMO_CORPORA)
        if self.bert_d_model % self.bert_num_heads:
            raise ValueError(
                f"bert_d_model ({self.bert_d_model}) must be divisible by bert_num_heads ({self.bert_num_heads})"
            )
        check_choice("pooling", self.pooling, POOLING_NAMES)
        check_probability("dropout", self.dropout)
        check_probability("elmo_dropout", self.elmo_dropout)
        check_bool("elmo_residual", self.elmo_residual)
        check_bool("mix_layer_norm", self.mix_layer_norm)
        check_bool("elmo_concat", self.elmo_concat)
        if self.elmo_concat and self.arch != "elmo":
            raise ConfigError(f"elmo_concat reads an embedding beside ELMo: it needs arch=elmo, not {self.arch}")


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, pretrain (the elmo arm's biLM), train (the classifier)."""

    data: ClassifyDataConfig = field(default_factory=ClassifyDataConfig)
    model: ClassifyModelConfig = field(default_factory=ClassifyModelConfig)
    pretrain: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=2e-3, batch_size=64, max_epochs=20, patience=2, time_budget=600.0)
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=2e-3, batch_size=64, max_epochs=40, patience=5, time_budget=600.0)
    )


@dataclass
class ClassifySystem:
    """A trained classifier with its vocabulary (characters, or a BERT arm's WordPiece) and class names: what a
    run directory holds."""

    model: nn.Module
    vocab: Vocabulary | WordPieceTokenizer
    labels: list[str]

    def save(self, directory: Path) -> None:
        """Write the model, the vocabulary and the class names (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        if isinstance(self.vocab, WordPieceTokenizer):
            self.vocab.save(directory / TOKENIZER_FILE)
        else:
            self.vocab.save(directory / VOCAB_FILE)
        atomic_write(directory / LABELS_FILE, json.dumps({"labels": self.labels}, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> ClassifySystem:
        load_recipe_config(directory, Config)
        labels = read_json_list(directory / LABELS_FILE, "labels")
        if (directory / TOKENIZER_FILE).is_file():
            vocab = load_tokenizer(directory)
        else:
            vocab = Vocabulary.load(directory / VOCAB_FILE)
        system = cls(load_pretrained(directory), vocab, labels)
        if isinstance(vocab, WordPieceTokenizer) != isinstance(system.model, BertTaskModel):
            raise CheckpointError(f"{directory}: its vocabulary does not belong to its {system.model.model_type} model")
        return system

    def encode(self, texts: Sequence[str], *, source: str) -> list[list[int]]:
        """The model input of each text: BOS, character ids, EOS, or ``[CLS]`` pieces ``[SEP]`` (WordPiece);
        ``source`` names the texts for errors.

        Raises: DataError for a character the vocabulary lacks, or a text longer than a BERT's positions.
        """
        if isinstance(self.vocab, WordPieceTokenizer):
            ids = [self.vocab.encode_with_special_tokens(text).input_ids for text in texts]
            self.check_lengths(ids, source=source)
            return ids
        try:
            return [self.vocab.encode(text, add_bos=True, add_eos=True) for text in texts]
        except UnknownSymbolError as e:
            raise DataError(f"{source}: {e}") from None

    def check_lengths(self, ids: Sequence[Sequence[int]], *, source: str) -> None:
        """DataError naming the first text (1-based) longer than a BERT model's positions; nothing for others."""
        if not isinstance(self.model, BertTaskModel):
            return
        limit = self.model.config.max_positions
        for line, row in enumerate(ids, start=1):
            if len(row) > limit:
                raise DataError(f"{source}: text {line} has {len(row)} WordPiece tokens, more than {limit} positions")

    def targets(self, examples: Sequence[LabelledText], *, source: str) -> list[int]:
        """Class ids of the examples' labels."""
        index = {label: i for i, label in enumerate(self.labels)}
        unknown = sorted({e.label for e in examples} - set(index))
        if unknown:
            raise DataError(f"{source}: classes the model never saw: {', '.join(unknown)}")
        return [index[e.label] for e in examples]

    @torch.no_grad()
    def classify(self, ids: Sequence[Sequence[int]]) -> list[int]:
        """Predicted class id of each id sequence."""
        self.model.eval()
        device = model_device(self.model)
        predictions = [0] * len(ids)
        for batch in token_batches(ids, [0] * len(ids), batch_size=256, pad_id=PAD_ID, shuffle=False):
            logits = class_logits(self.model, batch.x.to(device), batch.lengths)
            for row, label in zip(batch.indices.tolist(), logits.argmax(-1).tolist(), strict=True):
                predictions[row] = label
        return predictions

    def accuracy(self, examples: Sequence[LabelledText], *, source: str) -> float:
        """Percent of examples whose predicted class is the labelled one."""
        targets = self.targets(examples, source=source)
        predictions = self.classify(self.encode([e.text for e in examples], source=source))
        return 100.0 * sum(p == t for p, t in zip(predictions, targets, strict=True)) / len(targets)


def class_logits(model: nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, C) logits of right-padded inputs x (B, T) of lengths (B,), for a character arm or a BERT arm."""
    if isinstance(model, BertTaskModel):
        keep_mask = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        return model(x, keep_mask=keep_mask).logits
    return model(x, lengths).logits


def read_data(config: ClassifyDataConfig) -> tuple[list[LabelledText], list[LabelledText], list[LabelledText], str]:
    """(train, valid, test, description of the source) as the data section says; with ``data.train_size``, the
    training texts are a class-stratified sample of that size (seeded by ``split_seed``, so every arm gets the
    same sample), while valid and test stay whole.

    Raises: DataError naming the source if ``data.train_size`` does not fit the training texts.
    """
    train, valid, test, source = _read_splits(config)
    if config.train_size is None:
        return train, valid, test, source
    try:
        sample = stratified_sample(train, config.train_size, seed=config.split_seed)
    except DataError as e:
        raise DataError(f"{source}: data.train_size: {e}") from None
    return sample, valid, test, source


def _read_splits(config: ClassifyDataConfig) -> tuple[list[LabelledText], list[LabelledText], list[LabelledText], str]:
    if config.train_path is None and config.test_path is not None:
        raise ConfigError("data.test_path needs data.train_path (the names data is split into all three)")
    if config.train_path is None:
        examples = name_origin_examples(
            min_per_class=config.min_per_class, max_per_class=config.max_per_class, seed=config.split_seed
        )
        source = "names by language (nameCreator)"
    else:
        examples, source = read_labelled_file(config.train_path), config.train_path
    if config.test_path is None:
        splits = stratified_split(
            examples, valid_fraction=config.valid_fraction, test_fraction=config.test_fraction, seed=config.split_seed
        )
        return splits.train, splits.valid, splits.test, source
    test = read_labelled_file(config.test_path)
    train, valid, _ = stratified_split(
        examples, valid_fraction=config.valid_fraction, test_fraction=0.0, seed=config.split_seed
    )
    return train, valid, test, source


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
    if model.arch != "elmo" or model.elmo_path is not None:
        return []
    texts = [e.text for e in train_set]
    if model.elmo_corpus == "train":
        return texts
    held = {e.text for e in held_out}
    return sorted(set(unlabelled_names(exclude=held)) | set(texts))


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train the classifier of ``model.arch`` (pre-training ELMo's biLM first), keep the best checkpoint in
    ``out_dir``, and report test accuracy (%).

    Raises:
        ConfigError: nameCreator missing, or data.test_path without data.train_path. DataError: a data file is
            missing or malformed, a split is empty, or the test data has classes absent from training.
    """

    def prepare() -> TrainingRun:
        train_set, valid_set, test_set, source = read_data(config.data)
        labels = sorted({e.label for e in train_set})
        if len(labels) < 2:
            raise DataError(f"{source}: needs at least 2 classes, found {len(labels)}")
        corpus = pretraining_texts(config.model, train_set, held_out=(*valid_set, *test_set))
        bilm: ELMo | None = None
        vocab = arch_tokenizer(config.model)
        if config.model.arch == "elmo" and config.model.elmo_path is not None:
            bilm, _, vocab = load_elmo_encoder(Path(config.model.elmo_path))
        elif vocab is None:
            vocab = Vocabulary.build([*corpus, *(e.text for e in (*train_set, *valid_set, *test_set))])
        vocab_size = vocab.vocab_size if isinstance(vocab, WordPieceTokenizer) else len(vocab)
        system = ClassifySystem(nn.Identity(), vocab, labels)
        splits = {}
        for name, part in (("train", train_set), ("valid", valid_set), ("test", test_set)):
            ids = system.encode([e.text for e in part], source=f"{source} ({name})")
            splits[name] = (ids, system.targets(part, source=f"{source} ({name})"))
        if corpus:
            log(f"biLM corpus: {len(corpus)} unlabelled texts ({config.model.elmo_corpus})")
        context = BuildContext(
            config.model,
            vocab_size,
            len(labels),
            train_ids=splits["train"][0],
            valid_ids=splits["valid"][0],
            pretrain=config.pretrain,
            progress=progress,
            log=log,
            pretrain_ids=system.encode(corpus, source=f"biLM corpus ({config.model.elmo_corpus})"),
            bilm=bilm,
        )
        system.model = BUILDERS[config.model.arch](context)
        for name, (ids, _) in splits.items():
            system.check_lengths(ids, source=f"{source} ({name})")

        def loss_fn(m, batch):
            logits = class_logits(m, batch.x, batch.lengths)
            return LossOutput(F.cross_entropy(logits, batch.targets), len(batch.targets))

        def train_batches(epoch, generator, batch_size):
            return token_batches(
                *splits["train"], batch_size=batch_size, pad_id=PAD_ID, shuffle=True, generator=generator
            )

        @torch.no_grad()
        def validate(m):
            device = model_device(m)
            correct, loss = 0, 0.0
            for batch in token_batches(*splits["valid"], batch_size=256, pad_id=PAD_ID, shuffle=False):
                logits = class_logits(m, batch.x.to(device), batch.lengths)
                targets = batch.targets.to(device)
                loss += F.cross_entropy(logits, targets, reduction="sum").item()
                correct += int((logits.argmax(-1) == targets).sum())
            total = len(splits["valid"][1])
            return {"valid_loss": loss / total, "valid_error": 100.0 * (1 - correct / total)}

        def test_report() -> Report:
            ids, targets = splits["test"]
            predictions = system.classify(ids)
            correct = sum(p == t for p, t in zip(predictions, targets, strict=True))
            examples = [
                (test_set[i].text, labels[targets[i]], labels[predictions[i]])
                for i in range(0, len(test_set), max(1, len(test_set) // 10))
            ]
            counts = {"test_texts": float(len(targets)), "train_texts": float(len(train_set))}
            return Report({"accuracy": 100.0 * correct / len(targets), **counts}, examples)

        return TrainingRun(
            system.model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=system.save,
            test=test_report,
            summary=(
                f"data: {source}, {len(train_set)} train / {len(valid_set)} valid / {len(test_set)} test texts, "
                f"{len(labels)} classes, {vocab_size} symbols"
            ),
            summary_model=f"arch {config.model.arch}",
            valid_metric="valid_error",
            pretrained=pretrained_names(config.model.arch, system.model),
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """Accuracy (%) of a checkpoint on a ``TEXT<TAB>LABEL`` file."""
    system = ClassifySystem.load(checkpoint)
    examples = read_labelled_file(data_path)
    return {"accuracy": system.accuracy(examples, source=data_path), "texts": float(len(examples))}


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """``TEXT<TAB>LABEL`` for each input text."""
    system = ClassifySystem.load(checkpoint)
    predictions = system.classify(system.encode(inputs, source="command line"))
    return [f"{text}\t{system.labels[p]}" for text, p in zip(inputs, predictions, strict=True)]
