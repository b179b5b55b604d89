"""A symbol vocabulary (letters, phonemes, tokens) with padding, begin- and end-of-sequence symbols.

Ids are fixed: ``<pad>`` = 0, ``<s>`` (BOS) = 1, ``</s>`` (EOS) = 2, then the ordinary symbols. The vocabulary
is saved as a small JSON file ``{"symbols": ["<pad>", "<s>", "</s>", ...]}`` listing every symbol in id order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from seqlab.data.files import read_json_file
from seqlab.errors import CheckpointError, UnknownSymbolError
from seqlab.files import atomic_write


class Vocabulary:
    """Maps symbols to ids and back; the special symbols come first (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2).

    Args:
        symbols: the ordinary symbols in id order; they get ids 3, 4, ...
    Raises:
        ValueError: if a symbol is not a non-empty string, is repeated, or is one of the special symbols.
    """

    PAD = "<pad>"
    BOS = "<s>"
    EOS = "</s>"
    SPECIALS = (PAD, BOS, EOS)

    def __init__(self, symbols: Iterable[str]) -> None:
        self._symbols: tuple[str, ...] = (*self.SPECIALS, *symbols)
        self._ids: dict[str, int] = {}
        for index, symbol in enumerate(self._symbols):
            if not isinstance(symbol, str) or not symbol:
                raise ValueError(f"symbol {symbol!r} must be a non-empty string")
            if symbol in self._ids:
                raise ValueError(f"symbol {symbol!r} appears twice (ids {self._ids[symbol]} and {index})")
            self._ids[symbol] = index

    @classmethod
    def build(cls, sequences: Iterable[Iterable[str]]) -> Vocabulary:
        """Vocabulary of every symbol in ``sequences``, sorted so the ids do not depend on the data's order.

        Special symbols that occur in the data are not added twice.
        """
        seen = {symbol for sequence in sequences for symbol in sequence}
        return cls(sorted(seen.difference(cls.SPECIALS)))

    @property
    def pad_id(self) -> int:
        return self._ids[self.PAD]

    @property
    def bos_id(self) -> int:
        return self._ids[self.BOS]

    @property
    def eos_id(self) -> int:
        return self._ids[self.EOS]

    @property
    def symbols(self) -> tuple[str, ...]:
        """All symbols in id order, specials included: ``symbols[i]`` has id ``i``."""
        return self._symbols

    def __len__(self) -> int:
        return len(self._symbols)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self._ids

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._symbols == other._symbols

    def __repr__(self) -> str:
        shown = " ".join(self._symbols[:12]) + (" ..." if len(self) > 12 else "")
        return f"Vocabulary({len(self)} symbols: {shown})"

    def encode(self, symbols: Iterable[str], *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Ids of ``symbols``, optionally wrapped in BOS ... EOS.

        Raises:
            UnknownSymbolError: ``unknown symbol 'ß' (not in the vocabulary of N symbols)``; callers add
                context such as the word or file line.
        """
        ids = [self.bos_id] if add_bos else []
        for symbol in symbols:
            index = self._ids.get(symbol)
            if index is None:
                raise UnknownSymbolError(f"unknown symbol {symbol!r} (not in the vocabulary of {len(self)} symbols)")
            ids.append(index)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int], *, strip_special: bool = True) -> list[str]:
        """Symbols of ``ids`` (ints or a 1-D tensor).

        With ``strip_special`` (the default) decoding stops at the first EOS, which is dropped with everything
        after it: a search's output row (``SearchOutput.tokens``, which holds no start token and is padded with
        EOS) becomes the predicted sequence. PAD and BOS before that EOS are kept as ``<pad>`` and ``<s>``:
        a model that emits them has made an error, and a reference never contains them, so they count as
        errors in the phoneme and word error rates instead of vanishing. Otherwise every id is mapped, EOS
        and what follows included.

        Raises:
            ValueError: if an id is outside [0, len(self)).
        """
        decoded = []
        for index in ids:
            index = int(index)
            if not 0 <= index < len(self._symbols):
                raise ValueError(f"id {index} is out of range for a vocabulary of {len(self)} symbols")
            if strip_special and index == self.eos_id:
                break
            decoded.append(self._symbols[index])
        return decoded

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``{"symbols": [...]}`` (every symbol in id order) as UTF-8 JSON to ``path``."""
        atomic_write(path, json.dumps({"symbols": list(self._symbols)}, ensure_ascii=False, indent=0) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocabulary:
        """Read a vocabulary written by :meth:`save`.

        Raises:
            CheckpointError: one line naming ``path`` if it is missing, unreadable, not JSON, or not a list of
                distinct strings starting with ``<pad>``, ``<s>``, ``</s>``.
        """
        data = read_json_file(path, error=CheckpointError, missing="no such vocabulary file")
        symbols = data.get("symbols") if isinstance(data, dict) else None
        if not isinstance(symbols, list) or not all(isinstance(symbol, str) for symbol in symbols):
            raise CheckpointError(f'{path}: not a seqlab vocabulary file (expected {{"symbols": [strings]}})')
        if tuple(symbols[: len(cls.SPECIALS)]) != cls.SPECIALS:
            raise CheckpointError(
                f"{path}: not a seqlab vocabulary file (symbols must start with {list(cls.SPECIALS)})"
            )
        try:
            return cls(symbols[len(cls.SPECIALS) :])
        except ValueError as error:
            raise CheckpointError(f"{path}: not a seqlab vocabulary file ({error})") from None
