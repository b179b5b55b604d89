"""``TaggerSystem``: a trained stress tagger with its phoneme vocabulary and vowels, as a run directory holds it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from seqlab.data.cmudict import Pronunciation, read_cmudict
from seqlab.data.labelled_text import token_batches
from seqlab.data.vocab import Vocabulary
from seqlab.errors import CheckpointError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.files import atomic_write
from seqlab.models.bert import BertForTokenClassification
from seqlab.models.pretrained import load_pretrained
from seqlab.recipes.base import model_device
from seqlab.recipes.saved_run import load_recipe_config, read_json_list
from seqlab.recipes.system import SystemOptions
from seqlab.recipes.tagger.config import Config
from seqlab.recipes.tagger.stress import DIGITS, IGNORE, StressScores, group_patterns, join_stress, stress_scores

VOCAB_FILE = "vocab.json"
VOWELS_FILE = "vowels.json"
EVAL_BATCH_SIZE = 512  # pronunciations per batch when validating, testing and predicting


class StressPrediction(NamedTuple):
    """The predicted stress of one input: its stripped phonemes and, per phoneme, a vowel's digit or IGNORE."""

    phonemes: tuple[str, ...]
    stress: tuple[int, ...]

    def lines(self) -> list[str]:
        """The stressed pronunciation as CMUdict writes it (``HH AH0 L OW1``)."""
        return [join_stress(self.phonemes, self.stress)]


@dataclass
class TaggerSystem:
    """A trained stress tagger with its phoneme vocabulary and vowel set: what a run directory holds. Its one
    option is ``backend``.

    Attributes:
        onnx_model: what tagging calls instead of ``model``: the run's exported graph under onnxruntime
            (``--backend onnxruntime``), else None.
    """

    model: nn.Module  # RNNSequenceTagger or BertForTokenClassification
    vocab: Vocabulary
    vowels: frozenset[str]
    onnx_model: OnnxModel | None = None
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})

    def save(self, directory: Path) -> None:
        """Write the model, the phoneme vocabulary and the vowels (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.vocab.save(directory / VOCAB_FILE)
        atomic_write(directory / VOWELS_FILE, json.dumps({"vowels": sorted(self.vowels)}, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> TaggerSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", tagging runs its export in
        ``directory/onnx``.

        Raises:
            CheckpointError: (one line naming the file) for a missing or malformed recipe.json, vowels file (empty,
                or naming a phoneme the vocabulary lacks: the tagger would score nothing), vocabulary or model;
                (onnxruntime) the export is missing, stale or of another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        load_recipe_config(directory, Config)
        vowels = read_json_list(directory / VOWELS_FILE, "vowels")
        vocab = Vocabulary.load(directory / VOCAB_FILE)
        unknown = [v for v in vowels if not isinstance(v, str) or v not in vocab]
        if not vowels or unknown:
            reason = f"{unknown[0]!r} is not a phoneme of the vocabulary" if unknown else "no vowels"
            raise CheckpointError(f"{directory / VOWELS_FILE}: bad vowels file ({reason})")
        onnx_model = load_onnx_model(directory) if options.backend == "onnxruntime" else None
        return cls(load_pretrained(directory), vocab, frozenset(vowels), onnx_model)

    def predict(self, inputs: Sequence[str]) -> list[StressPrediction]:
        """The stress of each input's vowels (space-separated phonemes, any case; stress digits given are ignored).

        Raises: DataError ("inputs: ...") for an unknown phoneme, an empty input or one too long.
        """
        stripped = [tuple(p.upper().translate(DIGITS) for p in line.split()) for line in inputs]
        tagged = self.tag(stripped, source="inputs")
        return [StressPrediction(p, s) for p, s in zip(stripped, tagged, strict=True)]

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Vowel and word accuracy (%) on a CMUdict-format file with stress digits, and the vowels and
        pronunciations scored.

        Raises: DataError naming the file (and line) for bad data or a phoneme the model does not know, or naming
            the word whose vowel has no stress digit (a file without stress, such as g2p's, has nothing to score).
        """
        entries = read_cmudict(data_path, keep_stress=True)
        for word, phonemes in entries:
            bare = next((p for p in phonemes if p in self.vowels), None)  # the vowels are kept without digits
            if bare is not None:
                raise DataError(
                    f"{data_path}: word {word!r}: vowel {bare} has no stress digit; the tagger is scored on "
                    "CMUdict's stress digits"
                )
        scores = self.score(entries, source=data_path)
        return scores._asdict() | {"vowels": float(scores.vowels), "words": float(scores.words)}

    def encode(self, inputs: Sequence[Sequence[str]], *, source: str) -> list[list[int]]:
        """Phoneme ids of each stripped pronunciation; ``source`` names the inputs for errors.

        Raises: DataError for an unknown phoneme, an empty pronunciation, or (transformer) one longer than the
            model's context length.
        """
        encoded, limit = [], getattr(self.model.config, "max_positions", None)
        for phonemes in inputs:
            if limit is not None and len(phonemes) > limit:
                raise DataError(
                    f"{source}: {len(phonemes)} phonemes in {' '.join(phonemes)!r}, the model reads {limit}"
                )
            unknown = [p for p in phonemes if p not in self.vocab]
            if unknown or not phonemes:
                reason = f"unknown phoneme {unknown[0]!r}" if unknown else "empty pronunciation"
                raise DataError(
                    f"{source}: {reason} in {' '.join(phonemes)!r} (known: {' '.join(self.vocab.symbols[3:])})"
                )
            encoded.append(self.vocab.encode(phonemes))
        return encoded

    @torch.no_grad()
    def tag(self, inputs: Sequence[Sequence[str]], *, source: str) -> list[tuple[int, ...]]:
        """The predicted stress of every vowel of each stripped pronunciation, IGNORE at consonants.

        Raises: DataError as ``encode``.
        """
        ids = self.encode(inputs, source=source)
        self.model.eval()
        device = model_device(self.model)
        predictions: list[tuple[int, ...]] = [()] * len(ids)
        for batch in token_batches(
            ids, [0] * len(ids), batch_size=EVAL_BATCH_SIZE, pad_id=self.vocab.pad_id, shuffle=False
        ):
            logits = step_logits(self.model, batch.x.to(device), batch.lengths, forward=self.onnx_model)
            labels = logits.argmax(-1).tolist()  # (B, T)
            for row, length, predicted in zip(batch.indices.tolist(), batch.lengths.tolist(), labels, strict=True):
                phonemes = inputs[row]
                predictions[row] = tuple(
                    s if phonemes[t] in self.vowels else IGNORE for t, s in enumerate(predicted[:length])
                )
        return predictions

    def score(self, entries: Sequence[Pronunciation], *, source: str) -> StressScores:
        """Vowel and word accuracy (%) on stressed entries (module docstring).

        Raises: DataError as ``encode``.
        """
        groups = group_patterns(entries)
        return stress_scores(self.tag([key[1] for key in groups], source=source), list(groups.values()))


def step_logits(
    model: nn.Module, x: torch.Tensor, lengths: torch.Tensor, *, forward: Callable[..., Any] | None = None
) -> torch.Tensor:
    """Per-step logits (B, T, K) of either arch for right-padded ids x (B, T) with ``lengths`` (B,) real steps;
    ``forward`` is called as ``model`` instead of it (the run's exported graph, ``seqlab.export.OnnxModel``)."""
    forward = model if forward is None else forward
    if isinstance(model, BertForTokenClassification):
        keep_mask = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        return forward(x, keep_mask=keep_mask).logits
    return forward(x, lengths).logits
