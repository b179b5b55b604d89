"""A trained ``t5-g2p`` run: the T5 with its vocabulary, decoding either direction by the input's prefix.

``seqlab predict RUN "graphemes to phonemes: hello" "phonemes to graphemes: HH AH L OW"``: each input names its
direction by its prefix; outputs are ``hello  HH AH L OW`` and ``HH AH L OW  hello``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple

import torch

from seqlab.data.batching import collate_seq2seq
from seqlab.data.cmudict import Pronunciation, group_references
from seqlab.data.pronunciations import read_entries
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.errors import DataError, UnknownSymbolError
from seqlab.export import OnnxTransformerSeq2Seq, load_step_model
from seqlab.metrics import phoneme_error_rate, word_error_rate
from seqlab.models.t5 import T5
from seqlab.recipes.base import model_device
from seqlab.recipes.saved_run import check_vocabulary_size, load_recipe_config
from seqlab.recipes.system import SystemOptions, with_beam_width
from seqlab.recipes.t5_g2p.config import PREFIXES, Config, Direction

VOCAB_FILE = "vocab.json"


class T5G2PPrediction(NamedTuple):
    """One input's best output: ``symbols`` read in ``direction``, ``output`` the symbols decoded."""

    direction: Direction
    symbols: tuple[str, ...]
    output: tuple[str, ...]

    def lines(self) -> list[str]:
        """``word  P H O N E S`` for a g2p input, ``P H O N E S  word`` for a p2g input."""
        if self.direction == "g2p":
            return [f"{''.join(self.symbols)}  {' '.join(self.output)}"]
        return [f"{' '.join(self.symbols)}  {''.join(self.output)}"]


def parse_input(text: str) -> tuple[Direction, list[str]]:
    """("g2p", letters) for "graphemes to phonemes: WORD", ("p2g", phonemes) for "phonemes to graphemes: P H ...".

    Raises: DataError naming the input and the two prefixes when it starts with neither, or has nothing after it.
    """
    for direction, prefix in PREFIXES.items():
        if text.startswith(prefix):
            payload = text[len(prefix) :].strip()
            symbols = list(payload.lower()) if direction == "g2p" else payload.split()
            if symbols:
                return direction, symbols
    raise DataError(f"input {text!r} must be {PREFIXES['g2p']!r} + a word or {PREFIXES['p2g']!r} + phonemes")


@dataclass
class T5G2PSystem:
    """A trained T5 with its vocabulary and recipe config: what a run directory holds.

    Attributes:
        options: ``num_beams`` (K, over ``config.decode.num_beams``) for predict and evaluate; ``backend``.
        step_model: what searches decode with instead of ``model``: the run's exported graphs under onnxruntime
            (``--backend onnxruntime``), else None.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"num_beams", "backend"})

    model: T5
    vocab: Vocabulary
    config: Config
    options: SystemOptions = field(default_factory=SystemOptions)
    step_model: OnnxTransformerSeq2Seq | None = None

    def save(self, directory: Path) -> None:
        """Write the model and the vocabulary (``run_training`` adds ``recipe.json``, which ``load`` reads)."""
        self.model.save_pretrained(directory)
        self.vocab.save(directory / VOCAB_FILE)

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> T5G2PSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", searches decode through its export in
        ``directory/onnx`` (``seqlab export``).

        Raises:
            CheckpointError: (one line naming the file) for a missing or malformed file, or a vocabulary of
                another size than the weights'; (onnxruntime) the export is missing, stale or of another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        model = T5.from_pretrained(directory)
        vocab = Vocabulary.load(directory / VOCAB_FILE)
        check_vocabulary_size(directory / VOCAB_FILE, len(vocab), model.config.vocab_size)
        step_model = load_step_model(directory) if options.backend == "onnxruntime" else None
        return cls(model, vocab, config, options, step_model)

    def with_search(self, *, num_beams: int | None = None, nbest: int | None = None) -> T5G2PSystem:
        """This system with the beam width ``num_beams`` (None: this system's), sharing its model (``NBestSource``:
        a served request's ``num_beams``); it predicts one output per input, so ``nbest`` may only be 1.

        Raises: ConfigError for a ``num_beams`` outside [1, ``system.MAX_BEAMS``], or an ``nbest`` other than 1.
        """
        return with_beam_width(self, num_beams, nbest, "output")

    @property
    def num_beams(self) -> int:
        """K, the beam width predict and evaluate use (1 = greedy search)."""
        return self.options.num_beams or self.config.decode.num_beams

    def predict(self, inputs: Sequence[str]) -> list[T5G2PPrediction]:
        """The best output of each input, in the direction its prefix names (``parse_input``), one at a time.

        Raises: DataError for an input without a prefix or with symbols the model never saw.
        """
        parsed = [parse_input(text) for text in inputs]
        predictions = []
        for direction, symbols in parsed:
            (output,) = self.translate(direction, [symbols], source="inputs")
            predictions.append(T5G2PPrediction(direction, tuple(symbols), output))
        return predictions

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Both directions' scores (%) on a CMUdict-format file (``score``).

        Raises: DataError for a bad file or a word with symbols the model never saw.
        """
        return self.score(read_entries(data_path, self.config.data), source=data_path)

    def encode(self, symbols: Sequence[str], *, source: str, what: str) -> list[int]:
        """Ids of ``symbols``.

        Raises: DataError naming ``source`` and ``what`` (the word) for an empty input or an unseen symbol.
        """
        if not symbols:
            raise DataError(f"{source}: empty input {what!r}")
        try:
            return self.vocab.encode(symbols)
        except UnknownSymbolError:
            unseen = sorted({s for s in symbols if s not in self.vocab})
            raise DataError(
                f"{source}: {what!r} has symbols the model never saw: {' '.join(map(repr, unseen))}"
            ) from None

    def source_ids(self, direction: Direction, symbols: Sequence[str], *, source: str) -> list[int]:
        """The encoder input: the direction's prefix token, the symbols, EOS. Raises: DataError as ``encode``."""
        ids = self.encode(symbols, source=source, what=" ".join(symbols) if direction == "p2g" else "".join(symbols))
        return [self.vocab.encode([PREFIXES[direction]])[0], *ids, self.vocab.eos_id]

    @torch.no_grad()
    def translate(
        self, direction: Direction, inputs: Sequence[Sequence[str]], *, source: str, num_beams: int | None = None
    ) -> list[tuple[str, ...]]:
        """The best output symbols for each input (letters -> phonemes for "g2p", phonemes -> letters for "p2g"),
        decoded ``config.decode.batch_size`` at a time with ``num_beams`` beams (None: ``self.num_beams``).

        Raises: DataError as ``encode``.
        """
        decode, cfg = self.config.decode, self.model.config
        num_beams = self.num_beams if num_beams is None else num_beams
        ids = [self.source_ids(direction, x, source=source) for x in inputs]
        self.model.eval()
        decoder = self.step_model or self.model
        device = model_device(self.model) if self.step_model is None else torch.device("cpu")  # graphs: the CPU
        outputs: list[tuple[str, ...]] = []
        for start in range(0, len(ids), decode.batch_size):
            chunk = ids[start : start + decode.batch_size]
            batch = collate_seq2seq([(x, []) for x in chunk], pad_id=cfg.pad_id, bos_id=cfg.decoder_start_id).to(device)
            state = decoder.encode(batch.src, batch.src_lengths)
            first = torch.full((len(chunk),), cfg.decoder_start_id, dtype=torch.long, device=device)  # (B,)
            search = {"eos_id": cfg.eos_id, "max_length": decode.max_length}
            if num_beams == 1:
                out = greedy_search(decoder, state, first, **search)
            else:
                out = beam_search(
                    decoder, state, first, num_beams=num_beams, length_penalty=decode.length_penalty, **search
                )
            outputs.extend(tuple(self.vocab.decode(row[0])) for row in out.tokens)
        return outputs

    def score(self, entries: Sequence[Pronunciation], *, source: str) -> dict[str, float]:
        """Both directions on ``entries``: PER and WER (%) over their words (against every reference
        pronunciation), letter error rate and word accuracy (%) over their distinct pronunciations (against every
        word with that pronunciation, homophones included).

        Raises: DataError as ``encode``.
        """
        pronunciations = group_references(entries)
        words = list(pronunciations)
        phonemes = self.translate("g2p", [list(w) for w in words], source=source)
        spellings: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        for word, variants in pronunciations.items():
            for variant in variants:
                spellings.setdefault(tuple(variant), []).append(tuple(word))
        sounds = list(spellings)
        letters = self.translate("p2g", sounds, source=source)
        references = [spellings[s] for s in sounds]
        return {
            "per": phoneme_error_rate(phonemes, [pronunciations[w] for w in words]),
            "wer": word_error_rate(phonemes, [pronunciations[w] for w in words]),
            "letter_error_rate": phoneme_error_rate(letters, references),
            "word_accuracy": 100.0 - word_error_rate(letters, references),
            "words": float(len(words)),
            "pronunciations": float(len(sounds)),
        }
