"""Recipe ``vec2seq``: one-to-many generation conditioned on a class, a personal name from its language of origin.

Task: given a class (``french``), generate a sequence of that class (``Marcelline``), character by character, as
in the PyTorch tutorial "Generating names with a character-level RNN". Data: the ``classify`` recipe's names by
language (``seqlab.data.names``, nameCreator: 9 languages, 14,100 names) split 80/10/10 per class by the same
function and seed, or the user's own ``TEXT<TAB>LABEL`` files. Model: ``seqlab.models.ConditionedRNNGenerator``,
a learned class embedding that sets the initial state and is fed at every step (``model.condition``), GRU by
default (``model.cell``: rnn | gru | lstm), trained by teacher forcing. Samples come from
``seqlab.decoding.generate`` (ancestral sampling with temperature / top-k, section ``sample``).

Metrics: the test names' negative log-likelihood given their class (nats per character, the end token counted);
the class check: a BiLSTM classifier (``seqlab.recipes.class_checker``) trained on the real training names
labels ``sample.samples_per_class`` samples of every class, and its class-balanced accuracy on them is reported
beside its balanced accuracy on the real test names (what a perfect generator would reach) and chance
(100 / classes); novelty (% of samples that are not training names) and uniqueness (% distinct samples).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.labelled_text import LabelledText, read_labelled_file, token_batches
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.generate import generate as generate_ids
from seqlab.errors import ConfigError, DataError
from seqlab.files import atomic_write
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.models.vec2seq import CONDITIONS, ConditionedRNNGenerator, ConditionedRNNGeneratorConfig, ConditionName
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, read_json_list, run_training
from seqlab.recipes.class_checker import class_accuracies, train_class_checker
from seqlab.recipes.classify import ClassifyDataConfig, ClassifyModelConfig, ClassifySystem, read_data
from seqlab.recipes.run_directory import RunMode
from seqlab.training.trainer import LossOutput, TrainConfig
from seqlab.validation import check_choice, check_int, check_probability, check_real

NAME = "vec2seq"
DESCRIPTION = "a name generated from its language of origin: class-conditioned char GRU, class check of samples (%)"
PREDICT_OPTIONS = ("nbest",)
VOCAB_FILE = "vocab.json"
LABELS_FILE = "labels.json"
PREDICT_SAMPLES = 5  # samples per class printed by predict without --nbest


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

    data: ClassifyDataConfig = field(default_factory=ClassifyDataConfig)
    model: Vec2SeqModelConfig = field(default_factory=Vec2SeqModelConfig)
    sample: Vec2SeqSampleConfig = field(default_factory=Vec2SeqSampleConfig)
    checker: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=3e-3, batch_size=64, max_epochs=10, patience=2, time_budget=90.0)
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=3e-3, batch_size=64, max_epochs=40, patience=4, time_budget=180.0)
    )


@dataclass
class Vec2SeqSystem:
    """A trained generator with its character vocabulary and class names: what a run directory holds."""

    model: ConditionedRNNGenerator
    vocab: Vocabulary
    labels: list[str]
    config: Config

    def save(self, directory: Path) -> None:
        """Write the model, the vocabulary and the class names (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.vocab.save(directory / VOCAB_FILE)
        atomic_write(directory / LABELS_FILE, json.dumps({"labels": self.labels}, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Vec2SeqSystem:
        config = load_recipe_config(directory, Config)
        labels = read_json_list(directory / LABELS_FILE, "labels")
        model = ConditionedRNNGenerator.from_pretrained(directory)
        return cls(model, Vocabulary.load(directory / VOCAB_FILE), labels, config)

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
        max_length: int | None = None,
    ) -> list[str]:
        """One generated text per entry of ``class_ids``, each starting with ``prefix``: sampled (settings
        default to the ``sample`` section), or the most likely by beam search when ``num_beams`` > 1.

        Raises: ConfigError a bad sampling setting (``generate``'s message), or one given with num_beams > 1;
            DataError a prefix character the model never saw.
        """
        settings = self.config.sample
        if num_beams > 1 and (temperature, top_k, top_p) != (None, None, None):
            raise ConfigError(f"num_beams ({num_beams}) > 1 finds the most likely text; it takes no sampling setting")
        self.model.eval()
        device = model_device(self.model)
        prompt = self.prompt_ids(prefix, source="prefix")
        classes = torch.tensor(list(class_ids), dtype=torch.long, device=device)
        sampling = {
            "do_sample": True,
            "temperature": temperature or settings.temperature,
            "top_k": top_k or settings.top_k,
        }
        out = generate_ids(
            self.model.bind(classes),
            torch.tensor([prompt] * len(classes), dtype=torch.long, device=device),
            max_new_tokens=max_length or settings.max_length,
            **(sampling | {"top_p": top_p} if num_beams == 1 else {"num_beams": num_beams}),
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
        for batch in token_batches(ids, class_ids, batch_size=256, pad_id=self.vocab.pad_id, shuffle=False):
            loss = teacher_forcing_nll(self.model, batch.x.to(device), batch.targets.to(device), reduction="sum")
            total, count = total + loss.item(), count + int((batch.x[:, 1:] != self.vocab.pad_id).sum())
        return total / count


def teacher_forcing_nll(
    model: ConditionedRNNGenerator, x: torch.Tensor, class_ids: torch.Tensor, *, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy (nats) of x[:, 1:] given x[:, :-1] and the classes, for right-padded BOS..EOS rows x (B, T)
    (padding, id 0, is not scored); ``reduction`` as in ``F.cross_entropy``."""
    logits = model(x[:, :-1], class_ids).logits  # (B, T - 1, V)
    return F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), ignore_index=0, reduction=reduction)


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train the conditioned generator, keep the best checkpoint in ``out_dir``, and report the test NLL and the
    class check (module docstring).

    Raises:
        ConfigError: nameCreator missing, or data.test_path without data.train_path. DataError: a data file is
            missing or malformed, a split is empty, or the test data has classes absent from training.
    """

    def prepare() -> TrainingRun:
        train_set, valid_set, test_set, source = read_data(config.data)
        labels = sorted({e.label for e in train_set})
        if len(labels) < 2:
            raise DataError(f"{source}: needs at least 2 classes, found {len(labels)}")
        vocab = Vocabulary.build(e.text for e in (*train_set, *valid_set, *test_set))
        classes = ClassifySystem(nn.Identity(), vocab, labels)  # encodes texts and labels as the checker will
        splits = {}
        for name, part in (("train", train_set), ("valid", valid_set), ("test", test_set)):
            where = f"{source} ({name})"
            splits[name] = (classes.encode([e.text for e in part], source=where), classes.targets(part, source=where))
        model = ConditionedRNNGenerator(
            ConditionedRNNGeneratorConfig(vocab_size=len(vocab), num_classes=len(labels), **asdict(config.model))
        )
        system = Vec2SeqSystem(model, vocab, labels, config)

        def loss_fn(m, batch):
            return LossOutput(teacher_forcing_nll(m, batch.x, batch.targets), int((batch.x[:, 1:] != 0).sum()))

        def train_batches(epoch, generator, batch_size):
            return token_batches(*splits["train"], batch_size=batch_size, pad_id=0, shuffle=True, generator=generator)

        def validate(m):
            return {"valid_loss": system.nats_per_char(*splits["valid"])}

        def test() -> Report:
            return class_check(system, train_set, valid_set, test_set, splits["test"], log=log, progress=progress)

        return TrainingRun(
            model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=system.save,
            test=test,
            summary=(
                f"data: {source}, {len(train_set)} train / {len(valid_set)} valid / {len(test_set)} test texts, "
                f"{len(labels)} classes, {len(vocab) - 3} characters"
            ),
            summary_model=f"{config.model.cell}, condition {config.model.condition}",
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def class_check(
    system: Vec2SeqSystem,
    train_set: Sequence[LabelledText],
    valid_set: Sequence[LabelledText],
    test_set: Sequence[LabelledText],
    test_ids: tuple[list[list[int]], list[int]],
    *,
    log: Callable[[str], None],
    progress: bool,
) -> Report:
    """The test report: NLL of the test texts, then the class check of ``samples_per_class`` samples per class by
    a checker trained on the real training texts, novelty and uniqueness (module docstring)."""
    settings, labels = system.config.sample, system.labels
    checker_model = ClassifyModelConfig(
        embedding_size=settings.checker_embedding_size, hidden_size=settings.checker_hidden_size
    )
    checker = train_class_checker(
        train_set, valid_set, system.vocab, labels, checker_model, system.config.checker, progress=progress, log=log
    )
    targets = [c for c in range(len(labels)) for _ in range(settings.samples_per_class)]
    samples = system.sample(targets, torch.Generator().manual_seed(settings.seed))
    sample_accuracy, _ = class_accuracies(checker, samples, targets)
    real_accuracy, real_balanced = class_accuracies(checker, [e.text for e in test_set], test_ids[1])
    known = {e.text for e in train_set}
    results = {
        "test_nats_per_char": system.nats_per_char(*test_ids),
        "sample_class_accuracy": sample_accuracy,  # balanced by construction: every class has as many samples
        "real_class_accuracy": real_balanced,
        "real_class_accuracy_unbalanced": real_accuracy,
        "chance_accuracy": 100.0 / len(labels),
        "novelty": 100.0 * sum(s not in known for s in samples) / len(samples),
        "uniqueness": 100.0 * len(set(samples)) / len(samples),
        "samples": float(len(samples)),
    }
    real_of = {c: [e.text for e in test_set if e.label == label] for c, label in enumerate(labels)}
    examples = [
        (labels[c], (real_of[c] or ["-"])[0], samples[c * settings.samples_per_class]) for c in range(len(labels))
    ]
    return Report(results, examples)


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """NLL (nats and bits per character, end token counted) of a checkpoint on a ``TEXT<TAB>LABEL`` file."""
    system = Vec2SeqSystem.load(checkpoint)
    examples = read_labelled_file(data_path)
    classes = ClassifySystem(nn.Identity(), system.vocab, system.labels)
    ids, targets = (
        classes.encode([e.text for e in examples], source=data_path),
        classes.targets(examples, source=data_path),
    )
    nats = system.nats_per_char(ids, targets)
    return {
        "nats_per_char": nats,
        "bits_per_char": nats / torch.log(torch.tensor(2.0)).item(),
        "texts": float(len(ids)),
    }


def predict(checkpoint: Path, inputs: Sequence[str], *, nbest: int = PREDICT_SAMPLES) -> list[str]:
    """``CLASS<TAB>SAMPLE`` lines, ``nbest`` samples of each class named in ``inputs`` (sample section's settings
    and seed, so the same command prints the same names)."""
    system = Vec2SeqSystem.load(checkpoint)
    class_ids = [system.class_id(name, source="command line") for name in inputs]
    targets = [c for c in class_ids for _ in range(nbest)]
    samples = system.sample(targets, torch.Generator().manual_seed(system.config.sample.seed))
    return [f"{system.labels[c]}\t{s}" for c, s in zip(targets, samples, strict=True)]


def generate(
    checkpoint: Path,
    prompt: str,
    *,
    max_new_tokens: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    num_beams: int | None = None,
    seed: int | None = None,
    num_samples: int = 1,
    stop: str | None = None,
    on_text: Callable[[str], None] = lambda text: None,
) -> list[str]:
    """``num_samples`` texts of the class ``prompt`` names, ``CLASS`` or ``CLASS:PREFIX`` (samples then start with
    PREFIX), one per line to ``on_text``. Unset options take the sample section's values; a seed reproduces the
    samples (None: a random one); ``num_beams`` > 1 gives the most likely text by beam search instead.

    Raises: DataError an unknown class or prefix character; ConfigError a stop string (a sample ends at its end
        token), or a bad sampling setting.
    """
    if stop is not None:
        raise ConfigError("--stop: a vec2seq sample ends at its end token; generate takes no stop string")
    system = Vec2SeqSystem.load(checkpoint)
    name, _, prefix = prompt.partition(":")
    class_id = system.class_id(name, source="--prompt")
    system.prompt_ids(prefix, source="--prompt")  # refuse unseen characters, naming the option
    generator = torch.Generator()
    generator.manual_seed(seed) if seed is not None else generator.seed()
    beams = num_beams or 1
    texts = system.sample(
        [class_id] * (1 if beams > 1 else num_samples),
        generator,
        prefix=prefix,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        num_beams=beams,
        max_length=max_new_tokens,
    )
    for text in texts:
        on_text(text + "\n")
    return texts
