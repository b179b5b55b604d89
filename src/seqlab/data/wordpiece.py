"""WordPiece (Schuster & Nakajima, 2012; Wu et al., 2016), BERT's tokenizer, trained and run by the ``tokenizers``
library.

BERT's pipeline (Devlin et al., 2019, sec. 3): the BERT normaliser (clean text, split CJK characters, lowercase
and strip accents when uncased), the BERT pre-tokeniser (whitespace and punctuation), then greedy longest-match-first
WordPiece with ``##`` continuation pieces and ``[UNK]`` for a word it cannot spell. The special tokens are
``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]`` and ``[MASK]``; a model input is ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B
[SEP]`` with segment ids 0 for the first part and 1 for B.

The file is the library's own ``tokenizer.json``, so a Hugging Face BERT folder's tokenizer (the shipped MiniLM's)
loads as it is; ``seqlab.data.tokenizers.load_tokenizer`` recognises it by ``"model": {"type": "WordPiece"}``.
Padding and truncation settings saved in such a file are switched off: seqlab pads batches itself and refuses
inputs longer than a model's positions rather than cutting them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, NamedTuple

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from seqlab.errors import CheckpointError, DataError
from seqlab.files import atomic_path
from seqlab.validation import check_int

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)


class BertEncoding(NamedTuple):
    """A model input: input_ids ``[CLS] A [SEP] (B [SEP])`` and token_type_ids (0 for A's part, 1 for B's)."""

    input_ids: list[int]
    token_type_ids: list[int]


class WordPieceTokenizer:
    """BERT's WordPiece tokenizer (module docstring), with the ``seqlab.data.tokenizers`` surface.

    ``encode`` gives the pieces of a text without special tokens (as the other tokenizers do);
    ``encode_with_special_tokens`` gives a model input. ``eos_id`` is None: BERT has no end-of-text token.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` with a WordPiece model and the five special tokens (what ``train``
            makes, or a Hugging Face BERT ``tokenizer.json``).
    Raises:
        CheckpointError: if the model is not WordPiece or a special token is missing (named).
    """

    kind: ClassVar[str] = "wordpiece"

    def __init__(self, tokenizer: HFTokenizer) -> None:
        model_type = json.loads(tokenizer.to_str())["model"].get("type")
        if model_type != "WordPiece":
            raise CheckpointError(f"expected a WordPiece tokenizer, got a {model_type} model")
        missing = [token for token in SPECIAL_TOKENS if tokenizer.token_to_id(token) is None]
        if missing:
            raise CheckpointError(f"the WordPiece tokenizer has no {', '.join(missing)} token")
        tokenizer = HFTokenizer.from_str(tokenizer.to_str())  # a copy: the caller's keeps its settings
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (ids[t] for t in SPECIAL_TOKENS)
        self.special_ids: frozenset[int] = frozenset(ids.values())

    @classmethod
    def train(cls, texts: str | Iterable[str], *, vocab_size: int = 8000, lowercase: bool = True) -> WordPieceTokenizer:
        """Learn a WordPiece vocabulary of ``vocab_size`` pieces from ``texts`` (BERT's normaliser and
        pre-tokeniser; the five special tokens get ids 0-4).

        Args:
            texts: training text, or an iterable of texts (documents or lines).
            vocab_size: V, counting the special tokens and the single characters; it may end smaller when the
                text offers fewer pieces.
            lowercase: uncased (lowercase, strip accents) as bert-base-uncased, or cased.
        Raises:
            ConfigError: if vocab_size < 16 (the message shows the value).
        """
        check_int("vocab_size", vocab_size, minimum=16)
        tokenizer = HFTokenizer(models.WordPiece(unk_token=UNK))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False
        )
        tokenizer.train_from_iterator([texts] if isinstance(texts, str) else texts, trainer=trainer)
        cls_id, sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{CLS}:0 $A:0 {SEP}:0",
            pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
            special_tokens=[(CLS, cls_id), (SEP, sep_id)],
        )
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_id(self) -> None:
        return None

    def encode(self, text: str) -> list[int]:
        """Ids of the pieces of ``text``, without special tokens."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_with_special_tokens(self, text: str, pair: str | None = None) -> BertEncoding:
        """The model input of ``text`` (and ``pair``): ``[CLS] A [SEP] (B [SEP])`` with its segment ids."""
        encoding = self.tokenizer.encode(text, pair)
        return BertEncoding(encoding.ids, encoding.type_ids)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (``##`` pieces joined to their word; special tokens written out).

        Raises: DataError if an id is outside [0, V).
        """
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise DataError(f"token ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size})")
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the library's ``tokenizer.json`` (``path`` is the file, or a directory to hold it)."""
        file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
        with atomic_path(file) as temporary:
            self.tokenizer.save(str(temporary))
        return file

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordPieceTokenizer) and self.tokenizer.to_str() == other.tokenizer.to_str()

    def __hash__(self) -> int:
        return hash(self.tokenizer.to_str())

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={self.vocab_size})"
