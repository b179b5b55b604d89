"""What recipes ``smiles`` and ``protein`` share: a GPT over a set of short sequences (molecules, proteins).

Splits: the items (strings) are shuffled by a generator seeded with ``data.split_seed`` and cut by fractions of
their count into train / valid / test, so no item is in two splits (the random split of MOSES).

Stream: a split is one token stream ``SEP item SEP item ... SEP``, SEP a separator token that ends every item
(and so also marks where the next one starts). Training draws random blocks of ``context_length`` tokens of the
train stream (nanoGPT's ``get_batch``), so a block may span several items; validation reads the consecutive blocks
of the valid stream (at most ``data.valid_tokens``); the test scores the whole test stream by the sliding window of
stride context_length // 2 (``perplexity_sliding_window``): every token after the leading separator, each item's
ending separator included. Loss in nats per token, perplexity exp(loss).

Baseline: the add-one smoothed unigram model of the training stream (``seqlab.metrics.unigram_score``) scored on
exactly the tokens the model is scored on.

Samples: ancestral sampling from the separator alone (or separator + a prefix), until the next separator or the
context is full; a sample that fills the context without ending is kept as it is.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from seqlab.data.blocks import Blocks, block_batches, random_blocks
from seqlab.data.tokenizers import Tokenizer
from seqlab.decoding.generate import generate as generate_ids
from seqlab.errors import ConfigError, DataError
from seqlab.metrics import unigram_score
from seqlab.models import GPT, GPTConfig
from seqlab.recipes.base import model_device
from seqlab.training.language_modeling import language_model_loss, perplexity_sliding_window
from seqlab.training.objectives import LossOutput
from seqlab.validation import MAX_DEPTH, MAX_WIDTH, check_int, check_probability, check_real

SEPARATOR = "\n"  # the text of the separator token
SAMPLE_BATCH = 250  # samples generated at once


@dataclass(frozen=True)
class GPTSectionConfig:
    """The causal model's shape (``seqlab.models.GPT``; V comes from the data)."""

    context_length: int = 64  # most positions attended, the block length in training
    d_model: int = 128  # D
    num_heads: int = 4  # N
    num_layers: int = 4  # L
    d_ff: int | None = None  # feed-forward inner size, 4 D if None
    dropout: float = 0.1  # embeddings, attention weights, sublayer outputs

    def __post_init__(self) -> None:
        check_int("context_length", self.context_length, minimum=2, maximum=MAX_WIDTH)
        check_int("d_model", self.d_model, maximum=MAX_WIDTH)
        check_int("num_heads", self.num_heads, maximum=MAX_DEPTH)
        check_int("num_layers", self.num_layers, maximum=MAX_DEPTH)
        check_int("d_ff", self.d_ff, optional=True, maximum=MAX_WIDTH)
        check_probability("dropout", self.dropout)
        self.model_config(vocab_size=2)  # the model's own checks (d_model % num_heads)

    def model_config(self, *, vocab_size: int) -> GPTConfig:
        """The ``GPTConfig`` of these sizes for a vocabulary of ``vocab_size``."""
        fields = ("context_length", "d_model", "num_heads", "num_layers", "d_ff", "dropout")
        return GPTConfig(vocab_size=vocab_size, **{name: getattr(self, name) for name in fields})


@dataclass(frozen=True)
class SampleConfig:
    """How the test's samples (and ``seqlab generate``'s defaults) are drawn."""

    count: int = 1000  # samples scored after training
    temperature: float = 1.0  # logits / T
    top_k: int | None = None  # sample from the k most likely tokens (None: all)
    seed: int = 0  # seed of the sampler

    def __post_init__(self) -> None:
        check_int("count", self.count)
        check_real("temperature", self.temperature, greater_than=0.0)
        check_int("top_k", self.top_k, optional=True)
        check_int("seed", self.seed, minimum=0)


class ItemSplits(NamedTuple):
    """The items of the train, valid and test splits."""

    train: list[str]
    valid: list[str]
    test: list[str]


def split_items(
    items: Sequence[str], *, valid_fraction: float, test_fraction: float, seed: int, source: str
) -> ItemSplits:
    """``items`` shuffled with ``seed`` and cut into train / valid / test by fractions of their count (module
    docstring); each held-out split gets at least one item.

    Raises: DataError if there are too few items for three non-empty splits (``source`` names them).
    """
    order = list(items)
    random.Random(seed).shuffle(order)
    valid = max(1, round(valid_fraction * len(order)))
    test = max(1, round(test_fraction * len(order)))
    if len(order) - valid - test < 1:
        raise DataError(f"{source}: {len(order)} item(s), too few for train, valid and test splits")
    return ItemSplits(order[: -valid - test], order[-valid - test : -test], order[-test:])


def stream(tokenizer: Tokenizer, items: Sequence[str], *, source: str) -> torch.Tensor:
    """(N,) long: the token stream ``SEP item SEP ... item SEP`` of ``items`` (module docstring).

    Raises: DataError from the tokenizer (an unseen character or token), with ``source`` named.
    """
    try:
        return torch.tensor(tokenizer.encode(SEPARATOR + "".join(f"{item}{SEPARATOR}" for item in items)))
    except DataError as error:
        raise DataError(f"{source}: {error}") from None


class CausalFunctions(NamedTuple):
    """What ``prepare`` hands the trainer."""

    loss_fn: Callable[[GPT, Blocks], LossOutput]
    train_batches: Callable[[int, torch.Generator, int], Iterator[Blocks]]
    validate: Callable[[GPT], dict[str, float]]


def causal_functions(
    train_ids: torch.Tensor, valid_ids: torch.Tensor, *, context_length: int, batches_per_epoch: int
) -> CausalFunctions:
    """Random training blocks and the validation loss over consecutive blocks (module docstring).

    Raises: DataError if the train stream is shorter than one block, or the valid stream has under 2 tokens.
    """
    T = context_length
    if len(train_ids) < T + 1:
        raise DataError(
            f"the train split has {len(train_ids)} tokens, too few for one block of model.context_length {T}"
        )
    if len(valid_ids) < 2:
        raise DataError(f"the valid split has {len(valid_ids)} token(s); validation needs at least 2")

    def train_batches(epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Blocks]:
        for _ in range(batches_per_epoch):
            yield random_blocks(train_ids, block_size=T, batch_size=batch_size, generator=generator)

    def validate(model: GPT) -> dict[str, float]:
        total, tokens = 0.0, 0
        device = model_device(model)
        for blocks in block_batches(valid_ids, block_size=min(T, len(valid_ids) - 1), batch_size=64):
            out = language_model_loss(model, blocks.inputs.to(device), blocks.targets.to(device)).output
            total, tokens = total + out.loss.item() * out.num_tokens, tokens + out.num_tokens
        loss = total / tokens
        return {"valid_loss": loss, "valid_perplexity": float(torch.tensor(loss).exp())}

    def loss_fn(model: GPT, blocks: Blocks) -> LossOutput:
        return language_model_loss(model, blocks.inputs, blocks.targets).output

    return CausalFunctions(loss_fn, train_batches, validate)


def test_perplexity(model: GPT, ids: torch.Tensor) -> dict[str, float]:
    """``loss`` (nats/token), ``perplexity`` and scored ``tokens`` of a whole stream (module docstring).

    Raises: DataError for a stream of fewer than 2 tokens.
    """
    if len(ids) < 2:
        raise DataError(f"{len(ids)} token(s); scoring needs at least 2")
    T = model.config.context_length
    score = perplexity_sliding_window(model, ids, context_length=T, stride=max(T // 2, 1))
    return {"loss": score.loss, "perplexity": score.perplexity, "tokens": float(score.tokens)}


def unigram_baseline(train_ids: torch.Tensor, test_ids: torch.Tensor, vocab_size: int) -> dict[str, float]:
    """The unigram baseline's ``unigram_loss`` (nats/token) and ``unigram_perplexity`` on the tokens the model is
    scored on (all but the first of the test stream)."""
    score = unigram_score(train_ids.tolist(), test_ids[1:].tolist(), vocab_size=vocab_size)
    return {"unigram_loss": score.loss, "unigram_perplexity": score.perplexity}


@torch.no_grad()
def sample(
    model: GPT,
    prompt_ids: Sequence[int],
    *,
    eos_id: int,
    count: int,
    generator: torch.Generator,
    settings: dict,
) -> list[list[int]]:
    """``count`` continuations of ``prompt_ids`` (which starts with the separator), each without its ending
    separator, drawn with ``settings`` (``generate``'s keywords: max_new_tokens, do_sample, temperature, ...).

    Raises: ConfigError from ``generate`` for a bad setting or a prompt that fills the context.
    """
    was_training = model.training
    model.eval()
    device = model_device(model)
    rows: list[list[int]] = []
    for start in range(0, count, SAMPLE_BATCH):
        size = min(SAMPLE_BATCH, count - start)
        ids = torch.tensor([list(prompt_ids)] * size, dtype=torch.long, device=device)
        out = generate_ids(model, ids, **settings, eos_id=eos_id, generator=generator)
        for row in out.tokens[:, len(prompt_ids) :].tolist():
            rows.append(row[: row.index(eos_id)] if eos_id in row else row)
    model.train(was_training)
    return rows


def unigram_samples(
    train_ids: torch.Tensor, *, vocab_size: int, eos_id: int, count: int, max_length: int, generator: torch.Generator
) -> list[list[int]]:
    """``count`` sequences drawn token by token from the add-one smoothed unigram model of ``train_ids``, each
    ended by the separator ``eos_id`` (not included) or cut at ``max_length`` tokens: the baseline sampler."""
    probs = (torch.bincount(train_ids, minlength=vocab_size).double() + 1).div_(len(train_ids) + vocab_size)
    draws = torch.multinomial(probs, count * max_length, replacement=True, generator=generator)
    rows = []
    for row in draws.view(count, max_length).tolist():
        rows.append(row[: row.index(eos_id)] if eos_id in row else row)
    return rows


def sampling_settings(
    defaults: SampleConfig,
    context_length: int,
    *,
    max_new_tokens: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    num_beams: int | None = None,
) -> dict:
    """``generate``'s keywords: the given options over the sample section's defaults; beam search (num_beams > 1)
    takes no sampling option.

    Raises: ConfigError for num_beams > 1 with temperature, top_k or top_p.
    """
    new_tokens = max_new_tokens or context_length - 1
    if num_beams is not None and num_beams > 1:
        if (temperature, top_k, top_p) != (None, None, None):
            raise ConfigError(f"--num-beams ({num_beams}) > 1 cannot be combined with sampling options")
        return {"max_new_tokens": new_tokens, "num_beams": num_beams}
    return {
        "max_new_tokens": new_tokens,
        "do_sample": True,
        "temperature": temperature or defaults.temperature,
        "top_k": top_k or defaults.top_k,
        "top_p": top_p,
    }
