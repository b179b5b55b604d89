"""Configuration of recipe ``protein``: the data, model and sample sections (``seqlab.recipes.protein``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqlab.data.files import data_file
from seqlab.data.proteins import FASTA
from seqlab.errors import ConfigError
from seqlab.models import BertConfig, GPTConfig
from seqlab.recipes.common.item_stream import (
    GPTSectionConfig,
    SampleConfig,
)
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_choice, check_int, check_probability, check_real

NAME = "protein"
DESCRIPTION = "causal GPT or masked BERT over a 2,100-protein proteome (pyhmmer); perplexity per residue vs unigram"
OBJECTIVES = ("causal", "masked")
FILL = "_"  # marks a residue for ``predict`` to fill (masked objective)
EXAMPLE_RESIDUES = 60  # residues of each example shown in the report


@dataclass(frozen=True)
class ProteinDataConfig:
    """The proteins, their split, batching and masking."""

    train_path: str | None = data_file(FASTA)  # FASTA file; None = the proteome shipped in the pyhmmer wheel
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


@dataclass(frozen=True)
class ProteinMasking:
    """How the masked objective builds and masks its sequences (``recipes.common.masked_lm.Masking``)."""

    context_length: int  # residues per sequence, [CLS] and [SEP] included (the model's positions)
    mask_prob: float  # share of the residues selected for prediction (80% [MASK], 10% random, 10% kept)
    nsp: bool = False  # proteins are not sentence pairs


def masking(config: Config) -> ProteinMasking:
    """The sequences and masking of the masked objective: the model's context and the data section's mask_prob."""
    return ProteinMasking(context_length=config.model.context_length, mask_prob=config.data.mask_prob)
