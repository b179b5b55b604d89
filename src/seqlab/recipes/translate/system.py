"""Recipe ``translate``: machine translation of parallel text with an attention RNN or Transformer seq2seq.

Data: the user's parallel files (``data.src``, ``data.tgt``: line i of one translates line i of the other; UTF-8,
one sentence a line); the valid and test pairs come from ``data.valid_src``/``valid_tgt`` and ``data.test_src``/
``test_tgt``, or else from a deterministic split of the training pairs (shuffled with ``data.split_seed``). seqlab
ships no parallel corpus (no package on the index carries a small real one offline), so data.src and data.tgt are
required. Tokens: byte-level BPE (``seqlab.data.tokenizers.BPETokenizer``) learnt on the training pairs, one
vocabulary shared by both languages (``data.shared_bpe``) or one per language; model ids are the BPE ids shifted
by 3 past the seq2seq models' PAD = 0, BOS = 1, EOS = 2.

Metrics: corpus BLEU (Papineni et al., 2002) and chrF (Popovic, 2015) by sacrebleu on the detokenised output (the
BPE decoding of the hypothesis, compared with the reference line as it is in the file), with beam search
(``decode.beam_size``) and with greedy search; sacrebleu's signatures are logged.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from sacrebleu.metrics import BLEU, CHRF

from seqlab.data.batching import batch_iterator, collate_seq2seq
from seqlab.data.tokenizers import BPETokenizer, load_tokenizer
from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, run_training
from seqlab.recipes.run_directory import RunMode
from seqlab.training.objectives import teacher_forcing_loss
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_real

NAME = "translate"
DESCRIPTION = "translate parallel text (data.src, data.tgt): BPE + RNN or Transformer seq2seq, BLEU/chrF (sacrebleu)"
PREDICT_OPTIONS = ("beam_size",)
SOURCE_TOKENIZER = "source_tokenizer.json"
TARGET_TOKENIZER = "target_tokenizer.json"
SPECIALS = 3  # PAD, BOS, EOS before the BPE ids
MISSING_DATA = "the translate recipe needs parallel text: --set data.src=FILE data.tgt=FILE (one sentence a line)"


@dataclass(frozen=True)
class DataConfig:
    """The parallel files, the split and the BPE."""

    src: str | None = None  # source sentences, one a line (required)
    tgt: str | None = None  # their translations, line by line (required)
    valid_src: str | None = None  # with valid_tgt; None = valid_fraction of the training pairs
    valid_tgt: str | None = None
    test_src: str | None = None  # with test_tgt; None = test_fraction of the training pairs
    test_tgt: str | None = None
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    split_seed: int = 0  # seed of the shuffle before the split
    shared_bpe: bool = True  # one BPE for both languages (else one each)
    bpe_size: int = 2000  # BPE vocabulary per tokenizer, its 256 bytes and <|endoftext|> included
    max_tokens: int = 128  # training pairs with a longer side (in BPE tokens) are left out

    def __post_init__(self) -> None:
        check_real("valid_fraction", self.valid_fraction, at_least=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, at_least=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=None)
        check_bool("shared_bpe", self.shared_bpe)
        check_int("bpe_size", self.bpe_size, minimum=257)
        check_int("max_tokens", self.max_tokens)
        for split in ("valid", "test"):
            if (getattr(self, f"{split}_src") is None) != (getattr(self, f"{split}_tgt") is None):
                raise ConfigError(f"give both data.{split}_src and data.{split}_tgt, or neither")


@dataclass(frozen=True)
class ModelConfig:
    """The seq2seq model (``seqlab.models.seq2seq``); the vocabulary sizes come from the BPE."""

    arch: Literal["rnn", "transformer"] = "transformer"
    embedding_size: int = 128  # rnn
    hidden_size: int = 256  # rnn
    cell: Literal["rnn", "gru", "lstm"] = "lstm"  # rnn
    d_model: int = 256  # transformer
    num_heads: int = 4  # transformer
    d_ff: int = 1024  # transformer
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.1
    label_smoothing: float = 0.1

    def __post_init__(self) -> None:
        check_choice("arch", self.arch, ("rnn", "transformer"))
        check_real("label_smoothing", self.label_smoothing, at_least=0.0, below=1.0)
        self.model_config(src_vocab_size=300, tgt_vocab_size=300)  # the model's own checks

    def model_config(self, *, src_vocab_size: int, tgt_vocab_size: int) -> RNNSeq2SeqConfig | TransformerSeq2SeqConfig:
        sizes = dict(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
        shared = dict(encoder_layers=self.encoder_layers, decoder_layers=self.decoder_layers, dropout=self.dropout)
        if self.arch == "rnn":
            rnn = dict(embedding_size=self.embedding_size, hidden_size=self.hidden_size, cell=self.cell)
            return RNNSeq2SeqConfig(**sizes, **shared, **rnn)
        transformer = dict(d_model=self.d_model, num_heads=self.num_heads, d_ff=self.d_ff, max_length=1024)
        return TransformerSeq2SeqConfig(**sizes, **shared, **transformer)


@dataclass(frozen=True)
class DecodeConfig:
    """How the test sentences are decoded."""

    beam_size: int = 5  # 1 = greedy search
    length_penalty: float = 1.0  # score = log p / length**length_penalty
    max_length: int = 160  # most target tokens per sentence, EOS included
    max_length_ratio: float = 2.0  # and at most ratio * (longest source tokens in the batch) + 10 (fairseq's a, b)
    batch_size: int = 64  # sentences decoded together

    def __post_init__(self) -> None:
        for name in ("beam_size", "max_length", "batch_size"):
            check_int(name, getattr(self, name))
        check_real("length_penalty", self.length_penalty)
        check_real("max_length_ratio", self.max_length_ratio, greater_than=0.0)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train, decode."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=5e-4, batch_size=64, optimizer="adamw", warmup_steps=200, time_budget=300.0
        )
    )
    decode: DecodeConfig = field(default_factory=DecodeConfig)


class Parallel(NamedTuple):
    """Aligned source and target sentences."""

    src: list[str]
    tgt: list[str]


def read_parallel(src_path: str, tgt_path: str) -> Parallel:
    """The sentence pairs of two line-aligned files.

    Raises:
        DataError: a file is missing or not UTF-8, the files are empty, their line counts differ, or a line is blank.
    """
    sides = []
    for path in (src_path, tgt_path):
        try:
            sides.append(Path(path).read_text(encoding="utf-8").splitlines())
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except UnicodeDecodeError:
            raise DataError(f"{path}: not UTF-8 text") from None
        except OSError as e:
            raise DataError(f"{path}: cannot read it ({e.strerror or e})") from None
        if not sides[-1]:
            raise DataError(f"{path}: empty file")
    src, tgt = sides
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; they must be line-aligned")
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        blank = next((i for i, line in enumerate(lines, start=1) if not line.strip()), None)
        if blank is not None:
            raise DataError(f"{path}:{blank}: blank line; every line must hold a sentence")
    return Parallel(src, tgt)


def load_splits(config: DataConfig) -> tuple[Parallel, Parallel, Parallel]:
    """Train, valid and test pairs as the data section says (module docstring)."""
    if config.src is None or config.tgt is None:
        raise DataError(MISSING_DATA)
    pool = read_parallel(config.src, config.tgt)
    order = list(range(len(pool.src)))
    random.Random(config.split_seed).shuffle(order)
    cut = lambda fraction, given: 0 if given else round(len(order) * fraction)  # noqa: E731
    n_valid, n_test = cut(config.valid_fraction, config.valid_src), cut(config.test_fraction, config.test_src)
    pick = lambda rows: Parallel([pool.src[i] for i in rows], [pool.tgt[i] for i in rows])  # noqa: E731
    train, valid, test = pick(order[n_valid + n_test :]), pick(order[:n_valid]), pick(order[n_valid : n_valid + n_test])
    valid = read_parallel(config.valid_src, config.valid_tgt) if config.valid_src else valid
    test = read_parallel(config.test_src, config.test_tgt) if config.test_src else test
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        if not part.src:
            raise DataError(f"the {name} split is empty; give data.{name}_src/_tgt or more lines")
    return train, valid, test


@dataclass
class Translator:
    """A trained model with its two tokenizers (the same one when shared) and the recipe config."""

    model: RNNSeq2Seq | TransformerSeq2Seq
    source: BPETokenizer
    target: BPETokenizer
    config: Config

    def save(self, directory: Path) -> None:
        self.model.save_pretrained(directory)
        self.source.save(directory / SOURCE_TOKENIZER)
        self.target.save(directory / TARGET_TOKENIZER)

    @classmethod
    def load(cls, directory: Path) -> Translator:
        config = load_recipe_config(directory, Config)
        tokenizers = [load_tokenizer(directory / name) for name in (SOURCE_TOKENIZER, TARGET_TOKENIZER)]
        if not all(isinstance(t, BPETokenizer) for t in tokenizers):
            raise CheckpointError(f"{directory}: the translate tokenizers must be BPE")
        model_class = TransformerSeq2Seq if config.model.arch == "transformer" else RNNSeq2Seq
        return cls(model_class.from_pretrained(directory), *tokenizers, config)

    def encode(self, pairs: Parallel) -> list[tuple[list[int], list[int]]]:
        shift = lambda ids: [i + SPECIALS for i in ids]  # noqa: E731
        return [(shift(self.source.encode(s)), shift(self.target.encode(t))) for s, t in zip(*pairs, strict=True)]

    @torch.no_grad()
    def translate(self, sentences: Sequence[str], *, beam_size: int | None = None) -> list[str]:
        """The detokenised best translation of each sentence (``beam_size`` 1 = greedy; None = the config's)."""
        decode = self.config.decode
        beam_size = decode.beam_size if beam_size is None else beam_size
        check_int("beam_size", beam_size)
        self.model.eval()
        device = model_device(self.model)
        eos = self.model.config.eos_id
        results = []
        for start in range(0, len(sentences), decode.batch_size):
            ids = [
                [i + SPECIALS for i in self.source.encode(s)] or [eos] for s in sentences[start:][: decode.batch_size]
            ]
            batch = collate_seq2seq([(x, []) for x in ids]).to(device)
            state = self.model.encode(batch.src, batch.src_lengths)
            bos = torch.full((len(ids),), self.model.config.bos_id, dtype=torch.long, device=device)
            longest = max(len(x) for x in ids)
            search = dict(eos_id=eos, max_length=min(decode.max_length, int(decode.max_length_ratio * longest) + 10))
            if beam_size == 1:
                out = greedy_search(self.model, state, bos, **search)
            else:
                out = beam_search(
                    self.model, state, bos, **search, beam_size=beam_size, length_penalty=decode.length_penalty
                )
            for tokens in out.tokens[:, 0].tolist():
                kept = tokens[: tokens.index(eos)] if eos in tokens else tokens
                results.append(self.target.decode([i - SPECIALS for i in kept if i >= SPECIALS]))
        return results

    def score(self, pairs: Parallel, *, beam_size: int | None = None) -> Scores:
        """Corpus BLEU and chrF of the translations of ``pairs.src`` against ``pairs.tgt``."""
        hypotheses = self.translate(pairs.src, beam_size=beam_size)
        bleu, chrf = BLEU(), CHRF()
        results = {
            "bleu": bleu.corpus_score(hypotheses, [pairs.tgt]).score,
            "chrf": chrf.corpus_score(hypotheses, [pairs.tgt]).score,
        }
        return Scores(results, hypotheses, f"BLEU {bleu.get_signature()}; chrF {chrf.get_signature()}")


class Scores(NamedTuple):
    """results: {"bleu", "chrf"} (0-100); hypotheses: the detokenised translations; signature: sacrebleu's."""

    results: dict[str, float]
    hypotheses: list[str]
    signature: str


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train, keep the best validation loss's model in ``out_dir``, score the test pairs (beam and greedy).

    Raises:
        DataError: data.src/data.tgt missing, unreadable, empty or not line-aligned (module docstring).
    """

    def prepare() -> TrainingRun:
        train_set, valid_set, test_set = load_splits(config.data)
        size = config.data.bpe_size
        if config.data.shared_bpe:
            source = target = BPETokenizer.train(train_set.src + train_set.tgt, vocab_size=size)
        else:
            source, target = (BPETokenizer.train(side, vocab_size=size) for side in train_set)
        model_config = config.model.model_config(
            src_vocab_size=source.vocab_size + SPECIALS, tgt_vocab_size=target.vocab_size + SPECIALS
        )
        model = (TransformerSeq2Seq if config.model.arch == "transformer" else RNNSeq2Seq)(model_config)
        system = Translator(model, source, target, config)
        limit = config.data.max_tokens
        train_pairs = [p for p in system.encode(train_set) if max(len(p[0]), len(p[1])) <= limit]
        if not train_pairs:
            raise DataError(f"no training pair has at most data.max_tokens ({limit}) BPE tokens a side")
        valid_pairs = system.encode(valid_set)

        def loss_fn(m, batch):
            return teacher_forcing_loss(m, batch, pad_id=0, label_smoothing=config.model.label_smoothing)

        def train_batches(epoch, generator, batch_size):
            return batch_iterator(train_pairs, batch_size=batch_size, shuffle=True, generator=generator)

        def validate(m):
            total, tokens = 0.0, 0
            for batch in batch_iterator(valid_pairs, batch_size=128, shuffle=False):
                out = teacher_forcing_loss(m, batch.to(model_device(m)), pad_id=0)
                total += out.loss.item() * out.num_tokens
                tokens += out.num_tokens
            return {"valid_loss": total / tokens}

        def test() -> Report:
            beam, greedy = system.score(test_set), system.score(test_set, beam_size=1)
            log(f"sacrebleu: {beam.signature}")
            results = {**beam.results, **{f"greedy_{k}": v for k, v in greedy.results.items()}}
            examples = list(zip(test_set.src, test_set.tgt, beam.hypotheses, strict=True))[:10]
            return Report(results | {"test_sentences": float(len(test_set.src))}, examples)

        return TrainingRun(
            model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=system.save,
            test=test,
            summary=(
                f"data: {len(train_pairs)} train ({len(train_set.src) - len(train_pairs)} too long) / "
                f"{len(valid_pairs)} valid / {len(test_set.src)} test pairs; BPE {source.vocab_size}"
                + ("" if config.data.shared_bpe else f" + {target.vocab_size}")
            ),
            summary_model=config.model.arch,
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """BLEU and chrF (beam search of the checkpoint's decode section) on ``SRC_FILE,TGT_FILE`` (two line-aligned
    files, comma-separated)."""
    files = data_path.split(",")
    if len(files) != 2:
        raise DataError(f"--data {data_path}: give SRC_FILE,TGT_FILE (two line-aligned files)")
    system = Translator.load(checkpoint)
    return system.score(read_parallel(*files)).results


def predict(checkpoint: Path, sentences: Sequence[str], *, beam_size: int | None = None) -> list[str]:
    """The translation of each sentence, one line each."""
    return Translator.load(checkpoint).translate(list(sentences), beam_size=beam_size)
