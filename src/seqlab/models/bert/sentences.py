"""Sentence embeddings from a BERT: load an encoder with its WordPiece tokenizer from a seqlab checkpoint or a
Hugging Face folder, and embed sentences as mean-pooled, L2-normalised last hidden states (the sentence-transformers
recipe, Reimers & Gurevych, 2019, sec. 3, MEAN strategy), in right-padded batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from seqlab.data.files import read_json_file
from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, DataError
from seqlab.models.bert.heads import BertTaskModel
from seqlab.models.bert.model import Bert
from seqlab.models.pretrained import CONFIG_FILE, load_pretrained


def load_encoder(directory: Path) -> tuple[Bert, WordPieceTokenizer]:
    """The BERT body and tokenizer of ``directory``: a seqlab checkpoint of any BERT model (``bert-mlm`` run
    directories included) or a Hugging Face BERT folder (config.json, model.safetensors, tokenizer.json); eval mode.

    Raises: CheckpointError (one line) if the directory or a file is missing, it holds another architecture, or its
        tokenizer is not WordPiece.
    """
    missing = f"missing; is {directory} a BERT checkpoint?"
    payload = read_json_file(directory / CONFIG_FILE, error=CheckpointError, missing=missing)
    if isinstance(payload, dict) and isinstance(payload.get("config"), dict):  # seqlab's layout
        model = load_pretrained(directory)
        model = model.bert if isinstance(model, BertTaskModel) else model
        if not isinstance(model, Bert):
            raise CheckpointError(f"{directory}: holds a {payload.get('model_type')!r} model, not a BERT")
    else:
        model = Bert.from_hf(directory)
    tokenizer = load_tokenizer(directory)
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise CheckpointError(f"{directory}: its tokenizer is {tokenizer.kind}, a BERT needs WordPiece")
    return model.eval(), tokenizer


@torch.inference_mode()
def embed_sentences(
    model: Bert, tokenizer: WordPieceTokenizer, sentences: Sequence[str], *, batch_size: int = 32, source: str = "input"
) -> Tensor:
    """(N, D) float32 mean-pooled, L2-normalised embeddings of N sentences, each read as ``[CLS] s [SEP]``.

    Raises: DataError naming ``source`` and the line (1-based) of an empty sentence or one longer than the model's
        positions (no truncation: an embedding of part of a sentence would pass for the whole).
    """
    encoded = []
    for line, sentence in enumerate(sentences, start=1):
        if not sentence.strip():
            raise DataError(f"{source}:{line}: empty line; give one sentence per line")
        ids = tokenizer.encode_with_special_tokens(sentence).input_ids
        if len(ids) > model.config.max_positions:
            raise DataError(
                f"{source}:{line}: {len(ids)} tokens, more than the model's {model.config.max_positions} positions"
            )
        encoded.append(ids)
    device = model.word_embeddings.weight.device
    parts = []
    for start in range(0, len(encoded), batch_size):
        batch = encoded[start : start + batch_size]
        T = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), T), tokenizer.pad_id, dtype=torch.long)
        for b, ids in enumerate(batch):
            input_ids[b, : len(ids)] = torch.tensor(ids)
        keep_mask = torch.arange(T)[None, :] < torch.tensor([len(ids) for ids in batch])[:, None]  # (B, T)
        parts.append(model.sentence_embeddings(input_ids.to(device), keep_mask=keep_mask.to(device)).float().cpu())
    return torch.cat(parts) if parts else torch.zeros(0, model.config.d_model)
