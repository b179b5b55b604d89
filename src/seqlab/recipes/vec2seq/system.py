"""A trained vec2seq run: the class-conditioned generator, its characters and class names; it predicts samples of
named classes, scores labelled texts and generates from a ``CLASS[:PREFIX]`` prompt."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from seqlab.data.labelled_text import read_labelled_file, token_batches
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.generate import generate as generate_ids
from seqlab.errors import ConfigError, DataError
from seqlab.files import atomic_write
from seqlab.models.vec2seq import ConditionedRNNGenerator
from seqlab.recipes.base import model_device
from seqlab.recipes.common.labelled_text import (
    character_ids,
    class_ids,
)
from seqlab.recipes.saved_run import load_recipe_config, read_json_list
from seqlab.recipes.system import GenerationChunk, GenerationRequest, SystemOptions
from seqlab.recipes.vec2seq.config import Config

VOCAB_FILE = "vocab.json"
LABELS_FILE = "labels.json"
PREDICT_SAMPLES = 5  # samples per class printed by predict without --nbest
EVAL_BATCH_SIZE = 256  # texts per batch when scoring


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

    ``OPTIONS``: ``nbest``, the samples ``predict`` draws per class (default ``PREDICT_SAMPLES``); a served
    request may set its own (``with_search``).
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
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> Vec2SeqSystem:
        """The run in ``directory``; ``options.nbest`` sets the samples per class of ``predict``.

        Raises: CheckpointError (one line naming the file) for a missing or malformed file.
        """
        config = load_recipe_config(directory, Config)
        labels = read_json_list(directory / LABELS_FILE, "labels")
        model = ConditionedRNNGenerator.from_pretrained(directory)
        vocab = Vocabulary.load(directory / VOCAB_FILE)
        return cls(model, vocab, labels, config, nbest=options.nbest or PREDICT_SAMPLES)

    def with_search(self, *, num_beams: int | None = None, nbest: int | None = None) -> Vec2SeqSystem:
        """This system drawing ``nbest`` samples per class in ``predict`` (None: this system's), sharing its model
        (``NBestSource``: a served request's ``nbest``); predict samples and searches no beam, so ``num_beams`` may
        only be 1.

        Raises: ConfigError for an ``nbest`` outside [1, ``system.MAX_BEAMS``], or a ``num_beams`` other than 1.
        """
        SystemOptions(num_beams=num_beams, nbest=nbest)  # the range of each count
        if num_beams not in (None, 1):
            raise ConfigError(f"num_beams ({num_beams}) must be 1: this model samples its texts, it searches no beam")
        return self if nbest is None else dataclasses.replace(self, nbest=nbest)

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
        """``nbest`` samples of each class named in ``inputs`` (case ignored), with the sample section's settings,
        each input's drawn by a generator of its own seeded with the section's seed: a class gives the same texts
        whatever the other inputs of the call (or of a served batch) are.

        Raises: DataError ``inputs: unknown class ...``.
        """
        class_ids = [self.class_id(name, source="inputs") for name in inputs]
        return [
            ClassSamples(
                self.labels[c],
                tuple(self.sample([c] * self.nbest, torch.Generator().manual_seed(self.config.sample.seed))),
            )
            for c in class_ids
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
