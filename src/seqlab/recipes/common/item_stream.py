"""A GPT over a set of short sequences, items (molecules, proteins), read as one separated stream: what recipes
``smiles`` and ``protein`` share.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from seqlab.data.tokenizers import Tokenizer
from seqlab.decoding.generate import generate as generate_ids
from seqlab.errors import ConfigError, DataError
from seqlab.metrics import unigram_score
from seqlab.models import GPT, GPTConfig
from seqlab.recipes.base import model_device
from seqlab.recipes.common.causal_blocks import CausalBlockTraining
from seqlab.recipes.system import GenerationRequest
from seqlab.training.language_modeling import perplexity_sliding_window
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


@dataclass(frozen=True)
class ItemLoss:
    """An item and its loss under the model (``predict`` of a causal model).

    Attributes:
        text: the item as given. loss: nats per token over its tokens and its end token.
    """

    text: str
    loss: float

    def lines(self) -> list[str]:
        """One line: the item and its loss to 4 decimals, tab-separated."""
        return [f"{self.text}\t{self.loss:.4f}"]


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


def causal_training(
    train_ids: torch.Tensor, valid_ids: torch.Tensor, *, context_length: int, batches_per_epoch: int
) -> CausalBlockTraining:
    """Random training blocks and the validation loss over consecutive blocks (module docstring), the streams
    checked.

    Raises: DataError if the train stream is shorter than one block, or the valid stream has under 2 tokens.
    """
    T = context_length
    if len(train_ids) < T + 1:
        raise DataError(
            f"the train split has {len(train_ids)} tokens, too few for one block of model.context_length {T}"
        )
    if len(valid_ids) < 2:
        raise DataError(f"the valid split has {len(valid_ids)} token(s); validation needs at least 2")
    return CausalBlockTraining(train_ids, valid_ids, T, batches_per_epoch)


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
    defaults: SampleConfig, context_length: int, request: GenerationRequest | None = None
) -> dict[str, Any]:
    """``generate``'s keywords: the request's settings (None: none) over the sample section's defaults, at most
    context_length - 1 new tokens by default; beam search (num_beams > 1) takes no sampling option.

    Raises: ConfigError for num_beams > 1 with temperature, top_k or top_p, or a request not to sample without
        beams (these recipes sample).
    """
    request = request or GenerationRequest("")
    new_tokens = request.max_new_tokens or context_length - 1
    if request.num_beams is not None and request.num_beams > 1:
        if (request.temperature, request.top_k, request.top_p) != (None, None, None):
            raise ConfigError(f"--num-beams ({request.num_beams}) > 1 cannot be combined with sampling options")
        return {"max_new_tokens": new_tokens, "num_beams": request.num_beams}
    if request.do_sample is False:
        raise ConfigError("do_sample=False: these samples are drawn; give --num-beams K for a search")
    return {
        "max_new_tokens": new_tokens,
        "do_sample": True,
        "temperature": request.temperature or defaults.temperature,
        "top_k": request.top_k or defaults.top_k,
        "top_p": request.top_p,
    }


def sample_request(
    model: GPT,
    prompt_ids: Sequence[int],
    request: GenerationRequest,
    *,
    defaults: SampleConfig,
    eos_id: int,
    recipe: str,
    item: str,
) -> list[list[int]]:
    """The ``request.num_return_sequences`` continuations (token ids, without the ending separator) of
    ``prompt_ids`` that ``seqlab generate`` asks for, from a sampler seeded with ``request.seed`` (None: the sample
    section's seed).

    Raises: ConfigError for a stop string (``--stop is not used by the {recipe} recipe: a sample ends with its
        {item}``) or a bad setting (``sampling_settings``).
    """
    if request.stop is not None:
        raise ConfigError(f"--stop is not used by the {recipe} recipe: a sample ends with its {item}")
    settings = sampling_settings(defaults, model.config.context_length, request)
    generator = torch.Generator().manual_seed(defaults.seed if request.seed is None else request.seed)
    return sample(
        model, prompt_ids, eos_id=eos_id, count=request.num_return_sequences, generator=generator, settings=settings
    )
