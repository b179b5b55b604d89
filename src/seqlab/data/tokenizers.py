"""Tokenizers for language models: characters, words (the PTB convention) and byte-level BPE.

Every tokenizer has the same small surface: ``encode(text) -> list[int]``, ``decode(ids) -> str``,
``vocab_size`` (V), ``eos_id`` and ``pad_id`` (None where the scheme has no such symbol), ``kind`` and
``save(path)``, which writes one ``tokenizer.json``. ``load_tokenizer(path)`` reads it back as the right class.

- ``CharTokenizer``: one id per character seen in the training text, ids in code-point order (as nanoGPT's
  ``shakespeare_char``). Exact round trip of any text made of seen characters; no EOS or padding symbol.
- ``WordTokenizer``: the Penn Treebank convention of the RNN language-model literature (Mikolov et al., 2010;
  Zaremba et al., 2014): words are split on whitespace, words seen fewer than ``min_count`` times (or beyond the
  ``max_size`` most frequent) become ``<unk>``, and ``<eos>`` ends every line. Decoding joins words with single
  spaces and turns ``<eos>`` into a newline, so text already in that form (one space between words, no trailing
  spaces) round-trips; other whitespace does not.
- ``BPETokenizer``: byte-level BPE (Radford et al., 2019; Sennrich et al., 2016), trained and run by the Hugging Face
  ``tokenizers`` library. Bytes, not characters, are the base alphabet, so any text round-trips exactly. The special
  ``<|endoftext|>`` is the EOS. Its file is the library's own ``tokenizer.json``, so a GPT-2 ``tokenizer.json`` loads.

File format: char and word tokenizers write ``{"seqlab_tokenizer": "char" | "word", ...}``; a BPE tokenizer writes
the ``tokenizers`` JSON as-is, recognised by its ``"model": {"type": "BPE"}``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import ClassVar, Protocol

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from seqlab.data.files import read_json_file
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, DataError
from seqlab.files import atomic_path, atomic_write
from seqlab.validation import check_int

TOKENIZER_FILE = "tokenizer.json"
KIND_KEY = "seqlab_tokenizer"


class Tokenizer(Protocol):
    """What language-model code needs from a tokenizer (module docstring)."""

    kind: ClassVar[str]

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_id(self) -> int | None: ...

    @property
    def pad_id(self) -> int | None: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def save(self, path: str | os.PathLike[str]) -> Path: ...


def tokenizer_file(path: str | os.PathLike[str]) -> Path:
    """``path`` itself, or ``path/tokenizer.json`` when ``path`` is an existing directory (a checkpoint)."""
    path = Path(path)
    return path / TOKENIZER_FILE if path.is_dir() else path


def _write_json(path: str | os.PathLike[str], payload: dict) -> Path:
    file = tokenizer_file(path)
    atomic_write(file, json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
    return file


def _check_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    ids = [int(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise DataError(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab_size})")
    return ids


class CharTokenizer:
    """One id per character, ids in code-point order of the characters of the training text.

    Build it from the whole corpus, all splits joined, as nanoGPT's ``shakespeare_char`` does: a character that
    only the held-out text has could not be encoded otherwise (the default corpus's test split has ``[`` and
    ``]``, its train split none).

    Args:
        chars: the distinct characters, in id order (``CharTokenizer.train`` sorts them).
    Raises:
        DataError: if a character is repeated or is not a single character, or there are none.
    """

    kind: ClassVar[str] = "char"

    def __init__(self, chars: Sequence[str]) -> None:
        if len(chars) == 0:
            raise DataError("a character tokenizer needs at least one character")
        self.chars: tuple[str, ...] = tuple(chars)
        self._ids = {ch: i for i, ch in enumerate(self.chars)}
        if len(self._ids) != len(self.chars) or any(not isinstance(c, str) or len(c) != 1 for c in self.chars):
            raise DataError(f"characters must be distinct single characters, got {list(self.chars)[:20]!r}")

    @classmethod
    def train(cls, text: str) -> CharTokenizer:
        """The tokenizer of every character in ``text``. Raises: DataError if ``text`` is empty."""
        if not text:
            raise DataError("cannot build a character tokenizer from empty text")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def eos_id(self) -> None:
        return None

    @property
    def pad_id(self) -> None:
        return None

    def encode(self, text: str) -> list[int]:
        """Ids of the characters of ``text``.

        Raises: DataError listing every unseen character once, in order of appearance
            (``text has characters the model never saw: 'é' 'ß'``).
        """
        try:
            return [self._ids[ch] for ch in text]
        except KeyError:
            unseen = dict.fromkeys(ch for ch in text if ch not in self._ids)
            listing = " ".join(repr(ch) for ch in unseen)
            raise DataError(f"text has characters the model never saw: {listing}") from None

    def decode(self, ids: Iterable[int]) -> str:
        """The characters of ``ids``. Raises: DataError if an id is outside [0, V)."""
        return "".join(self.chars[i] for i in _check_ids(ids, self.vocab_size))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``tokenizer.json`` (``path`` is the file, or a directory to hold it); returns the file."""
        return _write_json(path, {KIND_KEY: self.kind, "chars": "".join(self.chars)})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self.chars == other.chars

    def __hash__(self) -> int:
        return hash(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class WordTokenizer:
    """Whitespace-separated words with ``<unk>`` for rare or unseen words and ``<eos>`` after every line (PTB).

    Ids: ``<unk>`` = 0, ``<eos>`` = 1, then the words by decreasing count (ties alphabetically).

    Args:
        words: the ordinary words in id order (``WordTokenizer.train`` chooses them).
    Raises:
        DataError: if a word is repeated, empty, contains whitespace, or is a special symbol.
    """

    kind: ClassVar[str] = "word"
    UNK = "<unk>"
    EOS = "<eos>"

    def __init__(self, words: Sequence[str]) -> None:
        self.words: tuple[str, ...] = (self.UNK, self.EOS, *words)
        self._ids = {word: i for i, word in enumerate(self.words)}
        if len(self._ids) != len(self.words):
            repeated = [w for w, n in Counter(self.words).items() if n > 1]
            raise DataError(f"words appear twice in the vocabulary: {repeated[:10]!r}")
        bad = [w for w in words if not isinstance(w, str) or not w or len(w.split()) != 1 or w != w.strip()]
        if bad:
            raise DataError(f"words must be non-empty and free of whitespace, got {bad[:10]!r}")

    @classmethod
    def train(cls, text: str, *, min_count: int = 1, max_size: int | None = None) -> WordTokenizer:
        """The vocabulary of ``text``: words seen at least ``min_count`` times, the most frequent first.

        Args:
            text: training text; words are its whitespace-separated pieces.
            min_count: words seen fewer times map to ``<unk>``.
            max_size: at most this many ids in all (V, counting ``<unk>`` and ``<eos>``); None for no limit.
        Raises:
            ConfigError: if min_count < 1 or max_size < 3 (messages show the value).
            DataError: if ``text`` has no words.
        """
        check_int("min_count", min_count, minimum=1)
        check_int("max_size", max_size, minimum=3, optional=True)
        counts = Counter(text.split())
        if not counts:
            raise DataError("cannot build a word tokenizer from text without words")
        for special in (cls.UNK, cls.EOS):
            counts.pop(special, None)
        ranked = sorted((word for word, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
        if max_size is not None:
            ranked = ranked[: max_size - 2]
        return cls(ranked)

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    @property
    def unk_id(self) -> int:
        return 0

    @property
    def eos_id(self) -> int:
        return 1

    @property
    def pad_id(self) -> None:
        return None

    def encode(self, text: str) -> list[int]:
        """Ids of the words of every line of ``text``, each line followed by ``<eos>``.

        Lines are separated by ``\\n``; a final newline does not start an extra (empty) line, and an empty line
        is a lone ``<eos>``. Unknown words (and a literal ``<unk>``) become ``<unk>``.
        """
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        ids: list[int] = []
        for line in lines:
            ids.extend(self._ids.get(word, self.unk_id) for word in line.split())
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Words joined by single spaces, ``<eos>`` as a newline. Raises: DataError if an id is outside [0, V)."""
        pieces: list[str] = []
        after_word = False
        for i in _check_ids(ids, self.vocab_size):
            if i == self.eos_id:
                pieces.append("\n")
                after_word = False
            else:
                pieces.append(f" {self.words[i]}" if after_word else self.words[i])
                after_word = True
        return "".join(pieces)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``tokenizer.json`` (``path`` is the file, or a directory to hold it); returns the file."""
        return _write_json(path, {KIND_KEY: self.kind, "words": list(self.words[2:])})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordTokenizer) and self.words == other.words

    def __hash__(self) -> int:
        return hash(self.words)

    def __repr__(self) -> str:
        return f"WordTokenizer(vocab_size={self.vocab_size})"


class BPETokenizer:
    """Byte-level BPE run by the ``tokenizers`` library; ``<|endoftext|>`` is the EOS, there is no padding.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` with a BPE model and ``<|endoftext|>`` in its vocabulary (what
            ``BPETokenizer.train`` makes, or a GPT-2 ``tokenizer.json``).
    Raises:
        CheckpointError: if the model is not BPE or ``<|endoftext|>`` is missing.
    """

    kind: ClassVar[str] = "bpe"
    EOS = "<|endoftext|>"

    def __init__(self, tokenizer: HFTokenizer) -> None:
        model_type = json.loads(tokenizer.to_str())["model"].get("type")
        if model_type != "BPE":
            raise CheckpointError(f"expected a BPE tokenizer, got a {model_type} model")
        eos_id = tokenizer.token_to_id(self.EOS)
        if eos_id is None:
            raise CheckpointError(f"the BPE tokenizer has no {self.EOS} token")
        self.tokenizer = tokenizer
        self._eos_id = eos_id

    @classmethod
    def train(cls, texts: str | Iterable[str], *, vocab_size: int = 1024, min_frequency: int = 2) -> BPETokenizer:
        """Learn byte-level BPE merges from ``texts`` until the vocabulary has ``vocab_size`` ids.

        Args:
            texts: training text, or an iterable of texts (documents or lines).
            vocab_size: V, counting the 256 byte symbols and ``<|endoftext|>``; it may end smaller when the text
                offers fewer merges.
            min_frequency: a pair seen fewer times is never merged.
        Raises:
            ConfigError: if vocab_size < 257 or min_frequency < 1 (messages show the value).
        """
        check_int("vocab_size", vocab_size, minimum=257)
        check_int("min_frequency", min_frequency, minimum=1)
        tokenizer = HFTokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[cls.EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator([texts] if isinstance(texts, str) else texts, trainer=trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_id(self) -> int:
        return self._eos_id

    @property
    def pad_id(self) -> None:
        return None

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; a literal ``<|endoftext|>`` in it becomes the EOS id (as in GPT-2)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, EOS written as ``<|endoftext|>``. Raises: DataError if an id is outside [0, V)."""
        return self.tokenizer.decode(_check_ids(ids, self.vocab_size), skip_special_tokens=False)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the library's ``tokenizer.json`` (``path`` is the file, or a directory to hold it)."""
        file = tokenizer_file(path)
        with atomic_path(file) as temporary:
            self.tokenizer.save(str(temporary))
        return file

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BPETokenizer) and self.tokenizer.to_str() == other.tokenizer.to_str()

    def __hash__(self) -> int:
        return hash(self.tokenizer.to_str())

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"


def load_tokenizer(path: str | os.PathLike[str]) -> CharTokenizer | WordTokenizer | BPETokenizer | WordPieceTokenizer:
    """Read a tokenizer written by ``save`` (or a ``tokenizers`` BPE file such as GPT-2's, or a WordPiece file such
    as a BERT folder's, ``seqlab.data.wordpiece``) as the right class.

    Args:
        path: the ``tokenizer.json`` file, or the directory (checkpoint) that holds it.
    Raises:
        CheckpointError: one line naming the file if it is missing, not JSON, or not a tokenizer seqlab knows.
    """
    file = tokenizer_file(path)
    payload = read_json_file(file, error=CheckpointError, missing="no such tokenizer file")
    text = json.dumps(payload)  # what the tokenizers library parses
    if not isinstance(payload, dict):
        raise CheckpointError(f"{file}: not a tokenizer file (expected a JSON object)")
    kind = payload.get(KIND_KEY)
    try:
        if kind == CharTokenizer.kind and isinstance(payload.get("chars"), str):
            return CharTokenizer(list(payload["chars"]))
        if kind == WordTokenizer.kind and isinstance(payload.get("words"), list):
            return WordTokenizer(payload["words"])
        if kind is None and isinstance(payload.get("model"), dict) and payload["model"].get("type") == "BPE":
            return BPETokenizer(HFTokenizer.from_str(text))
        if kind is None and isinstance(payload.get("model"), dict) and payload["model"].get("type") == "WordPiece":
            return WordPieceTokenizer(HFTokenizer.from_str(text))
    except (DataError, CheckpointError) as error:
        raise CheckpointError(f"{file}: {error}") from None
    except Exception as error:  # the tokenizers library raises a bare Exception for a malformed file
        raise CheckpointError(f"{file}: not a valid tokenizers file ({error})") from None
    raise CheckpointError(f"{file}: not a seqlab tokenizer (expected a char, word, BPE or WordPiece tokenizer.json)")
