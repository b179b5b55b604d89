"""A trained ``lm`` run: its model, tokenizer and config, and what ``seqlab evaluate | predict | generate |
analyze attention`` ask of it (``seqlab.recipes.system``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from seqlab.analysis.attention import LabelledAttention, attention_maps
from seqlab.data.text import read_text
from seqlab.data.tokenizers import TOKENIZER_FILE, Tokenizer, load_tokenizer
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.export import OnnxGPT, load_step_model
from seqlab.models import GPT, CompiledGPT, RNNLanguageModel, SSMLanguageModel, TCNLanguageModel, load_pretrained
from seqlab.recipes.common.text_generation import continuation_pieces, prompt_tokens
from seqlab.recipes.lm.config import Config, LMDecodeConfig
from seqlab.recipes.saved_run import check_model_config, check_vocabulary_size, load_recipe_config
from seqlab.recipes.system import GenerationChunk, GenerationRequest, SystemOptions
from seqlab.training.language_modeling import Perplexity, perplexity_of_stream, perplexity_sliding_window


@dataclass(frozen=True)
class Continuation:
    """A prompt and the text the model continued it with (``predict``)."""

    prompt: str
    text: str

    def lines(self) -> list[str]:
        """One line: the prompt and its continuation, newlines shown as ``\\n``."""
        return [(self.prompt + self.text).replace("\n", "\\n")]


@dataclass
class LanguageModelSystem:
    """A trained language model with its tokenizer and recipe config: what a run directory holds.

    Attributes:
        model: a GPT, a recurrent, a convolutional (TCN) or a state-space language model.
        tokenizer: the run's char, word or BPE tokenizer.
        config: the run's whole recipe config (its decode section sets generation's defaults).
        step_model: what generation decodes with when it is not ``model``: the run's exported graphs under
            onnxruntime (``--backend onnxruntime``), or the GPT's compiled step (``--compile``), else None.

    A loaded run's model is in eval mode (``load_pretrained``). As in every recipe's System, each method that
    infers (``generate``, and ``perplexity`` for the time it scores) also sets eval mode itself, since the System
    that training builds holds the model being trained, which the trainer leaves in training mode.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend", "compile"})

    model: GPT | RNNLanguageModel | TCNLanguageModel | SSMLanguageModel
    tokenizer: Tokenizer
    config: Config
    step_model: OnnxGPT | CompiledGPT | None = None

    def save(self, directory: Path) -> None:
        """Write the model and ``tokenizer.json`` (``run_training`` adds ``recipe.json``, which ``load`` reads)."""
        self.model.save_pretrained(directory)
        self.tokenizer.save(directory)

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> LanguageModelSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", generation runs its export in
        ``directory/onnx`` (``seqlab.export.load_step_model``); with ``options.compile``, the GPT's compiled step
        (``CompiledGPT``), compiled here for one row (a prompt's generation; beam search compiles once more at its
        first K rows).

        Raises: CheckpointError for a run that holds another model, or whose files disagree, or (onnxruntime) whose
            export is missing, stale or not a GPT's; ConfigError if onnxruntime is not installed, or compile is asked
            with onnxruntime or of a model that is not a GPT.
        """
        config = load_recipe_config(directory, Config)
        model = load_pretrained(directory)
        if not isinstance(model, (GPT, RNNLanguageModel, TCNLanguageModel, SSMLanguageModel)):
            raise CheckpointError(f"{directory}: holds a {model.model_type} model, not a language model")
        tokenizer = load_tokenizer(directory)
        check_vocabulary_size(directory / TOKENIZER_FILE, tokenizer.vocab_size, model.config.vocab_size)
        check_model_config(directory, config.model.model_config(vocab_size=tokenizer.vocab_size), model.config)
        if options.compile and options.backend == "onnxruntime":
            raise ConfigError("compile runs torch's steps: it cannot be combined with backend onnxruntime")
        step_model = load_step_model(directory) if options.backend == "onnxruntime" else None
        if options.compile:
            try:
                step_model = CompiledGPT(model)
            except ConfigError as e:  # not a GPT
                raise ConfigError(f"{directory}: {e}") from None
            step_model.warm_up()
        return cls(model, tokenizer, config, step_model)

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
        # Through numpy: torch.tensor reads a list of 3.7 M ids (the default train split) in 0.28 s of CPU, numpy
        # in 0.10 s.
        return torch.from_numpy(np.array(ids, dtype=np.int64))

    def perplexity(self, text: str, *, source: str) -> Perplexity:
        """Whole-text loss (nats/token), perplexity and bits per character of ``text``: a GPT by a sliding window
        of stride context_length // 2, a recurrent model, a TCN or an SSM as one stream with its state carried.

        Raises: DataError as ``encode``.
        """
        ids = self.encode(text, source=source)
        if isinstance(self.model, GPT):
            T = self.model.config.context_length
            return perplexity_sliding_window(
                self.model, ids, context_length=T, stride=max(T // 2, 1), num_characters=len(text)
            )
        bptt_len = max(self.config.data.bptt_len, 256)  # only speed depends on it when evaluating
        return perplexity_of_stream(self.model, ids, batch_size=1, bptt_len=bptt_len, num_characters=len(text))

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Whole-file ``loss`` (nats/token), ``perplexity``, ``bpc`` (bits/character) and scored ``tokens`` of a
        UTF-8 text file (``perplexity``).

        Raises: DataError for a bad file, characters a char model never saw, or fewer than 2 tokens.
        """
        score = self.perplexity(read_text(data_path), source=data_path)
        return {
            "loss": score.loss,
            "perplexity": score.perplexity,
            "bpc": score.bits_per_character,
            "tokens": score.tokens,
        }

    def predict(self, inputs: Sequence[str]) -> list[Continuation]:
        """Each input continued under the run's decode section, with a freshly seeded sampler (``seqlab generate``
        has every option).

        Raises: ConfigError or DataError for a prompt ``generate`` refuses.
        """
        return [
            Continuation(prompt, "".join(c.text for c in self.generate(GenerationRequest(prompt)))) for prompt in inputs
        ]

    def decode_settings(self, request: GenerationRequest) -> LMDecodeConfig:
        """The run's decode section with the request's settings laid over it.

        Raises: ConfigError for a setting the section refuses (``num_beams (2) > 1 cannot be combined with
            sampling``), or a stop string with beam search.
        """
        decode = dataclasses.replace(self.config.decode, **request.overrides())
        if request.stop is not None and decode.num_beams > 1:
            raise ConfigError("--stop cannot be combined with beam search (--num-beams > 1)")
        return decode

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """The request's ``num_return_sequences`` continuations of its prompt, streamed as tokens arrive (beam
        search: in one piece), each ended by an empty chunk with ``finished=True``.

        The sequences come one after the other from one sampler seeded with ``request.seed`` (a fresh random seed
        when None), so a seed reproduces all of them; a stop string ends a sequence once it contains it (kept).
        Settings, prompt and seed are checked before anything is yielded.

        Raises:
            ConfigError: a setting the decode section refuses, an empty prompt, a prompt of context_length tokens
                or more, a stop string with beam search.
            DataError: a prompt with characters a char model never saw.
        """
        settings = dataclasses.asdict(self.decode_settings(request))
        prompt_ids = prompt_tokens(self.tokenizer, request.prompt, context_length=self.model.context_length)
        generator = torch.Generator()
        if request.seed is None:
            generator.seed()
        else:
            generator.manual_seed(request.seed)
        self.model.eval()
        return self._sequences(prompt_ids, settings, request, generator)

    def _sequences(
        self, prompt_ids: list[int], settings: dict, request: GenerationRequest, generator: torch.Generator
    ) -> Iterator[GenerationChunk]:
        """The chunks of ``generate``, once its checks have passed."""
        for index in range(request.num_return_sequences):
            pieces = continuation_pieces(
                self.step_model or self.model,
                self.tokenizer,
                prompt_ids,
                settings=settings,
                stop=request.stop,
                generator=generator,
            )
            for piece in pieces:
                yield GenerationChunk(index, piece, finished=False)
            yield GenerationChunk(index, "", finished=True)

    def attention_maps(self, text: str) -> LabelledAttention:
        """The causal self-attention maps of every head of a GPT on ``text``, its tokens as both axes' labels
        (spaces as U+2423, newlines as U+23CE).

        Raises:
            ConfigError: the model is not a GPT, or ``text`` has more tokens than the GPT's
                context.
            DataError: ``text`` has characters a char model never saw, or fewer than 2 tokens.
        """
        if not isinstance(self.model, GPT):
            kinds = {RNNLanguageModel: "an RNN", TCNLanguageModel: "a TCN", SSMLanguageModel: "a state-space"}
            kind = kinds[type(self.model)]
            raise ConfigError(f"{kind} language model has no attention to draw")
        ids = self.encode(text, source="--input").tolist()
        context = self.model.config.context_length
        if len(ids) > context:
            raise ConfigError(f"--input: {len(ids)} tokens, more than the model's context of {context}")
        # Spaces and newlines would be invisible as tick labels.
        tokens = [self.tokenizer.decode([i]).replace(" ", "\u2423").replace("\n", "\u23ce") for i in ids]
        maps = attention_maps(self.model, ids)
        stacks = {m.module.split(".")[0] for m in maps}
        return LabelledAttention(maps, {(stack, "self"): (tokens, tokens) for stack in stacks}, repr(text), [])
