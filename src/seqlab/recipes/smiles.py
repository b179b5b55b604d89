"""Recipe ``smiles``: a language model over molecules written as SMILES (or SELFIES) strings, and the molecules
it generates scored with RDKit.

Task: p(token_{t+1} | tokens_<=t) over atom-level tokens (Schwaller et al., 2018; ``seqlab.data.molecules``), the
chemical language models of Segler et al. (ACS Cent. Sci. 2018, 4, 120) with a GPT in place of their LSTM. Data:
the 10,000 WEHI molecules that the ``rdkit`` wheel ships (``seqlab.data.molecules``; BSD-3-Clause), or the user's
SMILES file (``data.train_path``: one molecule per line, a CSV's first column); a line that RDKit cannot parse is an
error naming it, since validity and novelty are defined against RDKit. With ``data.canonical`` every molecule is
first rewritten as RDKit's canonical SMILES; with ``data.representation=selfies`` as SELFIES (Krenn et al., 2020),
whose every token string decodes to a molecule. Split 90/5/5 at random (``seqlab.recipes.common.item_stream``).

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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from seqlab.data.files import data_file
from seqlab.data.molecules import (
    DEFAULT_SOURCE,
    REPRESENTATIONS,
    SMILES_FILE,
    MoleculeTokenizer,
    canonical_smiles,
    molecule_scores,
    read_smiles,
    to_selfies,
    to_smiles,
)
from seqlab.errors import CheckpointError
from seqlab.models import GPT, load_pretrained
from seqlab.recipes.base import Report, TrainingRun, check_model_config, load_recipe_config
from seqlab.recipes.common.item_stream import (
    GPTSectionConfig,
    ItemLoss,
    SampleConfig,
    causal_training,
    sample,
    sample_request,
    sampling_settings,
    split_items,
    stream,
    test_perplexity,
    unigram_baseline,
    unigram_samples,
)
from seqlab.recipes.system import GenerationChunk, GenerationRequest, SystemOptions
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_real

NAME = "smiles"
DESCRIPTION = "GPT over SMILES/SELFIES of RDKit's 10,000 WEHI molecules; RDKit validity, uniqueness, novelty (%)"


@dataclass(frozen=True)
class SmilesDataConfig:
    """The molecules, how they are written, and how they are split and batched."""

    train_path: str | None = data_file(
        SMILES_FILE
    )  # SMILES file; None = the 10,000 WEHI molecules shipped in the rdkit wheel
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


@dataclass
class SmilesSystem:
    """A trained smiles run: the GPT, its molecule tokenizer and the recipe config.

    Attributes:
        model: the GPT over the token stream of molecules.
        tokenizer: the atom-level SMILES (or SELFIES) tokenizer.
        config: the run's recipe config (data: how molecules are written; sample: generation's defaults).
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset()

    model: GPT
    tokenizer: MoleculeTokenizer
    config: Config

    def save(self, directory: Path) -> None:
        """Write the model and the tokenizer (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.tokenizer.save(directory)

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> SmilesSystem:
        """The run in ``directory`` (``options``: none taken).

        Raises: CheckpointError if the directory holds another model, or its files disagree.
        """
        config = load_recipe_config(directory, Config)
        model = load_pretrained(directory)
        if not isinstance(model, GPT):
            raise CheckpointError(f"{directory}: holds a {model.model_type} model, not a GPT")
        tokenizer = MoleculeTokenizer.load(directory)
        check_model_config(directory, config.model.model_config(vocab_size=tokenizer.vocab_size), model.config)
        return cls(model, tokenizer, config)

    def evaluate(self, data_path: str) -> dict[str, float]:
        """``loss`` (nats/token), ``perplexity`` and scored ``tokens`` of the molecules of a SMILES file, written
        as the run wrote its training molecules.

        Raises: DataError for a bad file, a SMILES RDKit cannot parse, or a token the model never saw.
        """
        ids = stream(self.tokenizer, written(read_smiles(data_path), self.config.data), source=data_path)
        return test_perplexity(self.model, ids)

    def predict(self, inputs: Sequence[str]) -> list[ItemLoss]:
        """Each input SMILES with its loss under the model.

        Raises: DataError for a SMILES with a token the model never saw.
        """
        scored = []
        for text in inputs:
            ids = stream(self.tokenizer, written([text], self.config.data), source=f"input {text[:40]!r}")
            scored.append(ItemLoss(text, test_perplexity(self.model, ids)["loss"]))
        return scored

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """``request.num_return_sequences`` molecules that start with the SMILES (or SELFIES) prefix
        ``request.prompt``, one chunk each: the rest of the molecule (a SELFIES one followed by a tab and the whole
        molecule's SMILES), the run's ``sample`` section filling the settings not given.

        Raises: ConfigError for a stop string or a bad setting; DataError for a prefix with unseen tokens.
        """
        prompt_ids = stream(self.tokenizer, [request.prompt], source="--prompt")[:-1].tolist()
        rows = sample_request(
            self.model, prompt_ids, request, defaults=self.config.sample, eos_id=self.tokenizer.eos_id,
            recipe=NAME, item="molecule",
        )  # fmt: skip
        return (GenerationChunk(index, self._shown(request.prompt, row), True) for index, row in enumerate(rows))

    def _shown(self, prompt: str, row: list[int]) -> str:
        """The continuation text of one sample (``generate``)."""
        text = self.tokenizer.decode(row)
        if self.config.data.representation == "smiles":
            return text
        return f"{text}\t{to_smiles(prompt + text, 'selfies')}"


System = SmilesSystem


@dataclass(frozen=True)
class SmilesTest:
    """The test of a trained run: the test stream's perplexity beside the unigram baseline, and the sample scores
    of the model and of the unigram sampler (module docstring)."""

    system: SmilesSystem
    train_ids: torch.Tensor
    test_ids: torch.Tensor
    known: frozenset[str]  # canonical SMILES of the training molecules

    def test(self) -> Report:
        """The test results and five samples with their canonical SMILES (or ``(invalid)``)."""
        model, tokenizer, config = self.system.model, self.system.tokenizer, self.system.config
        representation = config.data.representation
        results = {f"test_{name}": value for name, value in test_perplexity(model, self.test_ids).items()}
        results |= unigram_baseline(self.train_ids, self.test_ids, tokenizer.vocab_size)
        generator = torch.Generator().manual_seed(config.sample.seed)
        settings = sampling_settings(config.sample, config.model.context_length)
        rows = sample(
            model, [tokenizer.eos_id], eos_id=tokenizer.eos_id, count=config.sample.count, generator=generator,
            settings=settings,
        )  # fmt: skip
        texts = [tokenizer.decode(row) for row in rows]
        results |= _scores("", texts, self.known, representation)
        baseline = unigram_samples(
            self.train_ids, vocab_size=tokenizer.vocab_size, eos_id=tokenizer.eos_id, count=config.sample.count,
            max_length=config.model.context_length - 1, generator=generator,
        )  # fmt: skip
        results |= _scores("unigram_", [tokenizer.decode(row) for row in baseline], self.known, representation)
        shown = [
            (f"sample {i + 1}", text, canonical_smiles(to_smiles(text, representation)) or "(invalid)")
            for i, text in enumerate(texts[:5])
        ]
        return Report(results, shown)


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read and split the molecules, build the tokenizer and the GPT, and check the streams (module docstring).

    Raises:
        DataError: a missing, binary or empty file, a SMILES RDKit cannot parse, too few molecules.
    """
    data = config.data
    source = data.train_path or DEFAULT_SOURCE
    splits = split_items(
        read_smiles(data.train_path),
        valid_fraction=data.valid_fraction,
        test_fraction=data.test_fraction,
        seed=data.split_seed,
        source=data.train_path or "the default molecules",
    )
    train_items, valid_items, test_items = (written(split, data) for split in splits)
    tokenizer = MoleculeTokenizer.train([*train_items, *valid_items, *test_items], data.representation)
    system = SmilesSystem(GPT(config.model.model_config(vocab_size=tokenizer.vocab_size)), tokenizer, config)
    train_ids = stream(tokenizer, train_items, source=source)
    valid_ids = stream(tokenizer, valid_items, source=source)[: data.valid_tokens + 1]
    test_ids = stream(tokenizer, test_items, source=source)
    blocks = causal_training(
        train_ids, valid_ids, context_length=config.model.context_length, batches_per_epoch=data.batches_per_epoch
    )
    known = frozenset(k for k in (canonical_smiles(m) for m in splits.train) if k)
    return TrainingRun(
        config,
        system.model,
        loss_fn=blocks.loss,
        train_batches=blocks.train_batches,
        validate=blocks.validate,
        save=system.save,
        test=SmilesTest(system, train_ids, test_ids, known).test,
        summary=(
            f"data: {source}, {len(splits.train):,} / {len(splits.valid):,} / {len(splits.test):,} train / valid "
            f"/ test molecules, {len(train_ids):,} train tokens; {data.representation} tokens, "
            f"{tokenizer.vocab_size} types"
        ),
        summary_model=f"GPT L={config.model.num_layers} D={config.model.d_model}",
    )


def _scores(prefix: str, texts: Sequence[str], known: frozenset[str], representation: str) -> dict[str, float]:
    """Validity, uniqueness and novelty (%) of the sampled ``texts``, named with ``prefix``."""
    scores = molecule_scores([to_smiles(text, representation) for text in texts], set(known))
    return {f"{prefix}validity": scores.validity, f"{prefix}uniqueness": scores.uniqueness,
            f"{prefix}novelty": scores.novelty}  # fmt: skip
