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

Molecules to order (``data.condition=prefix``): the training molecules' RDKit property ``data.property`` (logP, QED
or molecular weight) is cut into ``data.num_bins`` bins of equal shares at its quantiles
(``seqlab.data.molecule_properties``), and each molecule in the stream is preceded by the token of its bin,
``SEP <bin> item SEP <bin> item ... SEP`` (one new token per bin, after the tokenizer's ids), so the GPT learns
p(bin) p(molecule | bin), the prefix conditioning of conditional language models (Keskar et al., CTRL, 2019; for
molecules, Kotsias et al., Nat. Mach. Intell. 2020, 2, 254, condition an RNN's state instead). Sampling from
``SEP <bin b>`` asks for a molecule in bin b; ``seqlab generate --prompt B`` (or ``B:PREFIX``) does so. The test
draws ``sample.count`` molecules per bin and reports, per bin, the share valid (``bin{b}_validity``) and the share
whose property lies in bin b (``bin{b}_in_bin``, % of all samples: an invalid one lies in no bin); validity,
uniqueness and novelty are those of all the bins' samples together. An unconditional run (``data.condition=none``,
the same GPT on the stream without bin tokens) reports for its ``sample.count`` samples the share in each bin of the
same quantiles (``bin{b}_in_bin``): the baseline, what sampling without asking gives (validity / num_bins for
a model that matches the training distribution).
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import torch

from seqlab.data.files import data_file
from seqlab.data.molecule_properties import PROPERTIES, PropertyBins, molecule_property
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
from seqlab.errors import CheckpointError, DataError
from seqlab.models import GPT, load_pretrained
from seqlab.recipes.base import Report, TrainingRun
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
from seqlab.recipes.saved_run import check_model_config, load_recipe_config
from seqlab.recipes.system import GenerationChunk, GenerationRequest, SystemOptions
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_real

NAME = "smiles"
ConditionName = Literal["prefix", "none"]
CONDITIONS = typing.get_args(ConditionName)
MAX_BINS = 100  # bins become tokens, and each is sampled sample.count times
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
    condition: ConditionName = "none"  # prefix: each molecule follows its property bin's token; none: unconditional
    property: str = "logp"  # logp | qed | mw: the RDKit property binned and measured in the samples
    num_bins: int = 3  # bins of equal shares of the training molecules (quantiles of the property)

    def __post_init__(self) -> None:
        check_choice("representation", self.representation, REPRESENTATIONS)
        check_bool("canonical", self.canonical)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=0)
        check_int("batches_per_epoch", self.batches_per_epoch)
        check_int("valid_tokens", self.valid_tokens, minimum=2)
        check_choice("condition", self.condition, CONDITIONS)
        check_choice("property", self.property, tuple(PROPERTIES))
        check_int("num_bins", self.num_bins, minimum=2, maximum=MAX_BINS)


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
    """A trained smiles run: the GPT, its molecule tokenizer, the recipe config and, for a run that generates to
    order, the property bins.

    Attributes:
        model: the GPT over the token stream of molecules (V = the tokenizer's tokens, then one token per bin).
        tokenizer: the atom-level SMILES (or SELFIES) tokenizer.
        config: the run's recipe config (data: how molecules are written; sample: generation's defaults).
        bins: the bins whose tokens condition the model (``data.condition=prefix``), None for an unconditional run.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset()

    model: GPT
    tokenizer: MoleculeTokenizer
    config: Config
    bins: PropertyBins | None = None

    @staticmethod
    def vocab_size(tokenizer: MoleculeTokenizer, bins: PropertyBins | None) -> int:
        """V of the GPT: the tokenizer's tokens, then one token per bin."""
        return tokenizer.vocab_size + (bins.num_bins if bins else 0)

    def condition_id(self, bin_index: int) -> int:
        """The token id of bin ``bin_index`` (after the tokenizer's ids)."""
        return self.tokenizer.vocab_size + bin_index

    def save(self, directory: Path) -> None:
        """Write the model, the tokenizer and the bins (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.tokenizer.save(directory)
        if self.bins is not None:
            self.bins.save(directory)

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
        bins = None
        if config.data.condition == "prefix":
            bins = PropertyBins.load(directory)
            if (bins.name, bins.num_bins) != (config.data.property, config.data.num_bins):
                raise CheckpointError(
                    f"{directory}: bins.json holds {bins.num_bins} {bins.name} bins, recipe.json "
                    f"{config.data.num_bins} {config.data.property} bins"
                )
        model_config = config.model.model_config(vocab_size=cls.vocab_size(tokenizer, bins))
        check_model_config(directory, model_config, model.config)
        return cls(model, tokenizer, config, bins)

    def stream(self, molecules: Sequence[str], *, source: str) -> torch.Tensor:
        """(N,) long: the token stream of ``molecules`` (SMILES) written as the run writes them, each after its
        bin's token in a run that generates to order (module docstring).

        Raises: DataError naming ``source`` for a token the model never saw or a SMILES RDKit cannot parse.
        """
        items = written(molecules, self.config.data)
        if self.bins is None:
            return stream(self.tokenizer, items, source=source)
        try:
            ids = [self.tokenizer.eos_id]
            for item, bin_index in zip(items, self.bins.bins_of(molecules), strict=True):
                ids.extend([self.condition_id(bin_index), *self.tokenizer.encode(item), self.tokenizer.eos_id])
        except DataError as error:
            raise DataError(f"{source}: {error}") from None
        return torch.tensor(ids)

    def text(self, row: Sequence[int]) -> str:
        """The string of sampled ids; a bin token inside a molecule is written ``<bin B>`` (no molecule has it)."""
        V = self.tokenizer.vocab_size
        return "".join(self.tokenizer.decode([i]) if i < V else f"<bin {i - V}>" for i in row)

    def evaluate(self, data_path: str) -> dict[str, float]:
        """``loss`` (nats/token), ``perplexity`` and scored ``tokens`` of the molecules of a SMILES file, written
        as the run wrote its training molecules (with their bins' tokens in a run that generates to order).

        Raises: DataError for a bad file, a SMILES RDKit cannot parse, or a token the model never saw.
        """
        return test_perplexity(self.model, self.stream(read_smiles(data_path), source=data_path))

    def predict(self, inputs: Sequence[str]) -> list[ItemLoss]:
        """Each input SMILES with its loss under the model (its bin's token scored too, in a run that generates to
        order).

        Raises: DataError for a SMILES with a token the model never saw (or, in a run to order, that RDKit cannot
            parse).
        """
        scored = []
        for text in inputs:
            ids = self.stream([text], source=f"input {text[:40]!r}")
            scored.append(ItemLoss(text, test_perplexity(self.model, ids)["loss"]))
        return scored

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """``request.num_return_sequences`` molecules that start with the SMILES (or SELFIES) prefix
        ``request.prompt``, one chunk each: the rest of the molecule (a SELFIES one followed by a tab and the whole
        molecule's SMILES), the run's ``sample`` section filling the settings not given. A run that generates to
        order reads the prompt as ``B`` or ``B:PREFIX``: a molecule of bin B that starts with PREFIX.

        Raises: ConfigError for a stop string or a bad setting; DataError for a prefix with unseen tokens, or a
            prompt that names no bin of a run to order.
        """
        prompt_ids, prefix = self.prompt_ids(request.prompt)
        rows = sample_request(
            self.model, prompt_ids, request, defaults=self.config.sample, eos_id=self.tokenizer.eos_id,
            recipe=NAME, item="molecule",
        )  # fmt: skip
        return (GenerationChunk(index, self._shown(prefix, row), True) for index, row in enumerate(rows))

    def prompt_ids(self, prompt: str) -> tuple[list[int], str]:
        """The ids a sample continues (separator, the bin's token in a run to order, the prefix) and the prefix.

        Raises: DataError for a prefix with unseen tokens, or (run to order) a prompt not ``B`` or ``B:PREFIX``
            with B a bin, one line listing the bins.
        """
        if self.bins is None:
            return stream(self.tokenizer, [prompt], source="--prompt")[:-1].tolist(), prompt
        head, _, prefix = prompt.partition(":")
        if head not in [str(b) for b in range(self.bins.num_bins)]:
            raise DataError(
                f"--prompt {prompt[:40]!r}: this run generates to order; give B or B:PREFIX, B a bin from 0 to "
                f"{self.bins.num_bins - 1} ({self.bins.describe()})"
            )
        ids = stream(self.tokenizer, [prefix], source="--prompt")[:-1].tolist()
        return [ids[0], self.condition_id(int(head)), *ids[1:]], prefix

    def _shown(self, prefix: str, row: list[int]) -> str:
        """The continuation text of one sample (``generate``)."""
        text = self.text(row)
        if self.config.data.representation == "smiles":
            return text
        return f"{text}\t{to_smiles(prefix + text, 'selfies')}"


System = SmilesSystem


@dataclass(frozen=True)
class SmilesTest:
    """The test of a trained run: the test stream's perplexity beside the unigram baseline, the sample scores of
    the model and of the unigram sampler, and the share of samples in each property bin (module docstring)."""

    system: SmilesSystem
    bins: PropertyBins  # the system's, or for an unconditional run those its samples are measured by
    train_ids: torch.Tensor
    test_ids: torch.Tensor
    known: frozenset[str]  # canonical SMILES of the training molecules

    def test(self) -> Report:
        """The test results, five samples with their canonical SMILES (or ``(invalid)``) and the bins."""
        model, tokenizer, config = self.system.model, self.system.tokenizer, self.system.config
        representation = config.data.representation
        results = {f"test_{name}": value for name, value in test_perplexity(model, self.test_ids).items()}
        results |= unigram_baseline(self.train_ids, self.test_ids, model.config.vocab_size)
        generator = torch.Generator().manual_seed(config.sample.seed)
        settings = sampling_settings(config.sample, config.model.context_length)

        def draw(prompt_ids: list[int]) -> list[str]:
            rows = sample(
                model, prompt_ids, eos_id=tokenizer.eos_id, count=config.sample.count, generator=generator,
                settings=settings,
            )  # fmt: skip
            return [self.system.text(row) for row in rows]

        if self.system.bins is None:
            texts = draw([tokenizer.eos_id])
            molecules = [to_smiles(text, representation) for text in texts]
            for b in range(self.bins.num_bins):
                results[f"bin{b}_in_bin"] = self.bins.scores(molecules, b).in_bin
            shown = [(f"sample {i + 1}", text) for i, text in enumerate(texts[:5])]
        else:
            texts, shown = [], []
            for b in range(self.bins.num_bins):
                drawn = draw([tokenizer.eos_id, self.system.condition_id(b)])
                scores = self.bins.scores([to_smiles(text, representation) for text in drawn], b)
                results |= {f"bin{b}_validity": scores.validity, f"bin{b}_in_bin": scores.in_bin}
                texts += drawn
                shown.append((f"bin {b}", drawn[0]))
        results |= _scores("", texts, self.known, representation)
        plain = self.train_ids[self.train_ids < tokenizer.vocab_size]  # the unigram sampler knows no bin token
        baseline = unigram_samples(
            plain, vocab_size=tokenizer.vocab_size, eos_id=tokenizer.eos_id, count=config.sample.count,
            max_length=config.model.context_length - 1, generator=generator,
        )  # fmt: skip
        results |= _scores("unigram_", [tokenizer.decode(row) for row in baseline], self.known, representation)
        return Report(results, [self._example(label, text) for label, text in shown[:5]], (self.bins.describe(),))

    def _example(self, label: str, text: str) -> tuple[str, str, str]:
        """A sample with its canonical SMILES and property (or ``(invalid)``)."""
        molecule = canonical_smiles(to_smiles(text, self.system.config.data.representation))
        if molecule is None:
            return label, text, "(invalid)"
        return label, text, f"{molecule} ({self.bins.name} {molecule_property(molecule, self.bins.name):.3g})"


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read and split the molecules, fit the property bins on the training molecules, build the tokenizer and the
    GPT, and check the streams (module docstring).

    Raises:
        DataError: a missing, binary or empty file, a SMILES RDKit cannot parse, too few molecules, or too few
            distinct property values for the bins.
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
    bins = PropertyBins.fit(splits.train, data.property, data.num_bins)
    tokenizer = MoleculeTokenizer.train([m for split in splits for m in written(split, data)], data.representation)
    conditioned = bins if data.condition == "prefix" else None
    model = GPT(config.model.model_config(vocab_size=SmilesSystem.vocab_size(tokenizer, conditioned)))
    system = SmilesSystem(model, tokenizer, config, conditioned)
    train_ids = system.stream(splits.train, source=source)
    valid_ids = system.stream(splits.valid, source=source)[: data.valid_tokens + 1]
    test_ids = system.stream(splits.test, source=source)
    blocks = causal_training(
        train_ids, valid_ids, context_length=config.model.context_length, batches_per_epoch=data.batches_per_epoch
    )
    known = frozenset(k for k in (canonical_smiles(m) for m in splits.train) if k)
    condition = f"conditioned on {bins.num_bins} {bins.name} bins" if conditioned else "unconditional"
    return TrainingRun(
        config,
        system.model,
        loss_fn=blocks.loss,
        train_batches=blocks.train_batches,
        validate=blocks.validate,
        save=system.save,
        test=SmilesTest(system, bins, train_ids, test_ids, known).test,
        summary=(
            f"data: {source}, {len(splits.train):,} / {len(splits.valid):,} / {len(splits.test):,} train / valid "
            f"/ test molecules, {len(train_ids):,} train tokens; {data.representation} tokens, "
            f"{tokenizer.vocab_size} types; {condition} ({bins.describe()})"
        ),
        summary_model=f"GPT L={config.model.num_layers} D={config.model.d_model}",
    )


def _scores(prefix: str, texts: Sequence[str], known: frozenset[str], representation: str) -> dict[str, float]:
    """Validity, uniqueness and novelty (%) of the sampled ``texts``, named with ``prefix``."""
    scores = molecule_scores([to_smiles(text, representation) for text in texts], set(known))
    return {f"{prefix}validity": scores.validity, f"{prefix}uniqueness": scores.uniqueness,
            f"{prefix}novelty": scores.novelty}  # fmt: skip
