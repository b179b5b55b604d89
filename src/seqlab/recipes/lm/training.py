"""Training recipe ``lm``: the data read, the model built and the parts ``run_training`` trains with (module
docstring of ``seqlab.recipes.lm``): random blocks for a GPT (``CausalBlockTraining``), truncated BPTT over
parallel streams for a recurrent model or a TCN (``RecurrentTraining``), the whole test split scored (``LMTest``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from seqlab.data.streams import StreamWindow, batchify_stream, stream_windows
from seqlab.data.text import TextSplits, load_corpus, split_documents
from seqlab.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, WordTokenizer
from seqlab.errors import DataError
from seqlab.models import GPT, RNNLanguageModel, SSMLanguageModel, TCNLanguageModel
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.common.causal_blocks import CausalBlockTraining, valid_metrics
from seqlab.recipes.common.text_generation import continuation, stream_continuation
from seqlab.recipes.lm.config import Config, GPTModelConfig, LMDataConfig, SSMModelConfig, apply_preset
from seqlab.recipes.lm.system import LanguageModelSystem
from seqlab.training.language_modeling import perplexity_of_stream
from seqlab.training.objectives import LossOutput
from seqlab.training.tbptt import TruncatedBPTT

MODELS = {  # the model class of each model.arch
    "gpt": GPT,
    "lstm": RNNLanguageModel,
    "gru": RNNLanguageModel,
    "gru_textbook": RNNLanguageModel,
    "rnn": RNNLanguageModel,
    "tcn": TCNLanguageModel,
    "ssm": SSMLanguageModel,
}
VALID_STREAMS = 8  # parallel streams when validating a recurrent model
EXAMPLE_PROMPT_TOKENS = 16  # report examples: a prompt of this many test tokens ...
EXAMPLE_NEW_TOKENS = 32  # ... continued by this many (fewer when a GPT's context is shorter)


def build_tokenizer(config: LMDataConfig, train: str, valid: str, test: str) -> Tokenizer:
    """The data section's tokenizer: char from all three splits joined (nanoGPT), word and BPE from train."""
    if config.tokenizer == "char":
        return CharTokenizer.train(train + valid + test)
    if config.tokenizer == "word":
        return WordTokenizer.train(train, min_count=config.min_count)
    return BPETokenizer.train(train, vocab_size=config.vocab_size)


def read_splits(data: LMDataConfig) -> TextSplits:
    """The train / valid / test text of the data section (``seqlab.data.text.load_corpus``).

    Raises: DataError for a missing, empty, binary or non-UTF-8 file.
    """
    return load_corpus(
        data.train_path,
        data.valid_path,
        data.test_path,
        valid_fraction=data.valid_fraction,
        test_fraction=data.test_fraction,
    )


@dataclass
class RecurrentTraining:
    """The parts a ``TrainingRun`` takes for a recurrent model trained by truncated BPTT over
    ``train.batch_size`` parallel streams of the train split's paragraphs (module docstring of the recipe).

    Attributes:
        documents: the token ids (N_i,) of each paragraph of the train split.
        valid_ids: (M,) long, the valid split's tokens.
        bptt_len: k1 of truncated BPTT, steps per window.
        batches_per_epoch: windows per epoch; an epoch continues the stream where the previous one stopped.
        bptt_k2: k2 >= k1, steps each window's loss is backpropagated through; None means k2 = k1.
    """

    documents: list[torch.Tensor]
    valid_ids: torch.Tensor
    bptt_len: int
    batches_per_epoch: int
    bptt_k2: int | None = None
    windows: dict[int, list[StreamWindow]] = field(default_factory=dict)  # of each batch size, built once

    def loss(self, logits: torch.Tensor, window: StreamWindow) -> LossOutput:
        """The mean loss (nats/token) of a window's logits (B, T, V) against its targets (B, T)."""
        targets = window.targets.flatten()
        return LossOutput(F.cross_entropy(logits.flatten(0, 1), targets), targets.numel())

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[StreamWindow]:
        """The epoch's ``batches_per_epoch`` consecutive windows of the ``batch_size`` streams (no randomness)."""
        if batch_size not in self.windows:
            self.windows[batch_size] = list(stream_windows(batchify_stream(self.documents, batch_size), self.bptt_len))
        each = self.windows[batch_size]
        first = (epoch - 1) * self.batches_per_epoch
        return (each[(first + i) % len(each)] for i in range(self.batches_per_epoch))

    def validate(self, model: RNNLanguageModel) -> dict[str, float]:
        """``valid_loss`` (nats/token) over ``VALID_STREAMS`` streams of the valid split, and its perplexity."""
        streams = min(VALID_STREAMS, len(self.valid_ids) // 2)
        return valid_metrics(
            perplexity_of_stream(model, self.valid_ids, batch_size=streams, bptt_len=self.bptt_len).loss
        )

    def strategy(self) -> TruncatedBPTT:
        """Truncated BPTT(k1 = ``bptt_len``, k2 = ``bptt_k2``) over the windows, the state carried (detached) from
        one to the next."""
        return TruncatedBPTT(self.bptt_len, self.bptt_k2, forward=_recurrent_forward)


def _recurrent_forward(model: RNNLanguageModel, inputs: torch.Tensor, state: Any) -> Any:
    """The model's outputs and final state on one window of inputs (B, T), from ``state``."""
    return model(inputs, state)


@dataclass(frozen=True)
class LMTest:
    """The test of a trained run: the whole test split scored, and generated examples.

    Attributes:
        system: the run being trained.
        text: the test split; source: its name in messages.
    """

    system: LanguageModelSystem
    text: str
    source: str

    def test(self) -> Report:
        """``test_loss`` (nats/token), ``test_perplexity``, ``test_bpc`` and ``test_tokens`` of the whole test
        split, and three generated examples (``examples``)."""
        score = self.system.perplexity(self.text, source=self.source)
        results = {
            "test_loss": score.loss,
            "test_perplexity": score.perplexity,
            "test_bpc": score.bits_per_character,
            "test_tokens": float(score.tokens),
        }
        return Report(results, examples(self.system, self.system.encode(self.text, source=self.source).tolist()))


def examples(system: LanguageModelSystem, test_ids: Sequence[int], *, count: int = 3) -> list[tuple[str, str, str]]:
    """(prompt, reference, generated) at ``count`` evenly spaced places of the test split, generated with the
    decode section's settings and a generator seeded with ``train.seed``, the model in eval mode (as
    ``LanguageModelSystem.generate`` puts it: the trainer leaves it in training mode); newlines shown as ``\\n``."""
    system.model.eval()
    context = system.model.context_length or EXAMPLE_PROMPT_TOKENS + EXAMPLE_NEW_TOKENS
    prompt_length = min(EXAMPLE_PROMPT_TOKENS, context // 2)
    new_tokens = min(EXAMPLE_NEW_TOKENS, context - prompt_length)
    settings = dataclasses.asdict(dataclasses.replace(system.config.decode, max_new_tokens=new_tokens))
    generator = torch.Generator(device=model_device(system.model)).manual_seed(system.config.train.seed)
    span = len(test_ids) - prompt_length - new_tokens
    rows = []
    for start in sorted({max(span, 0) * i // count for i in range(count)}):
        prompt = test_ids[start : start + prompt_length]
        reference = continuation(
            system.tokenizer, prompt, test_ids[start + prompt_length : start + prompt_length + new_tokens]
        )
        generated = stream_continuation(
            system.model, system.tokenizer, prompt, settings=settings, stop=None, on_text=lambda text: None,
            generator=generator,
        )  # fmt: skip
        shown = (system.tokenizer.decode(prompt), reference, generated)
        rows.append(tuple(text.replace("\n", "\\n") for text in shown))
    return rows


class _Parts(NamedTuple):
    """The architecture's training parts (``training_parts``)."""

    loss_fn: Callable[..., LossOutput]
    train_batches: Callable[[int, torch.Generator, int], Iterator[Any]]
    validate: Callable[[Any], dict[str, float]]
    strategy: TruncatedBPTT | None


def training_parts(config: Config, system: LanguageModelSystem, splits: TextSplits) -> _Parts:
    """The loss, train batches, validation and strategy of ``config.model.arch`` on the splits.

    Raises: DataError if the train split is too short for one block (GPT, SSM) or for ``train.batch_size`` streams
        of two tokens (recurrent), or the valid split has under 2 tokens.
    """
    data = config.data
    train_name = data.train_path or "the default corpus"
    valid_ids = system.encode(splits.valid, source=data.valid_path or "the valid split")
    if isinstance(config.model, (GPTModelConfig, SSMModelConfig)):
        train_ids = system.encode(splits.train, source=train_name)
        T = config.model.context_length
        if len(train_ids) < T + 1:
            raise DataError(
                f"{train_name}: the train split has {len(train_ids)} tokens, too few for one block of "
                f"model.context_length {T} (a block needs {T + 1})"
            )
        valid_blocks = max(1, data.valid_tokens // T)  # spread over the whole valid split
        blocks = CausalBlockTraining(train_ids, valid_ids, T, data.batches_per_epoch, valid_blocks)
        return _Parts(blocks.loss, blocks.train_batches, blocks.validate, None)
    documents = [system.encode(f"{doc}\n", source=train_name) for doc in split_documents(splits.train)]
    total, batch_size = sum(len(d) for d in documents), config.train.batch_size // config.train.grad_accumulation_steps
    if total < 2 * batch_size:
        raise DataError(
            f"{train_name}: the train split has {total} tokens, too few for {batch_size} streams "
            f"(train.batch_size) of at least 2 tokens"
        )
    valid_ids = valid_ids[: data.valid_tokens + 1]  # the streams read the beginning of the valid split
    streams = RecurrentTraining(documents, valid_ids, data.bptt_len, data.batches_per_epoch, data.bptt_k2)
    return _Parts(streams.loss, streams.train_batches, streams.validate, streams.strategy())


def _receptive_field_note(model: GPT | RNNLanguageModel | TCNLanguageModel) -> str:
    """ ", receptive field R tokens" for a TCN (the log line's model note), else nothing."""
    return f", receptive field {model.receptive_field} tokens" if isinstance(model, TCNLanguageModel) else ""


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Resolve ``model.preset``, read the text, build the tokenizer and the model, and check the splits.

    Raises:
        DataError: a file is missing, empty, binary or not UTF-8; a split is too small (for one block or stream),
            or has characters a char tokenizer never saw.
    """
    config = apply_preset(config)
    data = config.data
    splits = read_splits(data)
    tokenizer = build_tokenizer(data, *splits)
    model_config = config.model.model_config(vocab_size=tokenizer.vocab_size)
    model = MODELS[config.model.arch](model_config)
    system = LanguageModelSystem(model, tokenizer, config)
    parts = training_parts(config, system, splits)
    test_source = data.test_path or "the test split"
    system.encode(splits.test, source=test_source)  # refuse a bad test split before training
    return TrainingRun(
        config,
        model,
        loss_fn=parts.loss_fn,
        train_batches=parts.train_batches,
        validate=parts.validate,
        save=system.save,
        test=LMTest(system, splits.test, test_source).test,
        summary=(
            f"data: {data.train_path or 'the default corpus'}, {len(splits.train):,} / {len(splits.valid):,} / "
            f"{len(splits.test):,} train / valid / test characters; {data.tokenizer} tokenizer, "
            f"{tokenizer.vocab_size} tokens"
        ),
        summary_model=config.model.arch + _receptive_field_note(model),
        strategy=parts.strategy,
    )
