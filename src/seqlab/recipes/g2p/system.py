"""``G2PSystem``: a trained g2p run (model, letter and phoneme vocabularies, recipe config) and what it answers:
predictions (an n-best of pronunciations with scores), PER/WER on a CMUdict-format file, attention maps on a word,
and the exposure bias of its teacher-forced training.

Options (``SystemOptions``): ``num_beams`` and ``nbest`` for predictions; ``ensemble``, further runs over the same
vocabularies decoded together with this one (``EnsembleStepModel``, mean probability); ``rescore`` and
``rescore_weight``, runs that re-rank the beam (``seqlab.recipes.g2p.rescoring``); ``errors``, a new file that
``evaluate`` fills with the wrong words (``seqlab.recipes.g2p.error_analysis``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import torch

from seqlab.analysis.attention import LabelledAttention, attention_maps
from seqlab.analysis.exposure import ExposureBias, exposure_bias
from seqlab.data.batching import batch_iterator, collate_seq2seq
from seqlab.data.cmudict import Pronunciation, group_references, read_cmudict
from seqlab.data.pronunciations import load_splits, read_entries
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.coverage import CoverageStepModel, coverage_penalty
from seqlab.decoding.ensemble import EnsembleStepModel
from seqlab.decoding.greedy import greedy_search
from seqlab.errors import CheckpointError, ConfigError, DataError, UnknownSymbolError
from seqlab.export import OnnxRNNSeq2Seq, OnnxTransformerSeq2Seq, load_step_model
from seqlab.metrics import g2p_scores
from seqlab.models.seq2seq.rnn import RNNSeq2Seq
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq
from seqlab.recipes.base import model_device
from seqlab.recipes.g2p.config import Config
from seqlab.recipes.g2p.error_analysis import check_errors_path, error_categories, write_errors
from seqlab.recipes.g2p.rescoring import TargetOrder, rescore_nbest, target_ids
from seqlab.recipes.saved_run import check_model_config, check_vocabulary_size, load_recipe_config, recipe_name_of
from seqlab.recipes.system import SystemOptions, nbest_within_beam

NAME = "g2p"
RESCORE_WEIGHT = 0.5  # the weight of --rescore when --rescore-weight is not given
SOURCE_VOCAB = "source_vocab.json"
TARGET_VOCAB = "target_vocab.json"
EXPOSURE_BATCH = 256  # pronunciations per batch of ``exposure_bias``

# One word's hypotheses, best first: (phonemes in reading order, score in nats).
Hypotheses = list[tuple[tuple[str, ...], float]]


class G2PPrediction(NamedTuple):
    """The pronunciations predicted for one word, best first.

    Attributes:
        word: the word, lower-cased as the model reads it.
        nbest: (phonemes, score) pairs; the score is the beam's log-probability (nats), or with ``--rescore`` the
            combined score of ``seqlab.recipes.g2p.rescoring``.
    """

    word: str
    nbest: tuple[tuple[tuple[str, ...], float], ...]

    def lines(self) -> list[str]:
        """CMUdict-format lines ``word  P H O N E S``, ``word(2)  ...`` for the second best and so on."""
        return [
            f"{self.word if rank == 1 else f'{self.word}({rank})'}  {' '.join(phonemes)}"
            for rank, (phonemes, _) in enumerate(self.nbest, start=1)
        ]


@dataclass(frozen=True)
class G2PSystem:
    """A trained G2P model with its vocabularies and recipe config: what a run directory holds.

    Attributes:
        model: the encoder-decoder; letters, phonemes: its source and target vocabularies; config: the recipe's.
        ensemble: further models over the same vocabularies, decoded together with ``model`` when not empty.
        rescorers: other systems over the same vocabularies, trained in one target order, that re-rank the beam
            with weight ``rescore_weight``, as one ensemble (the mean of their per-phoneme probabilities).
        num_beams: K of predictions (None: ``config.decode.num_beams``); nbest: hypotheses per predicted word.
        errors: a new file that ``evaluate`` fills with the wrong words, or None.
        step_model: what searches decode with instead of ``model``: the run's exported graphs under onnxruntime
            (``--backend onnxruntime``), else None.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset(
        {"num_beams", "nbest", "ensemble", "rescore", "rescore_weight", "errors", "backend"}
    )

    model: RNNSeq2Seq | TransformerSeq2Seq
    letters: Vocabulary
    phonemes: Vocabulary
    config: Config
    ensemble: tuple[RNNSeq2Seq | TransformerSeq2Seq, ...] = ()
    rescorers: tuple[G2PSystem, ...] = ()
    rescore_weight: float = 0.0
    num_beams: int | None = None
    nbest: int = 1
    errors: Path | None = None
    step_model: OnnxRNNSeq2Seq | OnnxTransformerSeq2Seq | None = None

    def save(self, directory: Path) -> None:
        """Write the model and both vocabularies (``run_training`` adds ``recipe.json``, which ``load`` reads)."""
        self.model.save_pretrained(directory)
        self.letters.save(directory / SOURCE_VOCAB)
        self.phonemes.save(directory / TARGET_VOCAB)

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> G2PSystem:
        """The run in ``directory`` with ``options``: the runs ``options.ensemble`` decoded with it, the runs
        ``options.rescore`` re-ranking its beam with weight ``options.rescore_weight`` (default ``RESCORE_WEIGHT``),
        ``num_beams`` and ``nbest`` for predictions, ``errors`` for ``evaluate``.

        Raises:
            CheckpointError: a file is missing or malformed, a vocabulary's size is not the weights', ``recipe.json``
                describes another model than ``config.json``; an ensemble or rescoring run is not a g2p run, has
                other vocabularies, or reads pronunciations in another order (an ensemble run than this one's, a
                rescoring run than the first rescoring run's; one line naming it).
            ConfigError: ``rescore_weight`` without ``rescore``; ``nbest`` above the beam width; an ``errors`` file
                that exists or whose directory does not; ``backend`` "onnxruntime" with ``ensemble``, or without
                onnxruntime installed; ``ensemble`` or onnxruntime with the run's ``decode.coverage_penalty``.
            CheckpointError: (onnxruntime) the export in ``directory/onnx`` is missing, stale or of another model.
        """
        if not options.rescore and options.rescore_weight is not None:
            raise ConfigError("--rescore-weight needs --rescore, the run whose scores it weighs")
        onnxruntime = options.backend == "onnxruntime"
        if onnxruntime and options.ensemble:
            raise ConfigError("--backend onnxruntime cannot be combined with --ensemble (an ensemble decodes in torch)")
        system = cls._load_run(directory)
        if system.config.decode.coverage_penalty > 0 and (onnxruntime or options.ensemble):
            flag = "--backend onnxruntime" if onnxruntime else "--ensemble"
            raise ConfigError(
                f"{flag} cannot be combined with {directory}'s decode.coverage_penalty "
                "(it sums one torch model's attention)"
            )
        nbest = nbest_within_beam(options, options.num_beams or system.config.decode.num_beams)
        if options.errors is not None:
            check_errors_path(options.errors)
        ensemble = tuple(
            system._member(other, directory, "--ensemble", same_order=True).model for other in options.ensemble
        )
        rescorers = tuple(system._member(other, directory, "--rescore") for other in options.rescore)
        for other, rescorer in zip(options.rescore[1:], rescorers[1:], strict=True):
            if rescorer.config.model.target_order != rescorers[0].config.model.target_order:
                first = options.rescore[0]
                raise CheckpointError(f"--rescore {other}: reads pronunciations in another order than {first}")
        weight = RESCORE_WEIGHT if options.rescore_weight is None else options.rescore_weight
        return dataclasses.replace(
            system,
            ensemble=ensemble,
            rescorers=rescorers,
            rescore_weight=weight if rescorers else 0.0,
            num_beams=options.num_beams,
            nbest=nbest,
            errors=options.errors,
            step_model=load_step_model(directory) if onnxruntime else None,
        )

    @classmethod
    def _load_run(cls, directory: Path) -> G2PSystem:
        """The system saved in ``directory``, without options. Raises: CheckpointError as ``load``."""
        config = load_recipe_config(directory, Config)
        model = config.model.model_class.from_pretrained(directory)
        letters, phonemes = Vocabulary.load(directory / SOURCE_VOCAB), Vocabulary.load(directory / TARGET_VOCAB)
        check_vocabulary_size(directory / SOURCE_VOCAB, len(letters), model.config.src_vocab_size)
        check_vocabulary_size(directory / TARGET_VOCAB, len(phonemes), model.config.tgt_vocab_size)
        expected = config.model.model_config(src_vocab_size=len(letters), tgt_vocab_size=len(phonemes))
        check_model_config(directory, expected, model.config)
        return cls(model, letters, phonemes, config)

    def _member(self, other: Path, directory: Path, flag: str, *, same_order: bool = False) -> G2PSystem:
        """The g2p run ``other`` (given as ``flag``), refused unless its vocabularies are this run's (loaded from
        ``directory``) and, with ``same_order``, its target order too. Raises: CheckpointError naming it."""
        name = recipe_name_of(other)
        if name != NAME:
            raise CheckpointError(f"{flag} {other}: a {name} run, not a {NAME} run")
        member = G2PSystem._load_run(other)
        if member.letters != self.letters or member.phonemes != self.phonemes:
            raise CheckpointError(f"{flag} {other}: its letter or phoneme vocabulary differs from {directory}'s")
        if same_order and member.config.model.target_order != self.config.model.target_order:
            raise CheckpointError(f"{flag} {other}: reads pronunciations in another order than {directory}")
        return member

    def predict(self, inputs: Sequence[str]) -> list[G2PPrediction]:
        """The ``nbest`` pronunciations of each word (lower-cased), with the beam width ``num_beams``.

        Raises: DataError for an empty word, one longer than ``data.max_word_length``, or one with letters the
            model never saw (naming the word and the letters).
        """
        words = [w.lower() for w in inputs]
        hypotheses = self.transcribe(words, source="inputs", num_beams=self.num_beams, nbest=self.nbest)
        return [G2PPrediction(w, tuple(h)) for w, h in zip(words, hypotheses, strict=True)]

    def with_search(self, *, num_beams: int | None = None, nbest: int | None = None) -> G2PSystem:
        """This system with the beam width ``num_beams`` and ``nbest`` hypotheses per word (None: this system's;
        an ``nbest`` not given is cut to the beam width), sharing its models (``NBestSource``).

        Raises: ConfigError for a count below 1 or above ``system.MAX_BEAMS``, or an ``nbest`` above the beam width.
        """
        SystemOptions(num_beams=num_beams, nbest=nbest)  # the range of each count
        num_beams = self.num_beams if num_beams is None else num_beams
        width = self.config.decode.num_beams if num_beams is None else num_beams
        nbest = nbest_within_beam(SystemOptions(nbest=min(self.nbest, width) if nbest is None else nbest), width)
        return dataclasses.replace(self, num_beams=num_beams, nbest=nbest)

    def evaluate(self, data_path: str) -> dict[str, float]:
        """PER and WER (%) of the best hypothesis of each word of a CMUdict-format file against all of its
        references, with the run's decode settings, the number of words and WER by category (``score``); with
        ``errors``, the wrong words are written there.

        Raises: DataError: the file is malformed, or has letters or phonemes the model never saw (as a valid file
            would be refused in training).
        """
        entries = read_entries(data_path, self.config.data)
        encode_pairs(self, entries, source=data_path)  # letters and phonemes the model never saw are an error
        return self.score(entries, source=data_path, errors_path=self.errors)

    def encode_words(self, words: Sequence[str], *, source: str) -> list[list[int]]:
        """Letter ids of each word; ``source`` names where the words came from for the error message.

        Raises: DataError for an empty word, one longer than ``data.max_word_length``, or unseen letters.
        """
        encoded = []
        limit = self.config.data.max_word_length
        for word in words:
            if not word:
                raise DataError(f"{source}: empty word")
            if len(word) > limit:
                raise DataError(f"{source}: word of {len(word)} letters, longer than data.max_word_length ({limit})")
            try:
                encoded.append(self.letters.encode(list(word)))
            except UnknownSymbolError:
                unseen = sorted({ch for ch in word if ch not in self.letters})
                raise DataError(
                    f"{source}: word {word!r} has letters the model never saw: {' '.join(map(repr, unseen))}"
                ) from None
        return encoded

    @torch.no_grad()
    def transcribe(
        self, words: Sequence[str], *, source: str, num_beams: int | None = None, nbest: int = 1
    ) -> list[Hypotheses]:
        """The ``nbest`` pronunciations of each word, best first, with their log-probabilities (nats), by beam
        search with ``num_beams`` beams (None: the decode section's; 1: greedy search) over ``model`` and the
        ``ensemble``; with ``rescorers``, the whole beam re-ranked, with the combined scores (``rescoring``).

        Raises: ConfigError if ``nbest`` exceeds the beam width; DataError as ``encode_words``.
        """
        decode = self.config.decode
        num_beams = decode.num_beams if num_beams is None else num_beams
        nbest = nbest_within_beam(SystemOptions(nbest=nbest), num_beams)
        ids = self.encode_words(words, source=source)
        rescoring = bool(self.rescorers) and self.rescore_weight > 0 and num_beams > 1
        results: list[Hypotheses] = []
        for start in range(0, len(ids), decode.batch_size):
            chunk = ids[start : start + decode.batch_size]
            results += self._search(
                chunk, num_beams=num_beams, returned=num_beams if rescoring else nbest, whole_beam=rescoring
            )
        if rescoring:
            results = rescore_nbest(
                results,
                ids,
                [rescorer.model for rescorer in self.rescorers],
                self.phonemes,
                order=self.rescorers[0].config.model.target_order,
                weight=self.rescore_weight,
                length_penalty=decode.length_penalty,
                batch_size=decode.batch_size,
            )
        return [hyps[:nbest] for hyps in results]

    def _search(
        self, chunk: Sequence[Sequence[int]], *, num_beams: int, returned: int, whole_beam: bool
    ) -> list[Hypotheses]:
        """The ``returned`` best hypotheses of each word of ``chunk`` (letter ids), by greedy search for
        ``num_beams`` = 1, else beam search; scored by their log-probabilities (nats), or with ``whole_beam`` (to
        be rescored) by the beam's own, length-normalised scores."""
        decode = self.config.decode
        for model in (self.model, *self.ensemble):
            model.eval()
        decoder = EnsembleStepModel((self.model, *self.ensemble)) if self.ensemble else self.step_model or self.model
        device = model_device(self.model)
        batch = collate_seq2seq([(x, []) for x in chunk]).to(device)
        state = decoder.encode(batch.src, batch.src_lengths)
        finished_score = None
        if decode.coverage_penalty > 0 and num_beams > 1:  # (load refuses it with an ensemble or onnxruntime)
            keep_mask = torch.arange(batch.src.shape[1], device=device) < batch.src_lengths.to(device).unsqueeze(1)
            decoder = CoverageStepModel(self.model)
            state = decoder.start(state, keep_mask)
            finished_score = functools.partial(coverage_penalty, beta=decode.coverage_penalty)
        bos = torch.full((len(chunk),), self.phonemes.bos_id, dtype=torch.long, device=device)
        eos, max_length = self.phonemes.eos_id, decode.max_length
        if num_beams == 1:
            out = greedy_search(decoder, state, bos, eos_id=eos, max_length=max_length)
        else:
            out = beam_search(
                decoder,
                state,
                bos,
                eos_id=eos,
                max_length=max_length,
                num_beams=num_beams,
                length_penalty=decode.length_penalty,
                num_return_sequences=returned,
                finished_score=finished_score,
            )
        ranked = out.scores if whole_beam else out.log_probs
        order = self.config.model.target_order
        return [
            [(self._phonemes_of(t, order), s) for t, s in zip(tokens, scores, strict=True)]
            for tokens, scores in zip(out.tokens.tolist(), ranked.tolist(), strict=True)
        ]

    def _phonemes_of(self, ids: Sequence[int], order: TargetOrder) -> tuple[str, ...]:
        """The pronunciation of decoded ids, in reading order (a right-to-left model's output is reversed)."""
        phonemes = tuple(self.phonemes.decode(list(ids)))
        return phonemes[::-1] if order == "right_to_left" else phonemes

    def score(
        self, entries: Sequence[Pronunciation], *, source: str, errors_path: Path | None = None
    ) -> dict[str, float]:
        """PER and WER (%) of the best hypothesis of each word against all of its reference pronunciations, the
        number of words, and WER by category (``error_analysis.error_categories``); with ``errors_path``, also
        write the wrong words there (``error_analysis.write_errors``; an existing file is refused before decoding).

        Raises: ConfigError for an existing ``errors_path``; DataError as ``encode_words``.
        """
        if errors_path is not None:
            check_errors_path(errors_path)
        references = group_references(entries)
        words = list(references)
        best = [hyps[0][0] for hyps in self.transcribe(words, source=source, num_beams=self.num_beams)]
        variants = [references[w] for w in words]
        scores = g2p_scores(best, variants)
        if errors_path is not None:
            write_errors(errors_path, words, best, variants)
        return {
            "per": scores.per,
            "wer": scores.wer,
            "words": float(len(words)),
            **error_categories(words, best, variants),
        }

    def attention_maps(self, text: str) -> LabelledAttention:
        """Every attention map of the model on the word ``text``, teacher-forced with its own greedy
        transcription: encoder self-attention (letters x letters), decoder self-attention (BOS + phonemes) and
        cross-attention (phonemes + EOS x letters); an RNN has only the cross-attention.

        Raises: DataError for a word the model cannot read (named as ``--input``).
        """
        source = self.encode_words([text], source="--input")[0]
        predicted = list(self.transcribe([text], source="--input", num_beams=1)[0][0][0])
        decoder_input = [self.phonemes.bos_id, *self.phonemes.encode(predicted)]
        inputs = [self.phonemes.symbols[i] for i in decoder_input]
        letters = list(text)
        labels = {
            ("encoder", "self"): (letters, letters),
            ("decoder", "self"): (inputs, inputs),
            ("decoder", "cross"): ([*predicted, self.phonemes.symbols[self.phonemes.eos_id]], letters),
        }
        maps = attention_maps(self.model, source, decoder_input)
        return LabelledAttention(maps, labels, f"{text!r} -> {' '.join(predicted)}", predicted)

    def exposure_bias(self, data_path: str | None) -> tuple[ExposureBias, str]:
        """Teacher-forced against free-running loss and token accuracy of the model
        (``seqlab.analysis.exposure``) on a CMUdict-format file, or with None on the run's own test split; and
        the name of the data used.

        Raises: DataError for a malformed file or letters or phonemes the model never saw.
        """
        if data_path is None:
            entries, source = load_splits(self.config.data)[2], "the run's test split"
        else:
            entries, source = read_cmudict(data_path, keep_stress=self.config.data.keep_stress), data_path
        batches = batch_iterator(encode_pairs(self, entries, source=source), batch_size=EXPOSURE_BATCH, shuffle=False)
        result = exposure_bias(self.model, batches, pad_id=self.phonemes.pad_id, eos_id=self.phonemes.eos_id)
        return result, source


def encode_pairs(
    system: G2PSystem, entries: Sequence[Pronunciation], *, source: str
) -> list[tuple[list[int], list[int]]]:
    """(letter ids, phoneme ids) per pronunciation, for ``batch_iterator``; the phonemes reversed for a
    ``model.target_order`` of "right_to_left".

    Raises: DataError naming ``source`` and the word if a letter or a phoneme never occurred in the training data.
    """
    pairs = []
    for letters, p in zip(system.encode_words([p.word for p in entries], source=source), entries, strict=True):
        try:
            pairs.append((letters, target_ids(system.phonemes, p.phonemes, system.config.model.target_order)))
        except UnknownSymbolError as e:
            raise DataError(f"{source}: word {p.word!r}: {e}; every phoneme must occur in the training data") from None
    return pairs
