"""Recipe ``smiles``: a language model over molecules written as SMILES (or SELFIES) strings, and the molecules
it generates scored with RDKit.

Task: p(token_{t+1} | tokens_<=t) over atom-level tokens (Schwaller et al., 2018; ``seqlab.data.molecules``), the
chemical language models of Segler et al. (ACS Cent. Sci. 2018, 4, 120) with a GPT in place of their LSTM. Data:
the 10,000 WEHI molecules that the ``rdkit`` wheel ships (``seqlab.data.molecules``; BSD-3-Clause), or the user's
SMILES file (``data.train_path``: one molecule per line, a CSV's first column); a line that RDKit cannot parse is an
error naming it, since validity and novelty are defined against RDKit. With ``data.canonical`` every molecule is
first rewritten as RDKit's canonical SMILES; with ``data.representation=selfies`` as SELFIES (Krenn et al., 2020),
whose every token string decodes to a molecule. Split 90/5/5 at random (``seqlab.recipes.sequence_lm``).

Metrics: the test stream's loss (nats per token, each molecule's end token counted) and perplexity, beside the
add-one unigram model of the training tokens on the same tokens; and ``sample.count`` molecules sampled from the
model (SELFIES decoded to SMILES) scored for validity, uniqueness and novelty (%, MOSES / GuacaMol definitions,
``seqlab.data.molecules.molecule_scores``), beside the same scores of as many samples from the unigram model (a
sampler that knows token frequencies but no syntax: what the model's validity must be compared with); the
report's examples are samples with their canonical SMILES (or ``(invalid)``).
``predict`` gives each input SMILES its loss under the model (nats per token); ``seqlab generate --prompt PREFIX``
completes a SMILES prefix into molecules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqlab.data.molecules import (
    DEFAULT_SOURCE,
    REPRESENTATIONS,
    MoleculeTokenizer,
    canonical_smiles,
    molecule_scores,
    read_smiles,
    to_selfies,
    to_smiles,
)
from seqlab.errors import CheckpointError, ConfigError
from seqlab.models import GPT, load_pretrained
from seqlab.recipes.base import Report, TrainingRun, check_model_config, load_recipe_config, run_training
from seqlab.recipes.run_directory import RunMode
from seqlab.recipes.sequence_lm import (
    GPTSectionConfig,
    SampleConfig,
    causal_functions,
    sample,
    sampling_settings,
    split_items,
    stream,
    test_perplexity,
    unigram_baseline,
    unigram_samples,
)
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_real

NAME = "smiles"
DESCRIPTION = "GPT over SMILES/SELFIES of RDKit's 10,000 WEHI molecules; RDKit validity, uniqueness, novelty (%)"
PREDICT_OPTIONS: tuple[str, ...] = ()


@dataclass(frozen=True)
class SmilesDataConfig:
    """The molecules, how they are written, and how they are split and batched."""

    train_path: str | None = None  # SMILES file; None = the 10,000 WEHI molecules shipped in the rdkit wheel
    representation: str = "smiles"  # smiles | selfies (SMILES encoded by the selfies package)
    canonical: bool = True  # rewrite every molecule as RDKit's canonical SMILES first
    valid_fraction: float = 0.05  # share of the molecules held out for validation
    test_fraction: float = 0.05  # share of the molecules held out for testing
    split_seed: int = 0  # seed of the shuffle before the split
    batches_per_epoch: int = 200  # micro-batches between two validations
    valid_tokens: int = 32768  # validation reads at most this many tokens of the valid split

    def __post_init__(self) -> None:
        check_choice("representation", self.representation, REPRESENTATIONS)
        check_bool("canonical", self.canonical)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=0)
        check_int("batches_per_epoch", self.batches_per_epoch)
        check_int("valid_tokens", self.valid_tokens, minimum=2)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, sample, train."""

    data: SmilesDataConfig = field(default_factory=SmilesDataConfig)
    model: GPTSectionConfig = field(default_factory=lambda: GPTSectionConfig(dropout=0.0))
    sample: SampleConfig = field(default_factory=SampleConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=3e-3, batch_size=32, max_epochs=10_000, time_budget=420.0, optimizer="adamw", warmup_steps=100
        )
    )


def written(molecules: Sequence[str], data: SmilesDataConfig) -> list[str]:
    """The molecules as the model reads them: canonical (data.canonical) and in data.representation."""
    smiles = [canonical_smiles(m) or m for m in molecules] if data.canonical else list(molecules)
    return [to_selfies(m) for m in smiles] if data.representation == "selfies" else smiles


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train, keep the best checkpoint in ``out_dir``, score the test molecules and samples (module docstring).

    Raises:
        DataError: a missing, binary or empty file, a SMILES RDKit cannot parse, too few molecules.
    """
    data = config.data

    def prepare() -> TrainingRun:
        source = data.train_path or DEFAULT_SOURCE
        molecules = read_smiles(data.train_path)
        splits = split_items(
            molecules,
            valid_fraction=data.valid_fraction,
            test_fraction=data.test_fraction,
            seed=data.split_seed,
            source=data.train_path or "the default molecules",
        )
        train_items, valid_items, test_items = (written(split, data) for split in splits)
        tokenizer = MoleculeTokenizer.train([*train_items, *valid_items, *test_items], data.representation)
        model = GPT(config.model.model_config(vocab_size=tokenizer.vocab_size))
        train_ids = stream(tokenizer, train_items, source=source)
        valid_ids = stream(tokenizer, valid_items, source=source)[: data.valid_tokens + 1]
        test_ids = stream(tokenizer, test_items, source=source)
        run = causal_functions(
            train_ids, valid_ids, context_length=config.model.context_length, batches_per_epoch=data.batches_per_epoch
        )
        known = {canonical_smiles(m) for m in splits.train}

        def test() -> Report:
            scores = test_perplexity(model, test_ids)
            results = {f"test_{name}": value for name, value in scores.items()}
            results |= unigram_baseline(train_ids, test_ids, tokenizer.vocab_size)
            generator = torch.Generator().manual_seed(config.sample.seed)
            settings = sampling_settings(config.sample, config.model.context_length)
            rows = sample(
                model, [tokenizer.eos_id], eos_id=tokenizer.eos_id, count=config.sample.count,
                generator=generator, settings=settings,
            )  # fmt: skip
            texts = [tokenizer.decode(row) for row in rows]
            results |= _scores("", texts, known, data.representation)
            baseline = unigram_samples(
                train_ids, vocab_size=tokenizer.vocab_size, eos_id=tokenizer.eos_id, count=config.sample.count,
                max_length=config.model.context_length - 1, generator=generator,
            )  # fmt: skip
            results |= _scores("unigram_", [tokenizer.decode(row) for row in baseline], known, data.representation)
            shown = [
                (f"sample {i + 1}", text, canonical_smiles(to_smiles(text, data.representation)) or "(invalid)")
                for i, text in enumerate(texts[:5])
            ]
            return Report(results, shown)

        def save(directory: Path) -> None:
            model.save_pretrained(directory)
            tokenizer.save(directory)

        return TrainingRun(
            model,
            loss_fn=run.loss_fn,
            train_batches=run.train_batches,
            validate=run.validate,
            save=save,
            test=test,
            summary=(
                f"data: {source}, {len(splits.train):,} / {len(splits.valid):,} / {len(splits.test):,} train / valid "
                f"/ test molecules, {len(train_ids):,} train tokens; {data.representation} tokens, "
                f"{tokenizer.vocab_size} types"
            ),
            summary_model=f"GPT L={config.model.num_layers} D={config.model.d_model}",
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def _scores(prefix: str, texts: Sequence[str], known: set[str | None], representation: str) -> dict[str, float]:
    scores = molecule_scores([to_smiles(text, representation) for text in texts], {k for k in known if k})
    return {f"{prefix}validity": scores.validity, f"{prefix}uniqueness": scores.uniqueness,
            f"{prefix}novelty": scores.novelty}  # fmt: skip


def load(checkpoint: Path) -> tuple[GPT, MoleculeTokenizer, Config]:
    """The model, tokenizer and config of a smiles run directory.

    Raises: CheckpointError if the directory holds another model, or its files disagree.
    """
    config = load_recipe_config(checkpoint, Config)
    model = load_pretrained(checkpoint)
    if not isinstance(model, GPT):
        raise CheckpointError(f"{checkpoint}: holds a {model.model_type} model, not a GPT")
    tokenizer = MoleculeTokenizer.load(checkpoint)
    check_model_config(checkpoint, config.model.model_config(vocab_size=tokenizer.vocab_size), model.config)
    return model, tokenizer, config


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """``loss`` (nats/token), ``perplexity`` and scored ``tokens`` of the molecules of a SMILES file, written as
    the run wrote its training molecules.

    Raises: DataError for a bad file, a SMILES RDKit cannot parse, or a token the model never saw.
    """
    model, tokenizer, config = load(checkpoint)
    ids = stream(tokenizer, written(read_smiles(data_path), config.data), source=data_path)
    return test_perplexity(model, ids)


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """Each input SMILES and its loss under the model (nats per token, its end token counted), tab-separated.

    Raises: DataError for a SMILES with a token the model never saw.
    """
    model, tokenizer, config = load(checkpoint)
    lines = []
    for text in inputs:
        ids = stream(tokenizer, written([text], config.data), source=f"input {text[:40]!r}")
        lines.append(f"{text}\t{test_perplexity(model, ids)['loss']:.4f}")
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
    """``num_samples`` molecules that start with the SMILES (or SELFIES) prefix ``prompt``, one line each, the
    run's ``sample`` section filling options not given; a SELFIES sample is followed by its SMILES.

    Raises: ConfigError for a stop string or a bad option; DataError for a prefix with unseen tokens.
    """
    model, tokenizer, config = load(checkpoint)
    if stop is not None:
        raise ConfigError("--stop is not used by the smiles recipe: a sample ends with its molecule")
    prompt_ids = stream(tokenizer, [prompt], source="--prompt")[:-1].tolist()
    settings = sampling_settings(
        config.sample, config.model.context_length, max_new_tokens=max_new_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, num_beams=num_beams,
    )  # fmt: skip
    generator = torch.Generator()
    generator.manual_seed(config.sample.seed if seed is None else seed)
    rows = sample(model, prompt_ids, eos_id=tokenizer.eos_id, count=num_samples, generator=generator, settings=settings)
    texts = []
    for row in rows:
        text = prompt + tokenizer.decode(row)
        shown = text if config.data.representation == "smiles" else f"{text}\t{to_smiles(text, 'selfies')}"
        on_text(shown + "\n")
        texts.append(text)
    return texts
