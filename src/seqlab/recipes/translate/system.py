"""A trained ``translate`` run: the seq2seq model with its source and target BPE tokenizers.

Model ids are the BPE ids shifted by ``SPECIALS`` past the seq2seq models' PAD = 0, BOS = 1, EOS = 2. Scores are
corpus BLEU (Papineni et al., 2002) and chrF (Popovic, 2015) by sacrebleu on the detokenised output (the BPE
decoding of the hypothesis, compared with the reference line as it is in the file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple

import torch
from sacrebleu.metrics import BLEU, CHRF

from seqlab.analysis.attention import LabelledAttention, attention_maps
from seqlab.data.batching import collate_seq2seq
from seqlab.data.tokenizers import BPETokenizer, load_tokenizer
from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.errors import CheckpointError, DataError
from seqlab.export import OnnxRNNSeq2Seq, OnnxTransformerSeq2Seq, load_step_model
from seqlab.models.seq2seq.rnn import RNNSeq2Seq
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq
from seqlab.recipes.base import model_device
from seqlab.recipes.saved_run import check_vocabulary_size, load_recipe_config
from seqlab.recipes.system import SystemOptions, with_beam_width
from seqlab.recipes.translate.config import Config
from seqlab.recipes.translate.data import Parallel, read_parallel

SOURCE_TOKENIZER = "source_tokenizer.json"
TARGET_TOKENIZER = "target_tokenizer.json"
SPECIALS = 3  # PAD, BOS, EOS before the BPE ids
SPECIAL_LABELS = ("<pad>", "<s>", "</s>")  # the specials' tick labels in attention maps


class Translation(NamedTuple):
    """One sentence and its detokenised best translation."""

    source: str
    text: str

    def lines(self) -> list[str]:
        """The translation, one line."""
        return [self.text]


class Scores(NamedTuple):
    """results: {"bleu", "chrf"} (0-100); hypotheses: the detokenised translations; signature: sacrebleu's."""

    results: dict[str, float]
    hypotheses: list[str]
    signature: str


@dataclass
class TranslateSystem:
    """A trained model with its two tokenizers (the same one when shared) and the recipe config.

    Attributes:
        options: ``num_beams`` (K, over ``config.decode.num_beams``) for predict and evaluate; ``backend``.
        step_model: what searches decode with instead of ``model``: the run's exported graphs under onnxruntime
            (``--backend onnxruntime``), else None.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"num_beams", "backend"})

    model: RNNSeq2Seq | TransformerSeq2Seq
    source: BPETokenizer
    target: BPETokenizer
    config: Config
    options: SystemOptions = field(default_factory=SystemOptions)
    step_model: OnnxRNNSeq2Seq | OnnxTransformerSeq2Seq | None = None

    def save(self, directory: Path) -> None:
        """Write the model and both tokenizers (``run_training`` adds ``recipe.json``, which ``load`` reads)."""
        self.model.save_pretrained(directory)
        self.source.save(directory / SOURCE_TOKENIZER)
        self.target.save(directory / TARGET_TOKENIZER)

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> TranslateSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", searches decode through its export in
        ``directory/onnx`` (``seqlab export``).

        Raises:
            CheckpointError: (one line naming the file) for a missing or malformed file, a tokenizer that is not
                BPE, or one whose size is not the model's vocabulary's; (onnxruntime) the export is missing, stale
                or of another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        tokenizers = [load_tokenizer(directory / name) for name in (SOURCE_TOKENIZER, TARGET_TOKENIZER)]
        if not all(isinstance(t, BPETokenizer) for t in tokenizers):
            raise CheckpointError(f"{directory}: the translate tokenizers must be BPE")
        model = config.model.model_class.from_pretrained(directory)
        sizes = (model.config.src_vocab_size, model.config.tgt_vocab_size)
        for name, tokenizer, size in zip((SOURCE_TOKENIZER, TARGET_TOKENIZER), tokenizers, sizes, strict=True):
            check_vocabulary_size(directory / name, tokenizer.vocab_size + SPECIALS, size)
        step_model = load_step_model(directory) if options.backend == "onnxruntime" else None
        return cls(model, *tokenizers, config, options, step_model)

    def with_search(self, *, num_beams: int | None = None, nbest: int | None = None) -> TranslateSystem:
        """This system with the beam width ``num_beams`` (None: this system's), sharing its model (``NBestSource``:
        a served request's ``num_beams``); it predicts one translation per input, so ``nbest`` may only be 1.

        Raises: ConfigError for a ``num_beams`` outside [1, ``system.MAX_BEAMS``], or an ``nbest`` other than 1.
        """
        return with_beam_width(self, num_beams, nbest, "translation")

    @property
    def num_beams(self) -> int:
        """K, the beam width predict and evaluate use (1 = greedy search)."""
        return self.options.num_beams or self.config.decode.num_beams

    def predict(self, inputs: Sequence[str]) -> list[Translation]:
        """The translation of each sentence, decoded together in batches."""
        return [Translation(s, t) for s, t in zip(inputs, self.translate(list(inputs)), strict=True)]

    def evaluate(self, data_path: str) -> dict[str, float]:
        """BLEU and chrF (``score``) on ``SRC_FILE,TGT_FILE`` (two line-aligned files, comma-separated).

        Raises: DataError for a path that is not two files, or a bad file (``read_parallel``).
        """
        files = data_path.split(",")
        if len(files) != 2:
            raise DataError(f"--data {data_path}: give SRC_FILE,TGT_FILE (two line-aligned files)")
        return self.score(read_parallel(*files)).results

    def encode(self, pairs: Parallel) -> list[tuple[list[int], list[int]]]:
        """(source ids, target ids) of each pair, BPE ids shifted past the specials."""
        return [
            (self.source_ids(s), [i + SPECIALS for i in self.target.encode(t)]) for s, t in zip(*pairs, strict=True)
        ]

    def source_ids(self, sentence: str) -> list[int]:
        """The encoder input of ``sentence``: its shifted BPE ids (EOS alone for an empty one)."""
        return [i + SPECIALS for i in self.source.encode(sentence)] or [self.model.config.eos_id]

    @torch.no_grad()
    def decode(self, sentences: Sequence[str], *, num_beams: int | None = None) -> list[list[int]]:
        """The best target ids of each sentence (model ids, EOS and what follows it cut), ``decode.batch_size`` at
        a time, each batch's length capped at min(max_length, max_length_ratio * longest source + 10); ``num_beams``
        None takes ``self.num_beams`` (1 = greedy search)."""
        decode, eos = self.config.decode, self.model.config.eos_id
        num_beams = self.num_beams if num_beams is None else num_beams
        self.model.eval()
        decoder = self.step_model or self.model
        device = model_device(self.model) if self.step_model is None else torch.device("cpu")  # graphs: the CPU
        results = []
        for start in range(0, len(sentences), decode.batch_size):
            ids = [self.source_ids(s) for s in sentences[start:][: decode.batch_size]]
            batch = collate_seq2seq([(x, []) for x in ids]).to(device)
            state = decoder.encode(batch.src, batch.src_lengths)
            bos = torch.full((len(ids),), self.model.config.bos_id, dtype=torch.long, device=device)  # (B,)
            longest = max(len(x) for x in ids)
            search = dict(eos_id=eos, max_length=min(decode.max_length, int(decode.max_length_ratio * longest) + 10))
            if num_beams == 1:
                out = greedy_search(decoder, state, bos, **search)
            else:
                out = beam_search(
                    decoder, state, bos, **search, num_beams=num_beams, length_penalty=decode.length_penalty
                )
            for tokens in out.tokens[:, 0].tolist():
                results.append(tokens[: tokens.index(eos)] if eos in tokens else tokens)
        return results

    def detokenise(self, ids: Sequence[int]) -> str:
        """The target text of model ids (specials dropped)."""
        return self.target.decode([i - SPECIALS for i in ids if i >= SPECIALS])

    def translate(self, sentences: Sequence[str], *, num_beams: int | None = None) -> list[str]:
        """The detokenised best translation of each sentence (``decode``)."""
        return [self.detokenise(ids) for ids in self.decode(sentences, num_beams=num_beams)]

    def score(self, pairs: Parallel, *, num_beams: int | None = None) -> Scores:
        """Corpus BLEU and chrF of the translations of ``pairs.src`` against ``pairs.tgt``."""
        hypotheses = self.translate(pairs.src, num_beams=num_beams)
        bleu, chrf = BLEU(), CHRF()
        results = {
            "bleu": bleu.corpus_score(hypotheses, [pairs.tgt]).score,
            "chrf": chrf.corpus_score(hypotheses, [pairs.tgt]).score,
        }
        return Scores(results, hypotheses, f"BLEU {bleu.get_signature()}; chrF {chrf.get_signature()}")

    def attention_maps(self, text: str) -> LabelledAttention:
        """Every attention map of the model on the sentence ``text``, teacher-forced with its own greedy
        translation: encoder and decoder self-attention and cross-attention (Transformer) or the decoder's
        alignment (RNN); axes labelled with BPE tokens (spaces shown as U+2423).

        Raises: DataError for an empty sentence.
        """
        if not text.strip():
            raise DataError("--input: empty sentence")
        source = self.source_ids(text)
        output = self.decode([text], num_beams=1)[0]
        decoder_input = [self.model.config.bos_id, *output]
        words = [self._piece(self.source, i) for i in source]
        outputs = [self._piece(self.target, i) for i in output]
        labels = {
            ("encoder", "self"): (words, words),
            ("decoder", "self"): ([SPECIAL_LABELS[1], *outputs], [SPECIAL_LABELS[1], *outputs]),
            ("decoder", "cross"): ([*outputs, SPECIAL_LABELS[2]], words),
        }
        maps = attention_maps(self.model, source, decoder_input)
        return LabelledAttention(maps, labels, f"{text!r} -> {self.detokenise(output)!r}", outputs)

    @staticmethod
    def _piece(tokenizer: BPETokenizer, model_id: int) -> str:
        """The text of one model id as a tick label (``SPECIAL_LABELS`` for the specials)."""
        if model_id < SPECIALS:
            return SPECIAL_LABELS[model_id]
        return tokenizer.decode([model_id - SPECIALS]).replace(" ", "\u2423")
