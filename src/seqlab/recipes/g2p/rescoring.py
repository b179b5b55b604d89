"""N-best rescoring of g2p hypotheses with a second g2p model, typically one trained right to left.

A run trained with ``model.target_order = "right_to_left"`` learns the reversed pronunciations (``hello`` ->
``OW L AH HH``); ``seqlab evaluate RUN --rescore RTL_RUN --rescore-weight W`` decodes RUN's beam, scores each of
its ``decode.num_beams`` hypotheses with the right-to-left model (reversed, under teacher forcing) and re-ranks them by
(1 - W) * beam score + W * rescorer score (``seqlab.decoding.rescoring``). W = 0 returns RUN's own best. Several
rescoring runs (``--rescore RTL_1 RTL_2``, trained in one order) score as one ensemble, the mean of their per-phoneme
probabilities, as ``--ensemble`` decodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from seqlab.data.batching import collate_seq2seq
from seqlab.data.vocab import Vocabulary
from seqlab.decoding.rescoring import rerank, sequence_log_probs
from seqlab.validation import check_real

TargetOrder = Literal["left_to_right", "right_to_left"]
TARGET_ORDERS: tuple[TargetOrder, ...] = ("left_to_right", "right_to_left")
__all__ = ["TARGET_ORDERS", "TargetOrder", "rescore_nbest", "target_ids"]

Hypotheses = list[tuple[tuple[str, ...], float]]


def target_ids(phonemes: Vocabulary, pronunciation: Sequence[str], order: TargetOrder) -> list[int]:
    """The ids a model of ``order`` is trained on: the pronunciation's, reversed for "right_to_left".

    Raises: UnknownSymbolError (from the vocabulary) for a phoneme it does not hold.
    """
    ids = phonemes.encode(list(pronunciation))
    return ids[::-1] if order == "right_to_left" else ids


@torch.no_grad()
def rescore_nbest(
    nbest: Sequence[Hypotheses],
    sources: Sequence[Sequence[int]],
    rescorers: Sequence[nn.Module],
    phonemes: Vocabulary,
    *,
    order: TargetOrder,
    weight: float,
    length_penalty: float,
    batch_size: int,
) -> list[Hypotheses]:
    """Each word's hypotheses re-ranked by (1 - weight) * search score + weight * the rescorer's score.

    Args:
        nbest: per word, (phonemes, search score) pairs, best first, as the beam ranked them.
        sources: per word, its letter ids (the rescorer's source).
        rescorers: g2p models over the same letters and ``phonemes``, trained in ``order``; several score as one
            ensemble (the mean of their per-phoneme probabilities, ``sequence_log_probs``).
        phonemes: the phoneme vocabulary shared by both models.
        order: the rescorer's target order; its score is log p(reversed y | x) for "right_to_left".
        weight: w in [0, 1]; 0 returns ``nbest`` unchanged without running the rescorer.
        length_penalty: alpha of the search's normaliser: the rescorer's log p is divided by n ** alpha, n the
            hypothesis' phonemes plus EOS.
        batch_size: hypotheses scored together.
    Returns: per word, (phonemes, combined score) pairs, best first.
    Raises: ConfigError if ``weight`` is not in [0, 1].
    """
    check_real("rescore weight", weight, at_least=0.0, at_most=1.0)
    if weight == 0:
        return [list(hyps) for hyps in nbest]
    pairs = [
        (list(src), target_ids(phonemes, hyp, order))
        for src, hyps in zip(sources, nbest, strict=True)
        for hyp, _ in hyps
    ]
    scores = _normalised_log_probs(rescorers, pairs, phonemes, length_penalty=length_penalty, batch_size=batch_size)
    reranked, position = [], 0
    for hyps in nbest:
        second = scores[position : position + len(hyps)]
        position += len(hyps)
        ranked = rerank([s for _, s in hyps], second, weight=weight)
        reranked.append([(hyps[i][0], score) for i, score in zip(ranked.order, ranked.scores, strict=True)])
    return reranked


def _normalised_log_probs(
    models: Sequence[nn.Module],
    pairs: Sequence[tuple[list[int], list[int]]],
    phonemes: Vocabulary,
    *,
    length_penalty: float,
    batch_size: int,
) -> list[float]:
    """log p(target + EOS | source) / n ** length_penalty of each (source ids, target ids) pair under the ensemble
    of ``models`` (teacher-forced, in eval mode), n the target's length plus EOS; ``batch_size`` pairs at a time."""
    for model in models:
        model.eval()
    device = next(models[0].parameters()).device
    scores: list[float] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        batch = collate_seq2seq(chunk, pad_id=phonemes.pad_id, bos_id=phonemes.bos_id, eos_id=phonemes.eos_id).to(
            device
        )
        lengths = batch.tgt_lengths.to(torch.float64)
        log_probs = sequence_log_probs(models, batch, pad_id=phonemes.pad_id).double()
        scores += (log_probs / lengths**length_penalty).tolist()
    return scores
