"""Recipe ``vec2seq``: one-to-many generation conditioned on a class, a personal name from its language of origin.

Task: given a class (``french``), generate a sequence of that class (``Marcelline``), character by character, as
in the PyTorch tutorial "Generating names with a character-level RNN". Data: the ``classify`` recipe's names by
language (``seqlab.data.names``, nameCreator: 9 languages, 14,100 names) split 80/10/10 per class by the same
function and seed, or the user's own ``TEXT<TAB>LABEL`` files. Model: ``seqlab.models.ConditionedRNNGenerator``,
a learned class embedding that sets the initial state and is fed at every step (``model.condition``), GRU by
default (``model.cell``: rnn | gru | lstm), trained by teacher forcing. Samples come from
``seqlab.decoding.generate`` (ancestral sampling with temperature / top-k, section ``sample``).

Metrics: the test names' negative log-likelihood given their class (nats per character, the end token counted);
the class check: a BiLSTM classifier (``seqlab.recipes.common.class_checker``) trained on the real training names
labels ``sample.samples_per_class`` samples of every class, and its class-balanced accuracy on them is reported
beside its balanced accuracy on the real test names (what a perfect generator would reach) and chance
(100 / classes); novelty (% of samples that are not training names) and uniqueness (% distinct samples).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from seqlab.data.labelled_text import TokenBatch, read_labelled_file, token_batches
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.generate import generate as generate_ids
from seqlab.errors import ConfigError, DataError
from seqlab.files import atomic_write
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.models.vec2seq import CONDITIONS, ConditionedRNNGenerator, ConditionedRNNGeneratorConfig, ConditionName
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, read_json_list
from seqlab.recipes.common.class_checker import train_class_checker
from seqlab.recipes.common.labelled_text import (
    LabelledSplits,
    LabelledTextDataConfig,
    character_ids,
    class_ids,
    read_labelled_splits,
)
from seqlab.recipes.system import GenerationChunk, GenerationRequest, SystemOptions
from seqlab.training.trainer import LossOutput, TrainConfig
from seqlab.validation import check_choice, check_int, check_probability, check_real

NAME = "vec2seq"
DESCRIPTION = "a name generated from its language of origin: class-conditioned char GRU, class check of samples (%)"
VOCAB_FILE = "vocab.json"
LABELS_FILE = "labels.json"
PREDICT_SAMPLES = 5  # samples per class printed by predict without --nbest
EVAL_BATCH_SIZE = 256  # texts per batch when scoring


@dataclass(frozen=True)
class Vec2SeqModelConfig:
    """The conditioned generator (``seqlab.models.vec2seq``)."""

    cell: CellName = "gru"  # rnn | gru | lstm
    condition: ConditionName = "both"  # init: the class sets h_0; input: it joins every input; both
    class_embedding_size: int = 32  # size of the learned class vector
    embedding_size: int = 32  # E, character embedding
    hidden_size: int = 128  # H
    num_layers: int = 1  # stacked recurrent layers
    dropout: float = 0.1  # inputs, between layers, before the output layer

    def __post_init__(self) -> None:
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_choice("condition", self.condition, CONDITIONS)
        for name in ("class_embedding_size", "embedding_size", "hidden_size", "num_layers"):
            check_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)


@dataclass(frozen=True)
class Vec2SeqSampleConfig:
    """How samples are drawn (the test's class check, and predict) and the class checker's sizes."""

    samples_per_class: int = 200  # samples of every class in the class check
    temperature: float = 0.8  # logits / T before sampling
    top_k: int | None = None  # sample from the k most likely characters (None: all)
    max_length: int = 24  # the most characters of a sample (its end token included)
    seed: int = 0  # seed of the sampler (the class check's samples and predict's)
    checker_embedding_size: int = 32  # the class checker's character embedding
    checker_hidden_size: int = 64  # the class checker's BiLSTM, per direction

    def __post_init__(self) -> None:
        check_int("samples_per_class", self.samples_per_class)
        check_real("temperature", self.temperature, greater_than=0.0)
        check_int("top_k", self.top_k, optional=True)
        check_int("max_length", self.max_length)
        check_int("seed", self.seed, minimum=0)
        check_int("checker_embedding_size", self.checker_embedding_size)
        check_int("checker_hidden_size", self.checker_hidden_size)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, sample, checker (the class checker's training), train."""

    data: LabelledTextDataConfig = field(default_factory=LabelledTextDataConfig)
    model: Vec2SeqModelConfig = field(default_factory=Vec2SeqModelConfig)
    sample: Vec2SeqSampleConfig = field(default_factory=Vec2SeqSampleConfig)
    checker: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=3e-3, batch_size=64, max_epochs=10, patience=2, time_budget=90.0)
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=3e-3, batch_size=64, max_epochs=40, patience=4, time_budget=180.0)
    )


@dataclass(frozen=True)
class ClassSamples:
    """Generated texts of one class (``seqlab predict``'s answer to a class name).

    Attributes:
        label: the class, as the run names it.
        samples: the generated texts, in the order drawn.
    """

    label: str
    samples: tuple[str, ...]

    def lines(self) -> list[str]:
        """``CLASS<TAB>SAMPLE``, one line per sample."""
        return [f"{self.label}\t{sample}" for sample in self.samples]


@dataclass
class Vec2SeqSystem:
    """A trained generator with its character vocabulary and class names: what a run directory holds.

    ``OPTIONS``: ``nbest``, the samples ``predict`` draws per class (default ``PREDICT_SAMPLES``).
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"nbest"})

    model: ConditionedRNNGenerator
    vocab: Vocabulary
    labels: list[str]
    config: Config
    nbest: int = PREDICT_SAMPLES

    def save(self, directory: Path) -> None:
        """Write the model, the vocabulary and the class names (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.vocab.save(directory / VOCAB_FILE)
        atomic_write(directory / LABELS_FILE, json.dumps({"labels": self.labels}, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions | None = None) -> Vec2SeqSystem:
        """The run in ``directory``; ``options.nbest`` sets the samples per class of ``predict``.

        Raises: CheckpointError (one line naming the file) for a missing or malformed file.
        """
        config = load_recipe_config(directory, Config)
        labels = read_json_list(directory / LABELS_FILE, "labels")
        model = ConditionedRNNGenerator.from_pretrained(directory)
        vocab = Vocabulary.load(directory / VOCAB_FILE)
        return cls(model, vocab, labels, config, nbest=(options or SystemOptions()).nbest or PREDICT_SAMPLES)

    def class_id(self, name: str, *, source: str) -> int:
        """The id of class ``name`` (case ignored).

        Raises: DataError ``SOURCE: unknown class 'x' (known: a, b, ...)``.
        """
        index = {label.lower(): i for i, label in enumerate(self.labels)}
        if name.lower() not in index:
            raise DataError(f"{source}: unknown class {name!r} (known: {', '.join(self.labels)})")
        return index[name.lower()]

    def prompt_ids(self, prefix: str, *, source: str) -> list[int]:
        """The start token and the characters of ``prefix``.

        Raises: DataError for a character the model never saw.
        """
        unseen = sorted({ch for ch in prefix if ch not in self.vocab})
        if unseen:
            raise DataError(f"{source}: characters the model never saw: {' '.join(map(repr, unseen))}")
        return self.vocab.encode(prefix, add_bos=True)

    def search_settings(
        self, num_beams: int, do_sample: bool, *, temperature: float | None, top_k: int | None, top_p: float | None
    ) -> dict[str, Any]:
        """``seqlab.decoding.generate``'s search arguments: beam search with ``num_beams`` > 1, greedy search
        without ``do_sample``, else sampling with the given settings over the ``sample`` section's.

        Raises: ConfigError for a sampling setting given to beam or greedy search.
        """
        if num_beams > 1 or not do_sample:
            if (temperature, top_k, top_p) != (None, None, None):
                search = f"num_beams ({num_beams}) > 1" if num_beams > 1 else "do_sample=False"
                raise ConfigError(f"{search} finds the most likely text; it takes no sampling setting")
            return {"num_beams": num_beams}
        settings = self.config.sample
        return {
            "do_sample": True,
            "temperature": temperature or settings.temperature,
            "top_k": top_k or settings.top_k,
            "top_p": top_p,
        }

    @torch.no_grad()
    def sample(
        self,
        class_ids: Sequence[int],
        generator: torch.Generator,
        *,
        prefix: str = "",
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        num_beams: int = 1,
        do_sample: bool = True,
        max_length: int | None = None,
    ) -> list[str]:
        """One generated text per entry of ``class_ids``, each starting with ``prefix``: sampled (settings
        default to the ``sample`` section), or the most likely by beam search when ``num_beams`` > 1, or the
        greedy one when ``do_sample`` is False.

        Raises: ConfigError a bad sampling setting (``generate``'s message), or one given with num_beams > 1 or
            without sampling; DataError a prefix character the model never saw.
        """
        settings = self.config.sample
        search = self.search_settings(num_beams, do_sample, temperature=temperature, top_k=top_k, top_p=top_p)
        self.model.eval()
        device = model_device(self.model)
        prompt = self.prompt_ids(prefix, source="prefix")
        classes = torch.tensor(list(class_ids), dtype=torch.long, device=device)
        out = generate_ids(
            self.model.bind(classes),
            torch.tensor([prompt] * len(classes), dtype=torch.long, device=device),
            max_new_tokens=max_length or settings.max_length,
            **search,
            eos_id=self.vocab.eos_id,
            generator=generator,
        )
        texts = []
        for row, length in zip(out.tokens[:, len(prompt) :].tolist(), out.lengths.tolist(), strict=True):
            special = [i for i, token in enumerate(row[:length]) if token < len(Vocabulary.SPECIALS)]
            texts.append(prefix + "".join(self.vocab.decode(row[: special[0] if special else length])))
        return texts

    @torch.no_grad()
    def nats_per_char(self, ids: Sequence[Sequence[int]], class_ids: Sequence[int]) -> float:
        """Mean negative log-likelihood (nats) of every character and end token of BOS..EOS ``ids`` given their
        classes."""
        self.model.eval()
        device = model_device(self.model)
        total, count = 0.0, 0
        for batch in token_batches(ids, class_ids, batch_size=EVAL_BATCH_SIZE, pad_id=self.vocab.pad_id, shuffle=False):
            loss = teacher_forcing_nll(self.model, batch.x.to(device), batch.targets.to(device), reduction="sum")
            total, count = total + loss.item(), count + int((batch.x[:, 1:] != self.vocab.pad_id).sum())
        return total / count

    def predict(self, inputs: Sequence[str]) -> list[ClassSamples]:
        """``nbest`` samples of each class named in ``inputs`` (case ignored), with the sample section's settings
        and seed, so the same call gives the same texts.

        Raises: DataError ``command line: unknown class ...``.
        """
        class_ids = [self.class_id(name, source="command line") for name in inputs]
        targets = [c for c in class_ids for _ in range(self.nbest)]
        samples = self.sample(targets, torch.Generator().manual_seed(self.config.sample.seed))
        return [
            ClassSamples(self.labels[c], tuple(samples[i * self.nbest : (i + 1) * self.nbest]))
            for i, c in enumerate(class_ids)
        ]

    def evaluate(self, data_path: str) -> dict[str, float]:
        """NLL (nats and bits per character, end token counted) on a ``TEXT<TAB>LABEL`` file, and its ``texts``.

        Raises: DataError naming the file for a malformed line, an unknown character or class.
        """
        examples = read_labelled_file(data_path)
        ids = character_ids(self.vocab, [e.text for e in examples], source=data_path)
        nats = self.nats_per_char(ids, class_ids(self.labels, examples, source=data_path))
        return {
            "nats_per_char": nats,
            "bits_per_char": nats / torch.log(torch.tensor(2.0)).item(),
            "texts": float(len(ids)),
        }

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """``request.num_return_sequences`` texts of the class the prompt names, ``CLASS`` or ``CLASS:PREFIX``;
        each chunk is one whole text after the prompt's PREFIX. Unset settings take the sample section's
        (``max_new_tokens`` is ``sample.max_length``); a seed reproduces the texts (None: a random one);
        ``num_beams`` > 1 gives the one most likely text by beam search instead; ``do_sample=False`` the greedy
        one.

        Raises: DataError an unknown class or prefix character (naming ``--prompt``); ConfigError a stop string
            (a text ends at its end token), several sequences or a sampling setting with beam search, or a bad
            sampling setting.
        """
        num_beams = _search_beams(request)
        name, _, prefix = request.prompt.partition(":")
        class_id = self.class_id(name, source="--prompt")
        self.prompt_ids(prefix, source="--prompt")  # refuse unseen characters, naming the option
        generator = torch.Generator()
        generator.manual_seed(request.seed) if request.seed is not None else generator.seed()
        texts = self.sample(
            [class_id] * request.num_return_sequences,
            generator,
            prefix=prefix,
            temperature=request.temperature,
            top_k=request.top_k,
            top_p=request.top_p,
            num_beams=num_beams,
            do_sample=request.do_sample is not False,
            max_length=request.max_new_tokens,
        )
        for index, text in enumerate(texts):
            yield GenerationChunk(index, text[len(prefix) :], True)


def _search_beams(request: GenerationRequest) -> int:
    """The beam width of ``request`` (1 if not given).

    Raises: ConfigError for a stop string (a text ends at its end token), or several sequences or
        ``do_sample=True`` with beam search (it finds the one most likely text).
    """
    if request.stop is not None:
        raise ConfigError("--stop: a vec2seq sample ends at its end token; generate takes no stop string")
    num_beams = request.num_beams or 1
    if num_beams > 1 and request.num_return_sequences > 1:
        raise ConfigError(
            f"num_beams ({num_beams}) > 1 finds the one most likely text; num_return_sequences "
            f"({request.num_return_sequences}) must be 1"
        )
    if num_beams > 1 and request.do_sample:
        raise ConfigError(f"num_beams ({num_beams}) > 1 finds the most likely text; it takes no sampling setting")
    return num_beams


def teacher_forcing_nll(
    model: ConditionedRNNGenerator, x: torch.Tensor, class_ids: torch.Tensor, *, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy (nats) of x[:, 1:] given x[:, :-1] and the classes, for right-padded BOS..EOS rows x (B, T)
    (padding, id 0, is not scored); ``reduction`` as in ``F.cross_entropy``."""
    logits = model(x[:, :-1], class_ids).logits  # (B, T - 1, V)
    return F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), ignore_index=0, reduction=reduction)


@dataclass(frozen=True)
class Vec2SeqTraining:
    """The parts that train a generator by teacher forcing and test it (``TrainingRun``'s loss, batches,
    validation and test), each usable alone.

    Attributes:
        system: the generator being trained, with its vocabulary, classes and config.
        data: the labelled texts.
        encoded: split name -> (BOS..EOS character ids, class ids) of its texts.
    """

    system: Vec2SeqSystem
    data: LabelledSplits
    encoded: dict[str, tuple[list[list[int]], list[int]]]

    def loss(self, model: ConditionedRNNGenerator, batch: TokenBatch) -> LossOutput:
        """Mean NLL (nats per predicted character, end token included) of the batch, over those characters."""
        return LossOutput(teacher_forcing_nll(model, batch.x, batch.targets), int((batch.x[:, 1:] != 0).sum()))

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[TokenBatch]:
        """The training texts in shuffled batches of ``batch_size`` (``generator`` draws the order)."""
        ids, targets = self.encoded["train"]
        return token_batches(ids, targets, batch_size=batch_size, pad_id=0, shuffle=True, generator=generator)

    def validate(self, model: ConditionedRNNGenerator) -> dict[str, float]:
        """``valid_loss``: the validation texts' NLL, nats per character, token-weighted over the whole split."""
        return {"valid_loss": self.system.nats_per_char(*self.encoded["valid"])}

    def test(self) -> Report:
        """The test NLL, then the class check (``class_check``)."""
        return class_check(self.system, self.data, self.encoded["test"])


def prepare(config: Config) -> TrainingRun:
    """Read the labelled texts, build the character vocabulary of every split and the conditioned generator, and
    return the parts that train it by teacher forcing and test it (``Vec2SeqTraining``).

    Raises:
        ConfigError: nameCreator missing, or data.test_path without data.train_path. DataError: a data file is
            missing or malformed, a split is empty, fewer than 2 classes, or the test data has classes absent
            from training.
    """
    data = read_labelled_splits(config.data)
    labels = data.labels()
    vocab = Vocabulary.build(e.text for e in (*data.train, *data.valid, *data.test))
    encoded = {}
    for name, part in data.parts():
        where = f"{data.source} ({name})"
        encoded[name] = (
            character_ids(vocab, [e.text for e in part], source=where),
            class_ids(labels, part, source=where),
        )
    model = ConditionedRNNGenerator(
        ConditionedRNNGeneratorConfig(vocab_size=len(vocab), num_classes=len(labels), **asdict(config.model))
    )
    system = Vec2SeqSystem(model, vocab, labels, config)
    training = Vec2SeqTraining(system, data, encoded)
    return TrainingRun(
        config,
        model,
        loss_fn=training.loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=system.save,
        test=training.test,
        summary=(
            f"data: {data.source}, {len(data.train)} train / {len(data.valid)} valid / {len(data.test)} test "
            f"texts, {len(labels)} classes, {len(vocab) - 3} characters"
        ),
        summary_model=f"{config.model.cell}, condition {config.model.condition}",
    )


def class_check(system: Vec2SeqSystem, data: LabelledSplits, test: tuple[list[list[int]], list[int]]) -> Report:
    """The test report: NLL of the test texts (``test``: their ids and class ids), then the class check of
    ``samples_per_class`` samples per class by a checker trained on the real training texts, novelty and
    uniqueness (module docstring); the checker logs to standard error, as ``seqlab train`` does."""
    settings, labels = system.config.sample, system.labels
    checker = train_class_checker(
        data.train,
        data.valid,
        system.vocab,
        labels,
        embedding_size=settings.checker_embedding_size,
        hidden_size=settings.checker_hidden_size,
        config=system.config.checker,
        log=functools.partial(print, file=sys.stderr),
    )
    targets = [c for c in range(len(labels)) for _ in range(settings.samples_per_class)]
    samples = system.sample(targets, torch.Generator().manual_seed(settings.seed))
    sample_accuracy, _ = checker.accuracies(samples, targets)
    real_accuracy, real_balanced = checker.accuracies([e.text for e in data.test], test[1])
    known = {e.text for e in data.train}
    results = {
        "test_nats_per_char": system.nats_per_char(*test),
        "sample_class_accuracy": sample_accuracy,  # balanced by construction: every class has as many samples
        "real_class_accuracy": real_balanced,
        "real_class_accuracy_unbalanced": real_accuracy,
        "chance_accuracy": 100.0 / len(labels),
        "novelty": 100.0 * sum(s not in known for s in samples) / len(samples),
        "uniqueness": 100.0 * len(set(samples)) / len(samples),
        "samples": float(len(samples)),
    }
    real_of = {c: [e.text for e in data.test if e.label == label] for c, label in enumerate(labels)}
    examples = [
        (labels[c], (real_of[c] or ["-"])[0], samples[c * settings.samples_per_class]) for c in range(len(labels))
    ]
    return Report(results, examples)


System = Vec2SeqSystem
