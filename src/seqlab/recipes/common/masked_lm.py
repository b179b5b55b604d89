"""Masked language modelling over a stream of WordPiece ids: the sequences, their 80/10/10 masking (with BERT's
next-sentence pairs as an option), and their scores. Shared by the recipes that pre-train a BERT on a text
(``bert-mlm``) or on protein sequences (``protein``).

A sequence is ``[CLS]`` + a window of ``context_length - 2`` consecutive pieces + ``[SEP]`` (RoBERTa's
FULL-SENTENCES packing, Liu et al., 2019, sec. 4.2), or with NSP ``[CLS] A [SEP] B [SEP]``
(``seqlab.training.next_sentence``); the masking is ``seqlab.training.masked_lm``'s.
"""

from __future__ import annotations

from typing import Protocol

import torch

from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import DataError
from seqlab.export import OnnxModel
from seqlab.models import BertForMaskedLM, BertForPreTraining
from seqlab.models.bert import PreTrainingOutput
from seqlab.recipes.base import model_device
from seqlab.training.masked_lm import IGNORE_INDEX, MaskedTokens, mask_tokens, masked_lm_loss
from seqlab.training.next_sentence import PreTrainingBatch, pretraining_loss, sentence_pairs
from seqlab.training.objectives import LossOutput

EVAL_BATCH = 64  # sequences per forward pass when scoring
EXAMPLE_TOKENS = 24  # pieces of each test sequence shown in the report's examples


class Masking(Protocol):
    """How a recipe's sequences are built and masked (a data section with these fields)."""

    context_length: int  # tokens per sequence, [CLS] and [SEP] included (the model's positions)
    mask_prob: float  # share of the pieces selected for prediction
    nsp: bool  # sentence pairs [CLS] A [SEP] B [SEP] for next-sentence prediction


def sequences(ids: torch.Tensor, tokenizer: WordPieceTokenizer, starts: torch.Tensor, length: int) -> torch.Tensor:
    """(S, length) long: ``[CLS]`` + ids[s : s + length - 2] + ``[SEP]`` for each start s of ``starts`` (S,)."""
    window = ids[starts[:, None] + torch.arange(length - 2)]  # (S, length - 2)
    cls = window.new_full((len(starts), 1), tokenizer.cls_id)
    sep = window.new_full((len(starts), 1), tokenizer.sep_id)
    return torch.cat([cls, window, sep], dim=1)


def maskable(input_ids: torch.Tensor, tokenizer: WordPieceTokenizer) -> torch.Tensor:
    """(B, T) bool: True at the tokens that may be selected (not [PAD], [UNK], [CLS], [SEP] or [MASK])."""
    special = torch.tensor(sorted(tokenizer.special_ids), device=input_ids.device)
    return ~torch.isin(input_ids, special)


def mask(
    input_ids: torch.Tensor, tokenizer: WordPieceTokenizer, mask_prob: float, generator: torch.Generator
) -> MaskedTokens:
    """The 80/10/10 masking of ``input_ids`` (B, T) with ``generator``."""
    return mask_tokens(
        input_ids,
        maskable(input_ids, tokenizer),
        mask_id=tokenizer.mask_id,
        vocab_size=tokenizer.vocab_size,
        generator=generator,
        mask_prob=mask_prob,
    )


def window(masking: Masking) -> int:
    """Pieces of the text in one sequence: context_length less [CLS] and one [SEP], or two with NSP."""
    return masking.context_length - (3 if masking.nsp else 2)


def batch_at(
    ids: torch.Tensor, tokenizer: WordPieceTokenizer, starts: torch.Tensor, masking: Masking, generator: torch.Generator
) -> MaskedTokens | PreTrainingBatch:
    """The masked sequences whose text starts at each of ``starts`` (S,): ``[CLS]`` window ``[SEP]``, or with
    NSP a sentence pair whose segment A starts there (``seqlab.training.next_sentence``)."""
    if not masking.nsp:
        return mask(sequences(ids, tokenizer, starts, masking.context_length), tokenizer, masking.mask_prob, generator)
    pairs = sentence_pairs(
        ids, starts, masking.context_length, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, generator=generator
    )
    masked = mask(pairs.input_ids, tokenizer, masking.mask_prob, generator)
    return PreTrainingBatch(masked.input_ids, masked.labels, pairs.token_type_ids, pairs.next_sentence_labels)


def consecutive(
    ids: torch.Tensor,
    tokenizer: WordPieceTokenizer,
    masking: Masking,
    generator: torch.Generator,
    limit: int | None = None,
) -> MaskedTokens | PreTrainingBatch:
    """The masked sequences of the consecutive windows of a split (at most ``limit``), as ``batch_at``."""
    count = len(ids) // window(masking) if limit is None else min(len(ids) // window(masking), limit)
    return batch_at(ids, tokenizer, torch.arange(count) * window(masking), masking, generator)


@torch.no_grad()
def score(model: BertForMaskedLM | BertForPreTraining, batch: MaskedTokens | PreTrainingBatch) -> dict[str, float]:
    """Loss (nats per masked token), masked-token accuracy (%) and scored tokens of ``model`` on ``batch``; for a
    ``PreTrainingBatch`` also the NSP loss (nats per pair), NSP accuracy (%) and scored pairs."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    total, correct, count, nsp_total, nsp_correct, pairs = 0.0, 0, 0, 0.0, 0, 0
    for start in range(0, len(batch.input_ids), EVAL_BATCH):
        part = type(batch)(*(t[start : start + EVAL_BATCH].to(device) for t in batch))
        if not bool((part.labels != IGNORE_INDEX).any()):
            continue
        if isinstance(part, PreTrainingBatch):
            result = pretraining_loss(model, part)
            output, hits = LossOutput(result.mlm_loss, result.output.num_tokens), result.mlm_correct
            nsp_total += result.nsp_loss.item() * len(part.input_ids)
            nsp_correct += result.nsp_correct
            pairs += len(part.input_ids)
        else:
            output, hits = masked_lm_loss(model, part)
        total += output.loss.item() * output.num_tokens
        correct += hits
        count += output.num_tokens
    model.train(was_training)
    if count == 0:
        raise DataError("no token of the text was selected for prediction: the text is too short to score")
    scores = {"loss": total / count, "accuracy": 100.0 * correct / count, "tokens": float(count)}
    if pairs:
        scores |= {"nsp_loss": nsp_total / pairs, "nsp_accuracy": 100.0 * nsp_correct / pairs, "pairs": float(pairs)}
    return scores


def mlm_logits(
    model: BertForMaskedLM | BertForPreTraining | OnnxModel, input_ids: torch.Tensor, **inputs: torch.Tensor
) -> torch.Tensor:
    """(B, T, V) MLM logits of either model, or of either one's exported graph (told apart by the output type)."""
    out = model(input_ids, **inputs)
    return out.mlm_logits if isinstance(out, PreTrainingOutput) else out.logits


@torch.no_grad()
def examples(
    model: BertForMaskedLM | BertForPreTraining,
    tokenizer: WordPieceTokenizer,
    masked: MaskedTokens | PreTrainingBatch,
    count: int = 3,
) -> list[tuple[str, str, str]]:
    """(masked input, original, input with every selected position predicted) for the first ``EXAMPLE_TOKENS``
    pieces of ``count`` test sequences."""
    model.eval()
    rows = []
    for i in range(min(count, len(masked.input_ids))):
        input_ids = masked.input_ids[i : i + 1].to(model_device(model))
        selected = masked.labels[i : i + 1] != IGNORE_INDEX
        predicted = input_ids.clone()
        types = {"token_type_ids": masked.token_type_ids[i : i + 1]} if isinstance(masked, PreTrainingBatch) else {}
        predicted[selected] = mlm_logits(model, input_ids, **types)[selected].argmax(dim=-1)
        original = torch.where(selected, masked.labels[i : i + 1], masked.input_ids[i : i + 1])
        shown = (input_ids, original, predicted)
        rows.append(tuple(tokenizer.decode(ids[0, 1 : 1 + EXAMPLE_TOKENS].tolist()) for ids in shown))
    return rows
