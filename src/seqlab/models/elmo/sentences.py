"""Sentence embeddings from an ELMo biLM: the ScalarMix of its layers, averaged over a sentence's real tokens.

    ELMo_t = gamma * sum_j softmax(w)_j R_{t,j}          (Peters et al., 2018, eq. 1), R_{t,j} (2H,) per layer j
    e = (1 / n) sum_{t real} ELMo_t                      (B, 2H), BOS and EOS included, pads not; not normalised

A checkpoint is a ``classify`` run of ``model.arch=elmo`` (an ``ELMoClassifier``: its biLM and the mix it learned
for the task) or a saved ``ELMo`` (equal weights softmax(0) = 1 / (L + 1) and gamma = 1, the average of the
layers); either with the character vocabulary ``vocab.json`` it was trained with. A sentence is read as BOS, its
characters, EOS, as the classify recipe reads a text.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from seqlab.data.vocab import Vocabulary
from seqlab.errors import CheckpointError, DataError, UnknownSymbolError
from seqlab.models.elmo.bilm import ELMo
from seqlab.models.elmo.classifier import ELMoClassifier
from seqlab.models.pretrained import load_pretrained
from seqlab.nn.scalar_mix import ScalarMix

VOCAB_FILE = "vocab.json"
ELMO_MODEL_TYPES = (ELMo.model_type, ELMoClassifier.model_type)


def load_elmo_encoder(directory: Path) -> tuple[ELMo, ScalarMix, Vocabulary]:
    """The biLM, the mix and the character vocabulary of ``directory`` (module docstring); eval mode.

    Raises: CheckpointError (one line) if the directory holds no ELMo model or lacks ``vocab.json``.
    """
    model = load_pretrained(directory)
    if isinstance(model, ELMoClassifier):
        elmo, mix = model.elmo, model.mix
    elif isinstance(model, ELMo):
        elmo, mix = model, ScalarMix(model.config.num_layers + 1)
    else:
        raise CheckpointError(f"{directory}: holds a {model.model_type!r} model, not an ELMo")
    path = directory / VOCAB_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; an ELMo checkpoint needs the character vocabulary it was trained on")
    return elmo.eval(), mix.eval(), Vocabulary.load(path)


@torch.inference_mode()
def embed_sentences_elmo(
    elmo: ELMo,
    mix: ScalarMix,
    vocab: Vocabulary,
    sentences: Sequence[str],
    *,
    batch_size: int = 32,
    source: str = "input",
) -> Tensor:
    """(N, 2H) float32 mean-over-tokens ELMo embeddings of N sentences (module docstring).

    Raises: DataError naming ``source`` and the line (1-based) of an empty sentence or one with a character the
        vocabulary lacks.
    """
    encoded = []
    for line, sentence in enumerate(sentences, start=1):
        if not sentence.strip():
            raise DataError(f"{source}:{line}: empty line; give one sentence per line")
        try:
            encoded.append(vocab.encode(sentence, add_bos=True, add_eos=True))
        except UnknownSymbolError as e:
            raise DataError(f"{source}:{line}: {e}") from None
    device = elmo.embedding.weight.device
    parts = []
    for start in range(0, len(encoded), batch_size):
        batch = encoded[start : start + batch_size]
        lengths = torch.tensor([len(ids) for ids in batch])  # (B,)
        input_ids = torch.full((len(batch), int(lengths.max())), vocab.pad_id, dtype=torch.long)
        for b, ids in enumerate(batch):
            input_ids[b, : len(ids)] = torch.tensor(ids)
        keep_mask = torch.arange(input_ids.shape[1]) < lengths[:, None]  # (B, T)
        layers = elmo.elmo_representations(input_ids.to(device), keep_mask.to(device)).layers  # (L+1, B, T, 2H)
        mixed = mix(layers) * keep_mask.to(device).unsqueeze(-1)  # (B, T, 2H)
        parts.append((mixed.sum(dim=1) / lengths.to(device).unsqueeze(-1)).float().cpu())
    return torch.cat(parts) if parts else torch.zeros(0, 2 * elmo.config.hidden_size)
