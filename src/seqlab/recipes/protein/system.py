"""A trained ``protein`` run: its model, tokenizer and config, and what ``seqlab evaluate | predict | generate``
ask of it; the residue streams of the masked objective."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from seqlab.analysis.attention import LabelledAttention, attention_maps
from seqlab.data.proteins import read_fasta
from seqlab.data.tokenizers import CharTokenizer, load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.metrics import unigram_score
from seqlab.models import GPT, BertForMaskedLM, load_pretrained
from seqlab.recipes.common import masked_lm
from seqlab.recipes.common.item_stream import (
    ItemLoss,
    sample_request,
    stream,
    test_perplexity,
)
from seqlab.recipes.protein.config import FILL, NAME, Config, masking
from seqlab.recipes.saved_run import check_model_config, load_recipe_config
from seqlab.recipes.system import GenerationChunk, GenerationRequest, SystemOptions
from seqlab.training.masked_lm import IGNORE_INDEX


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
    """``masked_lm.score`` with the perplexity exp(loss), and (given ``train_ids``) the unigram baseline of the
    training residues at the same masked positions."""
    scores = masked_lm.score(model, batch)
    scores["perplexity"] = math.exp(scores["loss"])
    if train_ids is not None:
        residues = [i for i in train_ids.tolist() if i not in special]
        labels = batch.labels[batch.labels != IGNORE_INDEX].tolist()
        baseline = unigram_score(residues, labels, vocab_size=len(set(residues) | set(labels)))
        scores |= {"unigram_loss": baseline.loss, "unigram_perplexity": baseline.perplexity,
                   "unigram_accuracy": baseline.accuracy}  # fmt: skip
    return scores


@dataclass(frozen=True)
class FilledProtein:
    """An input of ``predict`` to a masked model, and the sequence with every ``_`` filled by the most likely
    residue."""

    text: str
    filled: str

    def lines(self) -> list[str]:
        """One line: the filled sequence."""
        return [self.filled]


@dataclass
class ProteinSystem:
    """A trained protein run: a causal GPT with a residue CharTokenizer, or a masked BERT with a residue
    WordPiece vocabulary, and the recipe config. Its one option is ``backend``.

    Attributes:
        onnx_model: what a masked model's ``predict`` calls instead of ``model``: the run's exported graph under
            onnxruntime (``--backend onnxruntime``), else None. Scores are computed in torch.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})

    model: GPT | BertForMaskedLM
    tokenizer: CharTokenizer | WordPieceTokenizer
    config: Config
    onnx_model: OnnxModel | None = None

    def save(self, directory: Path) -> None:
        """Write the model and the tokenizer (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.tokenizer.save(directory)

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> ProteinSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", a masked model's ``predict`` runs its
        export in ``directory/onnx``.

        Raises:
            CheckpointError: the directory holds another model or tokenizer, or its files disagree; (onnxruntime)
                the export is missing, stale or of another model.
            ConfigError: (onnxruntime) a causal run (its predictions are sliding-window losses, computed in torch
                only), or onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        model = load_pretrained(directory)
        tokenizer = load_tokenizer(directory)
        wanted = (BertForMaskedLM, WordPieceTokenizer) if config.model.objective == "masked" else (GPT, CharTokenizer)
        if not isinstance(model, wanted[0]) or not isinstance(tokenizer, wanted[1]):
            raise CheckpointError(f"{directory}: not a {config.model.objective} protein checkpoint")
        check_model_config(directory, config.model.config_for(vocab_size=tokenizer.vocab_size), model.config)
        if options.backend != "onnxruntime":
            return cls(model, tokenizer, config)
        if config.model.objective != "masked":
            raise ConfigError(
                f"--backend onnxruntime: {directory} is a causal {NAME} run; the {NAME} recipe runs masked "
                "(model.objective=masked) runs in onnxruntime, causal ones in torch only"
            )
        return cls(model, tokenizer, config, load_onnx_model(directory))

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Scores of the proteins of a FASTA file: causal ``loss`` (nats/token), ``perplexity``, ``tokens``; masked
        ``loss`` (nats per masked residue), ``perplexity``, ``accuracy`` (%) and ``tokens``, masks drawn with the
        run's ``train.seed`` + 1.

        Raises: DataError for a bad file or a residue the model never saw.
        """
        proteins = read_fasta(data_path)
        if isinstance(self.model, GPT):
            return test_perplexity(self.model, stream(self.tokenizer, proteins, source=data_path))
        masks = masking(self.config)
        ids = masked_stream(self.tokenizer, proteins, source=data_path)
        if len(ids) < masked_lm.window(masks):
            raise DataError(f"{data_path}: {len(ids)} residues, too few for one sequence of {masks.context_length}")
        generator = torch.Generator().manual_seed(self.config.train.seed + 1)
        return masked_scores(self.model, masked_lm.consecutive(ids, self.tokenizer, masks, generator), None, set())

    def predict(self, inputs: Sequence[str]) -> list[ItemLoss] | list[FilledProtein]:
        """Causal: each input with its loss; masked: each input with its ``_`` filled.

        Raises: DataError for a residue the model never saw, or (masked) an input without ``_`` or too long.
        """
        if isinstance(self.model, GPT):
            return [
                ItemLoss(text, test_perplexity(self.model, stream(self.tokenizer, [text], source="input"))["loss"])
                for text in inputs
            ]
        return [FilledProtein(text, self._fill(text)) for text in inputs]

    def _fill(self, text: str) -> str:
        """``text`` with each ``_`` replaced by the masked model's most likely residue (``predict``)."""
        model, tokenizer = self.model, self.tokenizer
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
            input_ids[selected] = (self.onnx_model or model)(input_ids).logits[selected].argmax(dim=-1)
        return tokenizer.decode(input_ids[0, 1:-1].tolist()).replace(" ", "")

    def attention_maps(self, text: str) -> LabelledAttention:
        """Every head's self-attention of the model on the residues ``text`` (causal for a GPT, both ways for a
        BERT), the residues and the separators ([CLS] and [SEP]; a causal model's leading [SEP]) as both axes' labels.

        Raises: DataError for a residue the model never saw or a protein longer than the model's context.
        """
        ids = self._ids(text, source="--input")
        residues = list(text.strip().upper())
        tokens = ["[SEP]", *residues] if isinstance(self.model, GPT) else ["[CLS]", *residues, "[SEP]"]
        maps = attention_maps(self.model, ids)
        stacks = {m.module.split(".")[0] for m in maps}
        return LabelledAttention(maps, {(stack, "self"): (tokens, tokens) for stack in stacks}, repr(text), [])

    def max_residues(self) -> int:
        """The most residues the model reads at once: its context less [CLS] and [SEP] (masked) or the leading
        separator (causal)."""
        if isinstance(self.model, GPT):
            return self.model.config.context_length - 1
        return self.model.config.max_positions - 2

    def residue_attention(self, sequence: str) -> torch.Tensor:
        """(H, L, L): every head of every layer of a masked model on ``sequence``, the rows and columns of [CLS]
        and [SEP] left out (``seqlab.recipes.system.ContactSource``).

        Raises: ConfigError for a causal model; DataError for an unseen residue or a sequence too long.
        """
        if isinstance(self.model, GPT):
            raise ConfigError("contacts need a masked (bidirectional) protein model; this run is causal")
        ids = self._ids(sequence, source=f"sequence {sequence[:20]!r}")
        maps = attention_maps(self.model, ids)
        return torch.stack([m.weights[1:-1, 1:-1] for m in maps])

    def _ids(self, text: str, *, source: str) -> list[int]:
        """The model's input ids of one protein: [CLS] residues [SEP] (masked) or separator residues (causal).

        Raises: DataError for an unseen residue or a protein longer than ``max_residues()``.
        """
        residues = text.strip().upper()
        if not residues:
            raise DataError(f"{source}: no residues")
        if len(residues) > self.max_residues():
            raise DataError(f"{source}: {len(residues)} residues, more than the model's {self.max_residues()}")
        if isinstance(self.model, GPT):
            return stream(self.tokenizer, [residues], source=source)[:-1].tolist()
        ids = masked_stream(self.tokenizer, [residues], source=source)[:-1].tolist()
        return [self.tokenizer.cls_id, *ids, self.tokenizer.sep_id]

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """``request.num_return_sequences`` proteins that start with the residues ``request.prompt`` (causal
        objective), one chunk each, the run's ``sample`` section filling the settings not given.

        Raises: ConfigError for a masked model, a stop string or a bad setting; DataError for unseen residues.
        """
        if not isinstance(self.model, GPT):
            raise ConfigError("a masked protein model does not generate; train model.objective=causal")
        prompt_ids = stream(self.tokenizer, [request.prompt], source="--prompt")[:-1].tolist()
        rows = sample_request(
            self.model, prompt_ids, request, defaults=self.config.sample, eos_id=prompt_ids[0], recipe=NAME,
            item="protein",
        )  # fmt: skip
        return (GenerationChunk(index, self.tokenizer.decode(row), True) for index, row in enumerate(rows))
