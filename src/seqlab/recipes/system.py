"""``System``: one protocol for a trained run, whatever its recipe, and the typed requests it answers.

A run directory holds a trained model with what it needs to be used (vocabularies or tokenizer, labels, scalers)
and the recipe's config. Its recipe's ``System`` class loads it (``load_system(run_dir)`` finds the class from
``recipe.json``) and answers the same calls for every task:

- ``predict(inputs) -> list[Prediction]``: typed outputs (a pronunciation n-best with scores, class
  probabilities, tags, a forecast), each of which renders as the lines ``seqlab predict`` prints;
- ``evaluate(data_path) -> dict[str, float]``: the recipe's metrics on a file in the task's standard format;
- ``generate(GenerationRequest) -> Iterator[GenerationChunk]``, where the task generates (``TextGenerator``): text
  streamed piece by piece as tokens are produced.

Options that only some systems take (``num_beams``, ``nbest``, ``--ensemble``, ``--rescore``, ``--errors``) travel
in one ``SystemOptions``, validated once; a System class names the ones it takes in ``OPTIONS``, and the
command line refuses the others in one line. What an analysis needs from a run is a protocol of its own
(``AttentionSource``, ``ExposureSource``): ``seqlab analyze`` asks the system whether it offers it, never which
recipe wrote it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

from torch import Tensor

from seqlab.analysis.attention import LabelledAttention
from seqlab.analysis.exposure import ExposureBias
from seqlab.data.files import check_typed_text
from seqlab.errors import ConfigError
from seqlab.validation import MAX_VOCAB_SIZE

# The largest value of each count a request may ask for: beyond it a command would only run out of memory or time.
# A CPU generates tens to hundreds of tokens a second (lm_gpt fixture under load: 1,000 tokens in 194 s), so 100,000
# is already minutes to hours; Ctrl-C ends ``seqlab generate`` keeping what it printed.
MAX_BEAMS = 1_000
MAX_NEW_TOKENS = 100_000
BACKENDS = ("torch", "onnxruntime")  # what may run a model's decoding steps (``SystemOptions.backend``)


@dataclass(frozen=True)
class SystemOptions:
    """Settings a caller may give a loaded system, each None (or empty) for the run's own; a System class takes
    those named in its ``OPTIONS``.

    Attributes:
        num_beams: K, the beam width of predictions (1 = greedy search).
        nbest: hypotheses returned per input (<= num_beams).
        ensemble: further run directories decoded together with the loaded one (mean of their probabilities).
        rescore: run directories whose scores re-rank the beam (e.g. trained right to left); several score as one
            ensemble (the mean of their probabilities).
        rescore_weight: w in [0, 1], the weight of ``rescore``'s scores.
        errors: a new file that ``evaluate`` fills with the wrong predictions.
        backend: what runs the model's decoding steps: "torch" (the default) or "onnxruntime" (the graphs that
            ``seqlab export RUN --format onnx`` wrote in RUN/onnx, driven by the same decoding engine).
        compile: True to run a GPT's decoding steps compiled (``seqlab.models.CompiledGPT``: torch.compile over
            static KV caches), compiled once at load; torch backend only. None (or False): eager.
    Raises: ConfigError for a count outside [1, MAX_BEAMS], a weight outside [0, 1], an unknown backend or a compile
        that is not a bool, naming the option.
    """

    num_beams: int | None = None
    nbest: int | None = None
    ensemble: tuple[Path, ...] = ()
    rescore: tuple[Path, ...] = ()
    rescore_weight: float | None = None
    errors: Path | None = None
    backend: str | None = None
    compile: bool | None = None

    def __post_init__(self) -> None:
        for name in ("num_beams", "nbest"):
            _check_count(name, getattr(self, name), MAX_BEAMS)
        if self.rescore_weight is not None and not 0 <= self.rescore_weight <= 1:
            raise ConfigError(f"rescore_weight ({self.rescore_weight}) must be in [0, 1]")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ConfigError(f"backend ({self.backend!r}) must be one of {', '.join(BACKENDS)}")
        if self.compile is not None and not isinstance(self.compile, bool):
            raise ConfigError(f"compile ({self.compile!r}) must be True, False or None")

    def given(self) -> list[str]:
        """The names of the options set (not None or empty), in declaration order."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) not in (None, ())]


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate and how; None takes the run's own decode settings. One set of names for every caller
    (``seqlab generate``'s flags are these with dashes; Hugging Face's ``generate`` uses the same ones).

    Attributes:
        prompt: the text to continue (lm), or what the task reads as a prompt (vec2seq: ``CLASS[:PREFIX]``).
        max_new_tokens: most tokens generated after the prompt.
        do_sample: sample (True) or search (False); None: sample if temperature, top_k or top_p is given.
        temperature: T > 0, sampling from softmax(logits / T).
        top_k: sample from the k most likely tokens.
        top_p: sample from the smallest set of tokens whose probability reaches p, p in (0, 1].
        num_beams: K > 1 for beam search (not with sampling).
        seed: seed of the sampler; None draws a fresh one. A seed reproduces every sequence of the request.
        num_return_sequences: sequences generated for the prompt.
        stop: a sequence ends once its text contains this string (kept).
    Raises: ConfigError for a value out of range, naming the field and the value; DataError for a prompt with a
        compatibility character (``seqlab.data.files.check_typed_text``).
    """

    prompt: str
    max_new_tokens: int | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    num_beams: int | None = None
    seed: int | None = None
    num_return_sequences: int = 1
    stop: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str):
            raise ConfigError(f"prompt must be text, got {type(self.prompt).__name__}")
        check_typed_text(self.prompt, "prompt", allow_empty=True)
        _check_count("max_new_tokens", self.max_new_tokens, MAX_NEW_TOKENS)
        _check_count("top_k", self.top_k, MAX_VOCAB_SIZE)
        _check_count("num_beams", self.num_beams, MAX_BEAMS)
        _check_count("num_return_sequences", self.num_return_sequences, MAX_BEAMS)
        if self.temperature is not None and not 0 < self.temperature < math.inf:
            raise ConfigError(f"temperature ({self.temperature}) must be a finite number > 0")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p ({self.top_p}) must be in (0, 1]")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ConfigError(f"seed ({self.seed}) must be in [0, 2**63)")
        if self.stop == "":
            raise ConfigError("stop is empty; give the string that ends a sequence")

    @property
    def sampling(self) -> bool | None:
        """True if the request asks to sample, False if it asks not to, None if it leaves it to the run."""
        if self.do_sample is not None:
            return self.do_sample
        return True if (self.temperature, self.top_k, self.top_p) != (None, None, None) else None

    def overrides(self) -> dict[str, Any]:
        """The decode settings the request gives (``max_new_tokens``, ``temperature``, ``top_k``, ``top_p``,
        ``num_beams``, ``do_sample``), to lay over a run's decode section."""
        names = ("max_new_tokens", "temperature", "top_k", "top_p", "num_beams")
        given = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        return given if self.sampling is None else {**given, "do_sample": self.sampling}


class GenerationChunk(NamedTuple):
    """A piece of one generated sequence, as it is produced.

    Attributes:
        index: which of the request's ``num_return_sequences`` sequences (from 0); a sequence's chunks come in
            order, and all of one sequence before the next.
        text: the new text (may be empty); a sequence's texts joined are its whole continuation of the prompt.
        finished: True on the sequence's last chunk.
    """

    index: int
    text: str
    finished: bool


class Prediction(Protocol):
    """A typed prediction for one input that renders as the lines ``seqlab predict`` prints for it."""

    def lines(self) -> list[str]:
        """The output lines of this prediction (one or more)."""
        ...


class System(Protocol):
    """A trained run of some recipe: its model and what the model needs, loaded from a run directory.

    Attributes:
        OPTIONS: the names of the ``SystemOptions`` fields the class takes (others are refused by callers).
    """

    OPTIONS: ClassVar[frozenset[str]]

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = ...) -> System:
        """The run in ``directory``, with ``options`` (only those in ``OPTIONS``).

        Raises: CheckpointError (one line naming the file) for a missing, malformed or inconsistent run.
        """
        ...

    def save(self, directory: Path) -> None:
        """Write the model and the files it needs (the training skeleton adds ``recipe.json``)."""
        ...

    def predict(self, inputs: Sequence[str]) -> Sequence[Prediction]:
        """One prediction per input, in order.

        Raises: DataError naming the input that the model cannot read.
        """
        ...

    def evaluate(self, data_path: str) -> dict[str, float]:
        """The recipe's metrics on a file in the task's standard format.

        Raises: DataError naming the file (and line) for bad data.
        """
        ...


@runtime_checkable
class TextGenerator(Protocol):
    """A system that generates text (``seqlab generate``)."""

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """The request's sequences, streamed in chunks as tokens are produced.

        Raises: ConfigError for settings the system cannot honour (named), DataError for a prompt it cannot read.
        """
        ...


@runtime_checkable
class NBestSource(Protocol):
    """A system whose predictions are the n-best of a beam search, whose beam width and n-best count a caller may
    change per call without loading the run again (a served request's ``num_beams`` and ``nbest``). A system that
    searches for one output per input takes ``num_beams`` only (``with_beam_width``: translate, t5-g2p); one that
    samples its outputs takes ``nbest`` only, the samples per input (vec2seq)."""

    def with_search(self, *, num_beams: int | None = None, nbest: int | None = None) -> System:
        """This system, sharing its models, predicting the ``nbest`` best of a beam of ``num_beams`` (None: this
        system's own; an ``nbest`` not given is cut to the beam width).

        Raises: ConfigError for a count below 1, or an ``nbest`` above the beam width (named).
        """
        ...


def with_beam_width(system: Any, num_beams: int | None, nbest: int | None, what: str) -> Any:
    """``NBestSource.with_search`` of a system that predicts one ``what`` per input by a search of ``num_beams``
    (its ``options.num_beams``): the system with that beam width (None: its own), sharing its models.

    Raises: ConfigError for a ``num_beams`` outside [1, MAX_BEAMS], or an ``nbest`` other than 1 (or None).
    """
    SystemOptions(num_beams=num_beams, nbest=nbest)  # the range of each count
    if nbest not in (None, 1):
        raise ConfigError(f"nbest ({nbest}) must be 1: this model gives one {what} per input")
    if num_beams is None:
        return system
    return dataclasses.replace(system, options=dataclasses.replace(system.options, num_beams=num_beams))


@runtime_checkable
class AttentionSource(Protocol):
    """A system whose model attends, and can show its attention maps on one input (``seqlab analyze attention``)."""

    def attention_maps(self, text: str) -> LabelledAttention:
        """Every attention map of the model on ``text`` (the model's own output teacher-forced where it decodes).

        Raises: DataError for an input the model cannot read, ConfigError if this model has no attention.
        """
        ...


@runtime_checkable
class ContactSource(Protocol):
    """A protein model that reads a sequence both ways, whose attention can predict residue contacts
    (``seqlab analyze contacts``)."""

    def max_residues(self) -> int:
        """The most residues the model reads at once."""
        ...

    def residue_attention(self, sequence: str) -> Tensor:
        """(H, L, L) float32: every head of every layer's self-attention over the L residues of ``sequence`` (one
        letter each), the special tokens' rows and columns left out.

        Raises: ConfigError for a model that reads one way only; DataError for a residue the model never saw or a
            sequence longer than ``max_residues()``.
        """
        ...


@runtime_checkable
class ExposureSource(Protocol):
    """A system that decodes with teacher forcing in training, so its exposure bias can be measured."""

    def exposure_bias(self, data_path: str | None) -> tuple[ExposureBias, str]:
        """Teacher-forced against free-running loss on ``data_path`` (None: the run's own test split), and the
        name of the data used.

        Raises: DataError for bad data.
        """
        ...


@runtime_checkable
class FileInputs(Protocol):
    """A system whose ``predict`` inputs are names of files it reads (series files, ``.ts`` files), not texts: a
    server never passes it a client's strings, which would name files on the server.

    Attributes:
        PREDICT_READS_FILES: True (the marker; its presence is what callers check).
    """

    PREDICT_READS_FILES: ClassVar[bool]


@runtime_checkable
class SeriesForecaster(Protocol):
    """A system that forecasts from values a caller gives (a served page's series), not only from files."""

    def forecast_values(self, values: Sequence[Sequence[float]], *, source: str) -> Prediction:
        """The forecast of the steps after the end of ``values`` (T steps of C numbers), named ``source``.

        Raises: DataError naming ``source``: rows of unequal or wrong width, non-finite values, too few steps.
        """
        ...


def check_inputs(inputs: Sequence[str], *, source: str = "inputs") -> None:
    """Refuse the inputs of ``System.predict`` given by a user (``seqlab predict``'s, a served request's) that no
    recipe can read: an empty one, or one with a compatibility character (``seqlab.data.files.check_typed_text``).

    Raises: DataError naming ``source`` and the input's position (1-based), e.g. ``inputs: input 2 is empty``.
    """
    for number, text in enumerate(inputs, 1):
        check_typed_text(text, f"{source}: input {number}" + (f" {text!r}" if text.strip() else ""))


def _check_count(name: str, value: int | None, maximum: int) -> None:
    """A count a caller gave (None: not given) must be an integer in [1, maximum]. Raises: ConfigError."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} ({value!r}) must be an integer")
    if value < 1:
        raise ConfigError(f"{name} ({value}) must be >= 1")
    if value > maximum:
        raise ConfigError(f"{name} ({value}) must be <= {maximum:,}")


def refuse_options(system_class: type, options: SystemOptions, flags: dict[str, str], recipe: str) -> None:
    """Refuse the ``options`` that ``system_class`` does not take, in one line naming their ``flags``; a backend
    first, in the line of ``torch_only``.

    Raises: ConfigError ``--ensemble: the tagger recipe takes no such option``.
    """
    if options.backend is not None and "backend" not in system_class.OPTIONS:
        raise ConfigError(f"{flags.get('backend', 'backend')} {options.backend}: {torch_only(recipe)}")
    refused = [flags.get(name, name) for name in options.given() if name not in system_class.OPTIONS]
    if refused:
        raise ConfigError(f"{' '.join(refused)}: the {recipe} recipe takes no such option")


def torch_only(recipe: str) -> str:
    """Why a run of ``recipe``, whose System does not take ``backend``, is neither exported nor run in
    onnxruntime: the end of the one-line refusal of ``--backend`` and of ``seqlab export``."""
    return f"the {recipe} recipe runs in torch only (no onnxruntime backend, so no `seqlab export`)"


def nbest_within_beam(options: SystemOptions, num_beams: int) -> int:
    """The n-best count of ``options`` (1 if not given), checked against the beam width used.

    Raises: ConfigError if it exceeds ``num_beams``.
    """
    nbest = options.nbest or 1
    if nbest > num_beams:
        raise ConfigError(f"nbest ({nbest}) cannot exceed the beam width num_beams ({num_beams})")
    return nbest
