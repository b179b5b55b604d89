"""N-best rescoring: re-rank a search's hypotheses by combining its scores with a second model's log-probabilities.

score(y) = (1 - w) * s_search(y) + w * s_second(y), w in [0, 1], where s_search is the first search's ranking
score and s_second the second model's log p(y | x) under the same length normalisation (log p / n ** alpha, n the
hypothesis' tokens with EOS, as ``beam_search`` ranks). The classic second model reads the target right to left:
it commits to the end of a sequence first, so it penalises hypotheses whose ending the left-to-right beam chose
with too little evidence (Liu et al. 2016, "Agreement on Target-bidirectional Neural Machine Translation";
Sennrich et al. 2016, "Edinburgh Neural Machine Translation Systems for WMT 16", section 3.1). With w = 0 the
search's order is kept exactly: the sort is stable and the second model's scores are not even needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from seqlab.data.batching import Seq2SeqBatch
from seqlab.validation import check_real

__all__ = ["Reranked", "rerank", "sequence_log_probs"]


class Reranked(NamedTuple):
    """order: indices into the n-best, best first; scores: their combined scores, in that order."""

    order: list[int]
    scores: list[float]


@torch.no_grad()
def sequence_log_probs(models: nn.Module | Sequence[nn.Module], batch: Seq2SeqBatch, *, pad_id: int = 0) -> Tensor:
    """log p(y | x) = sum_t log p(y_t | y_<t, x) of each row's target, EOS included, under teacher forcing (nats).

    Args:
        models: a model, or N >= 1 models over the same target vocabulary scored as one ensemble whose
            p(y_t | y_<t, x) is the mean of theirs (as ``EnsembleStepModel``'s "mean" decodes). Each is called as
            ``model(src, src_lengths, tgt_in)``, returning an object with ``logits`` (B, T, V); put them in eval
            mode first for deterministic scores.
        batch: Seq2SeqBatch (``collate_seq2seq``); tgt_out = y + [EOS], padded with ``pad_id``.
        pad_id: target positions equal to it add nothing.
    Returns: (B,) float, the log-probability of each row's whole target.
    Raises: ValueError for an empty sequence of models; nothing else beyond what the models raise for malformed
        inputs.
    """
    members = [models] if isinstance(models, nn.Module) else list(models)
    if not members:
        raise ValueError("sequence_log_probs needs at least one model")
    picked = []
    for model in members:
        logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
        log_probs = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)  # fp16 -> fp32
        picked.append(log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1))  # (B, T)
    token = torch.logsumexp(torch.stack(picked), dim=0) - math.log(len(members))  # log of the mean probability
    return token.masked_fill(batch.tgt_out == pad_id, 0.0).sum(dim=1)


def rerank(search_scores: Sequence[float], second_scores: Sequence[float] | None, *, weight: float) -> Reranked:
    """The n-best re-ordered by (1 - weight) * search score + weight * second score, best first (module docstring).

    Args:
        search_scores: N scores of the first search, in its order.
        second_scores: the second model's N scores of the same hypotheses; may be None when ``weight`` is 0.
        weight: w in [0, 1]; 0 keeps the search's order and scores exactly.
    Returns: Reranked(order, scores); ties keep the search's order, and -inf search scores (slots the search
        could not fill) stay -inf.
    Raises:
        ConfigError: (a ValueError) ``weight`` is not in [0, 1].
        ValueError: ``second_scores`` is missing while ``weight`` > 0, or has another length than ``search_scores``.
    """
    check_real("rescore weight", weight, at_least=0.0, at_most=1.0)
    if weight == 0:
        return Reranked(list(range(len(search_scores))), [float(s) for s in search_scores])
    if second_scores is None or len(second_scores) != len(search_scores):
        got = None if second_scores is None else len(second_scores)
        raise ValueError(f"need {len(search_scores)} second scores for weight {weight}, got {got}")
    # a slot the search could not fill (-inf) stays last, even at weight 1 where 0 * -inf would be NaN
    pairs = zip(search_scores, second_scores, strict=True)
    combined = [a if a == -math.inf else (1 - weight) * a + weight * b for a, b in pairs]
    order = sorted(range(len(combined)), key=lambda i: -combined[i])
    return Reranked(order, [combined[i] for i in order])
