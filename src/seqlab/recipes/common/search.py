"""The ``[decode]`` section of the recipes that decode a target sequence by greedy or beam search (g2p, t5-g2p)."""

from __future__ import annotations

from dataclasses import dataclass

from seqlab.validation import check_int, check_real

# The largest values a config may set: beyond them a run would only run out of memory or time.
MAX_DECODE = {"num_beams": 1_000, "max_length": 10_000, "batch_size": 100_000}


@dataclass(frozen=True)
class SearchDecodeConfig:
    """How test inputs are decoded: beam search with ``num_beams`` beams (1 = greedy search).

    Raises: ConfigError (a ValueError) for a value out of range, naming the field and the value.
    """

    num_beams: int = 5  # K beams; 1 = greedy search
    length_penalty: float = 0.0  # score = log p / length**length_penalty; 0 ranks by log p itself
    max_length: int = 32  # most target tokens per input, EOS included (CMUdict pronunciations have up to 28)
    batch_size: int = 256  # inputs decoded together

    def __post_init__(self) -> None:
        for name, maximum in MAX_DECODE.items():
            check_int(name, getattr(self, name), maximum=maximum)
        check_real("length_penalty", self.length_penalty)
