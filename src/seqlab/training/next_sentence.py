"""Next-sentence prediction (Devlin et al., 2019, sec. 3.1 "Task #2" and appendix A.2), trained beside MLM.

A pre-training input is ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``.
With probability 1/2, B is the segment of the text that follows A (IsNext, label 0); otherwise B is a segment of
the same length starting anywhere else in the text, uniformly over every start but the true continuation's
(NotNext, label 1; Hugging Face's label order). Segments here are windows of a stream of pieces (A gets
``(T - 3) // 2`` pieces, B the rest), not sentences: the recipe's text is one stream, as for MLM.

The objective is the sum of the two mean cross-entropies, as Hugging Face's ``BertForPreTraining`` computes it:

    loss = -(1 / M) sum_{selected t} log p(x_t | x_masked)  -  (1 / B) sum_b log p(y_b | A_b, B_b)     (nats)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.training.masked_lm import IGNORE_INDEX
from seqlab.training.objectives import LossOutput

IS_NEXT, NOT_NEXT = 0, 1


class SentencePairs(NamedTuple):
    """input_ids (S, T) long ``[CLS] A [SEP] B [SEP]``; token_type_ids (S, T) long, 0 then 1;
    next_sentence_labels (S,) long, IS_NEXT (0) or NOT_NEXT (1)."""

    input_ids: Tensor
    token_type_ids: Tensor
    next_sentence_labels: Tensor


class PreTrainingBatch(NamedTuple):
    """A masked ``SentencePairs``: input_ids (B, T) with the selected tokens replaced, labels (B, T) the original
    token at the selected positions and ``IGNORE_INDEX`` elsewhere (as ``MaskedTokens``), token_type_ids (B, T),
    next_sentence_labels (B,)."""

    input_ids: Tensor
    labels: Tensor
    token_type_ids: Tensor
    next_sentence_labels: Tensor


class PreTrainingLoss(NamedTuple):
    """output: LossOutput(MLM + NSP loss in nats, M selected tokens); mlm_loss, nsp_loss: the two terms (nats per
    selected token, nats per pair); mlm_correct of the M selected tokens and nsp_correct of the B pairs that the
    argmax predicts."""

    output: LossOutput
    mlm_loss: Tensor
    nsp_loss: Tensor
    mlm_correct: int
    nsp_correct: int


def sentence_pairs(
    ids: Tensor, starts: Tensor, length: int, *, cls_id: int, sep_id: int, generator: torch.Generator
) -> SentencePairs:
    """The pairs whose segment A starts at each of ``starts`` (S,) in the stream ``ids`` (N,) (module docstring).

    Args:
        ids: (N,) long, the text's pieces.
        starts: (S,) long, each at most N - (length - 3).
        length: T, tokens per pair with [CLS] and both [SEP]; at least 5 (one piece in each segment).
        cls_id, sep_id: the special tokens.
        generator: draws which pairs are IsNext and where NotNext segments start.
    Raises: ValueError if length < 5, a start leaves no room for A and B, or the stream is too short to hold a
        NotNext segment elsewhere.
    """
    if length < 5:
        raise ValueError(f"a sentence pair needs length >= 5 ([CLS] A [SEP] B [SEP]), got {length}")
    a = (length - 3) // 2
    b = length - 3 - a
    N, S = len(ids), len(starts)
    if N - b < 1 or (S and int(starts.max()) > N - a - b):
        raise ValueError(f"a stream of {N} pieces has no room for pairs of {a} + {b} pieces at these starts")
    labels = (torch.rand(S, generator=generator) < 0.5).long() * NOT_NEXT  # (S,) half IsNext, half NotNext
    following = starts + a  # (S,)
    other = torch.randint(0, N - b, (S,), generator=generator)  # every start of B in [0, N - b] but `following`
    other = other + (other >= following).long()
    b_starts = torch.where(labels == IS_NEXT, following, other)
    segment_a = ids[starts[:, None] + torch.arange(a)]  # (S, a)
    segment_b = ids[b_starts[:, None] + torch.arange(b)]  # (S, b)
    cls = ids.new_full((S, 1), cls_id)
    sep = ids.new_full((S, 1), sep_id)
    input_ids = torch.cat([cls, segment_a, sep, segment_b, sep], dim=1)  # (S, T)
    token_type_ids = torch.cat([torch.zeros(S, a + 2), torch.ones(S, b + 1)], dim=1).long()
    return SentencePairs(input_ids, token_type_ids, labels)


def pretraining_loss(model: nn.Module, batch: PreTrainingBatch) -> PreTrainingLoss:
    """MLM + NSP cross-entropy of ``model`` on ``batch`` (module docstring).

    Args:
        model: called as ``model(input_ids, token_type_ids=...)``, returning ``mlm_logits`` (B, T, V) and
            ``nsp_logits`` (B, 2) (a ``BertForPreTraining``).
        batch: a ``PreTrainingBatch``.
    Raises: ValueError if no position is selected for MLM (nothing to score).
    """
    selected = batch.labels != IGNORE_INDEX  # (B, T)
    count = int(selected.sum())
    if count == 0:
        raise ValueError("no token is selected for prediction: nothing to score")
    out = model(batch.input_ids, token_type_ids=batch.token_type_ids)
    chosen = out.mlm_logits[selected]  # (M, V)
    targets = batch.labels[selected]  # (M,)
    mlm = F.cross_entropy(chosen, targets)
    nsp = F.cross_entropy(out.nsp_logits, batch.next_sentence_labels)
    mlm_correct = int((chosen.argmax(dim=-1) == targets).sum())
    nsp_correct = int((out.nsp_logits.argmax(dim=-1) == batch.next_sentence_labels).sum())
    return PreTrainingLoss(LossOutput(mlm + nsp, count), mlm, nsp, mlm_correct, nsp_correct)
