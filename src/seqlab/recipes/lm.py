"""Recipe ``lm``: a language model (GPT or a recurrent LM) over characters, words or BPE pieces of a plain text.

Task: p(x_{t+1} | x_<=t) by maximum likelihood (Bengio et al., 2003; Mikolov et al., 2010; Radford et al., 2018).
Data: the default corpus (the King James Bible, ``seqlab.data.text``) or the user's UTF-8 files, split into
contiguous train / valid / test pieces. Metrics: whole-file loss of the test split in nats per token, its
perplexity exp(loss), and bits per character (total nats / (characters of the split * ln 2), for any tokenizer).

Training, one "epoch" being ``data.batches_per_epoch`` optimizer micro-batches for either architecture:
- ``gpt``: random blocks of ``model.context_length`` tokens of the train split (nanoGPT's ``get_batch``).
- ``lstm`` | ``gru`` | ``rnn``: truncated BPTT over ``train.batch_size`` parallel streams of the train split's
  paragraphs (``seqlab.data.streams``), ``data.bptt_len`` steps per window, the state carried (detached) from
  window to window and across epochs, zeroed at each paragraph; an epoch continues where the previous one stopped.
Validation: mean loss over the first ``data.valid_tokens`` tokens of the valid split. Test: the whole test split,
by a sliding window of stride context_length // 2 (GPT) or one stream with its state carried (recurrent).

``model.preset`` (zaremba_small | zaremba_medium | zaremba_large, Zaremba et al., 2014) fills every field still at
this recipe's default: arch lstm, the RNN sizes, dropout and init range, data.bptt_len, and train optimizer sgd,
lr 1, clip_norm and batch_size 20 (the paper's per-epoch lr decay is not applied: the lr stays constant).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from seqlab.data.blocks import block_batches, random_blocks
from seqlab.data.streams import batchify_stream, stream_windows
from seqlab.data.text import load_corpus, read_text, split_documents
from seqlab.data.tokenizers import (
    TOKENIZER_FILE,
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    WordTokenizer,
    load_tokenizer,
)
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.models import GPT, GPTConfig, RNNLanguageModel, load_pretrained
from seqlab.recipes.base import (
    Report,
    TrainingRun,
    check_model_config,
    check_vocabulary_size,
    load_recipe_config,
    model_device,
    run_training,
)
from seqlab.recipes.lm_config import (
    Config,
    LMDataConfig,
    apply_preset,
)
from seqlab.recipes.lm_generation import continuation, prompt_tokens, stream_continuation
from seqlab.recipes.run_directory import RunMode
from seqlab.training.language_modeling import (
    Perplexity,
    language_model_loss,
    perplexity_of_stream,
    perplexity_sliding_window,
)
from seqlab.training.objectives import LossOutput
from seqlab.training.tbptt import TruncatedBPTT
from seqlab.validation import check_int

NAME = "lm"
DESCRIPTION = "language model (GPT, LSTM, GRU, RNN) on char/word/BPE tokens; perplexity and bits/char of a text"
PREDICT_OPTIONS: tuple[str, ...] = ()
VALID_STREAMS = 8  # parallel streams when validating a recurrent model
EXAMPLE_PROMPT_TOKENS = 16  # report examples: a prompt of this many test tokens ...
EXAMPLE_NEW_TOKENS = 32  # ... continued by this many (fewer when a GPT's context is shorter)


@dataclass
class LanguageModelSystem:
    """A trained language model with its tokenizer and recipe config: what a run directory holds."""

    model: GPT | RNNLanguageModel
    tokenizer: Tokenizer
    config: Config

    def save(self, directory: Path) -> None:
        """Write the model and ``tokenizer.json`` (``run_training`` adds ``recipe.json``, which ``load`` reads)."""
        self.model.save_pretrained(directory)
        self.tokenizer.save(directory)

    @classmethod
    def load(cls, directory: Path) -> LanguageModelSystem:
        config = load_recipe_config(directory, Config)
        model = load_pretrained(directory)
        if not isinstance(model, (GPT, RNNLanguageModel)):
            raise CheckpointError(f"{directory}: holds a {model.model_type} model, not a language model")
        tokenizer = load_tokenizer(directory)
        check_vocabulary_size(directory / TOKENIZER_FILE, tokenizer.vocab_size, model.config.vocab_size)
        check_model_config(directory, config.model.model_config(vocab_size=tokenizer.vocab_size), model.config)
        return cls(model, tokenizer, config)

    def encode(self, text: str, *, source: str) -> torch.Tensor:
        """(N,) long token ids of ``text``; ``source`` names the text in the error message.

        Raises: DataError if the text has characters a char model never saw, or fewer than 2 tokens.
        """
        try:
            ids = self.tokenizer.encode(text)
        except DataError as e:
            raise DataError(f"{source}: {e}") from None
        if len(ids) < 2:
            raise DataError(f"{source}: {len(ids)} token(s); scoring needs at least 2")
        return torch.tensor(ids, dtype=torch.long)

    def perplexity(self, text: str, *, source: str) -> Perplexity:
        """Whole-file loss (nats/token), perplexity and bits per character of ``text`` (module docstring)."""
        ids = self.encode(text, source=source)
        if isinstance(self.model, GPT):
            T = self.model.config.context_length
            return perplexity_sliding_window(
                self.model, ids, context_length=T, stride=max(T // 2, 1), num_characters=len(text)
            )
        bptt_len = max(self.config.data.bptt_len, 256)  # only speed depends on it when evaluating
        return perplexity_of_stream(self.model, ids, batch_size=1, bptt_len=bptt_len, num_characters=len(text))


def build_tokenizer(config: LMDataConfig, train: str, valid: str, test: str) -> Tokenizer:
    """The data section's tokenizer: char from all three splits joined (nanoGPT), word and BPE from train."""
    if config.tokenizer == "char":
        return CharTokenizer.train(train + valid + test)
    if config.tokenizer == "word":
        return WordTokenizer.train(train, min_count=config.min_count)
    return BPETokenizer.train(train, vocab_size=config.vocab_size)


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train, keep the best checkpoint in ``out_dir``, and score the whole test split.

    Raises:
        DataError: a file is missing, empty, binary or not UTF-8; a split is too small (for one block or stream).
        ConfigError: a preset that contradicts the arch.
    """
    config = apply_preset(config)
    data = config.data

    def prepare() -> TrainingRun:
        splits = load_corpus(
            data.train_path,
            data.valid_path,
            data.test_path,
            valid_fraction=data.valid_fraction,
            test_fraction=data.test_fraction,
        )
        tokenizer = build_tokenizer(data, *splits)
        model_config = config.model.model_config(vocab_size=tokenizer.vocab_size)
        model = GPT(model_config) if isinstance(model_config, GPTConfig) else RNNLanguageModel(model_config)
        system = LanguageModelSystem(model, tokenizer, config)
        train_name = data.train_path or "the default corpus"
        valid_ids = system.encode(splits.valid, source=data.valid_path or "the valid split")[: data.valid_tokens + 1]
        test_ids = system.encode(splits.test, source=data.test_path or "the test split")
        batch_size = config.train.batch_size // config.train.grad_accumulation_steps
        if isinstance(model, GPT):
            train_ids = system.encode(splits.train, source=train_name)
            T = config.model.context_length
            if len(train_ids) < T + 1:
                raise DataError(
                    f"{train_name}: the train split has {len(train_ids)} tokens, too few for one block of "
                    f"model.context_length {T} (a block needs {T + 1})"
                )
            run = _gpt_functions(train_ids, valid_ids, T, data.batches_per_epoch)
        else:
            documents = [system.encode(f"{doc}\n", source=train_name) for doc in split_documents(splits.train)]
            total = sum(len(d) for d in documents)
            if total < 2 * batch_size:
                raise DataError(
                    f"{train_name}: the train split has {total} tokens, too few for {batch_size} streams "
                    f"(train.batch_size) of at least 2 tokens"
                )
            run = _rnn_functions(documents, valid_ids, data.bptt_len, data.batches_per_epoch)

        def test() -> Report:
            score = system.perplexity(splits.test, source=data.test_path or "the test split")
            results = {
                "test_loss": score.loss,
                "test_perplexity": score.perplexity,
                "test_bpc": score.bits_per_character,
                "test_tokens": float(score.tokens),
            }
            return Report(results, examples(system, test_ids.tolist()))

        return TrainingRun(
            model,
            loss_fn=run.loss_fn,
            train_batches=run.train_batches,
            validate=run.validate,
            save=system.save,
            test=test,
            summary=(
                f"data: {train_name}, {len(splits.train):,} / {len(splits.valid):,} / {len(splits.test):,} "
                f"train / valid / test characters; {data.tokenizer} tokenizer, {tokenizer.vocab_size} tokens"
            ),
            summary_model=config.model.arch,
            strategy=run.strategy,
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


@dataclass(frozen=True)
class _Functions:
    """What ``prepare`` hands the trainer for one architecture."""

    loss_fn: Callable[..., LossOutput]
    train_batches: Callable[[int, torch.Generator, int], Any]
    validate: Callable[[Any], dict[str, float]]
    strategy: TruncatedBPTT | None = None


def _gpt_functions(train_ids: torch.Tensor, valid_ids: torch.Tensor, T: int, batches_per_epoch: int) -> _Functions:
    def train_batches(epoch, generator, batch_size):
        return (
            random_blocks(train_ids, block_size=T, batch_size=batch_size, generator=generator)
            for _ in range(batches_per_epoch)
        )

    def validate(model):
        total, tokens = 0.0, 0
        block = min(T, len(valid_ids) - 1)
        for inputs, targets in block_batches(valid_ids, block_size=block, batch_size=64):
            out = language_model_loss(model, inputs.to(model_device(model)), targets.to(model_device(model))).output
            total, tokens = total + out.loss.item() * out.num_tokens, tokens + out.num_tokens
        return _valid_metrics(total / tokens)

    return _Functions(lambda model, b: language_model_loss(model, b.inputs, b.targets).output, train_batches, validate)


def _rnn_functions(
    documents: list[torch.Tensor], valid_ids: torch.Tensor, bptt_len: int, batches_per_epoch: int
) -> _Functions:
    windows: dict[int, list] = {}  # the windows of the stream of each batch size, built once

    def train_batches(epoch, generator, batch_size):
        if batch_size not in windows:
            windows[batch_size] = list(stream_windows(batchify_stream(documents, batch_size), bptt_len))
        each = windows[batch_size]
        first = (epoch - 1) * batches_per_epoch  # each epoch continues the stream where the last one stopped
        return (each[(first + i) % len(each)] for i in range(batches_per_epoch))

    def window_loss(logits, window):
        targets = window.targets.flatten()
        return LossOutput(F.cross_entropy(logits.flatten(0, 1), targets), targets.numel())

    def validate(model):
        streams = min(VALID_STREAMS, len(valid_ids) // 2)
        return _valid_metrics(perplexity_of_stream(model, valid_ids, batch_size=streams, bptt_len=bptt_len).loss)

    strategy = TruncatedBPTT(bptt_len, forward=lambda model, inputs, state: model(inputs, state))
    return _Functions(window_loss, train_batches, validate, strategy)


def _valid_metrics(loss: float) -> dict[str, float]:
    return {"valid_loss": loss, "valid_perplexity": float(torch.tensor(loss).exp())}


def examples(system: LanguageModelSystem, test_ids: Sequence[int], *, count: int = 3) -> list[tuple[str, str, str]]:
    """(prompt, reference, generated) at ``count`` evenly spaced places of the test split, generated with the
    decode section's settings and a generator seeded with ``train.seed``; newlines shown as ``\\n``."""
    context = system.model.context_length or EXAMPLE_PROMPT_TOKENS + EXAMPLE_NEW_TOKENS
    prompt_length = min(EXAMPLE_PROMPT_TOKENS, context // 2)
    new_tokens = min(EXAMPLE_NEW_TOKENS, context - prompt_length)
    decode = dataclasses.replace(system.config.decode, max_new_tokens=new_tokens)
    generator = torch.Generator(device=model_device(system.model)).manual_seed(system.config.train.seed)
    span = len(test_ids) - prompt_length - new_tokens
    rows = []
    for start in sorted({max(span, 0) * i // count for i in range(count)}):
        prompt = test_ids[start : start + prompt_length]
        reference = continuation(
            system.tokenizer, prompt, test_ids[start + prompt_length : start + prompt_length + new_tokens]
        )
        generated = stream_continuation(
            system.model,
            system.tokenizer,
            prompt,
            settings=dataclasses.asdict(decode),
            stop=None,
            on_text=lambda text: None,
            generator=generator,
        )
        shown = (system.tokenizer.decode(prompt), reference, generated)
        rows.append(tuple(text.replace("\n", "\\n") for text in shown))
    return rows


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """Whole-file ``loss`` (nats/token), ``perplexity``, ``bpc`` (bits/character) and scored ``tokens`` of a text
    file under a checkpoint (module docstring).

    Raises: DataError for a bad file, characters a char model never saw, or fewer than 2 tokens.
    """
    system = LanguageModelSystem.load(checkpoint)
    score = system.perplexity(read_text(data_path), source=data_path)
    return {"loss": score.loss, "perplexity": score.perplexity, "bpc": score.bits_per_character, "tokens": score.tokens}


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """Each input followed by its continuation under the checkpoint's decode settings (newlines as ``\\n``;
    ``seqlab generate`` has every option)."""
    return [text.replace("\n", "\\n") for prompt in inputs for text in generate(checkpoint, prompt)]


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
    """Continue ``prompt`` ``num_samples`` times, streaming each sample to ``on_text`` as tokens are produced.

    Each sample is streamed as the prompt, the continuation piece by piece (a piece is held back while it ends in
    an incomplete UTF-8 character), and a newline; with several samples a header ``--- sample i/N ---`` line
    precedes each. The given options override the checkpoint's decode section; any of temperature, top_k, top_p
    turns sampling on. Samples come from one generator seeded with ``seed`` (a fresh random seed when None), so
    a seed reproduces all of them. A stop string ends a sample once the continuation contains it (kept).

    Returns: the N texts, each the prompt and its continuation.
    Raises:
        ConfigError: a bad option (as LMDecodeConfig: ``top_p (1.5) must be ...``), an empty prompt or stop string,
            a prompt of context_length tokens or more, a stop string or sampling with num_beams > 1.
        DataError: a prompt with characters a char model never saw.
    """
    system = LanguageModelSystem.load(checkpoint)
    given = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_k": top_k, "top_p": top_p}
    given = {k: v for k, v in {**given, "num_beams": num_beams}.items() if v is not None}
    sampling = temperature is not None or top_k is not None or top_p is not None
    decode = dataclasses.replace(system.config.decode, **given, **({"do_sample": True} if sampling else {}))
    check_int("num_samples", num_samples)
    if stop == "":
        raise ConfigError("--stop is empty; give the string that ends a continuation")
    if stop is not None and decode.num_beams > 1:
        raise ConfigError("--stop cannot be combined with beam search (--num-beams > 1)")
    prompt_ids = prompt_tokens(system.tokenizer, prompt, context_length=system.model.context_length)
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    system.model.eval()
    texts = []
    for i in range(num_samples):
        if num_samples > 1:
            on_text(f"--- sample {i + 1}/{num_samples} ---\n")
        on_text(prompt)
        settings = dataclasses.asdict(decode)
        text = stream_continuation(
            system.model,
            system.tokenizer,
            prompt_ids,
            settings=settings,
            stop=stop,
            on_text=on_text,
            generator=generator,
        )
        on_text("\n")
        texts.append(prompt + text)
    return texts
