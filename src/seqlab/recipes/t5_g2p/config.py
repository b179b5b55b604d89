"""The ``t5-g2p`` recipe's config: the g2p data section, the T5's size, training and the search that decodes.

The two directions are told apart by a task prefix (``PREFIXES``), each one token of the shared vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from seqlab.data.pronunciations import G2PDataConfig
from seqlab.data.vocab import Vocabulary
from seqlab.models.t5 import T5Config
from seqlab.recipes.common.search import SearchDecodeConfig
from seqlab.recipes.init_from import InitFromConfig
from seqlab.training.train_config import Seq2SeqTrainConfig
from seqlab.validation import check_probability

Direction = Literal["g2p", "p2g"]
PREFIXES: dict[Direction, str] = {"g2p": "graphemes to phonemes:", "p2g": "phonemes to graphemes:"}


@dataclass(frozen=True)
class T5G2PModelConfig(InitFromConfig):
    """The T5's size (``T5Config`` fields; the vocabulary and special ids come from the data) and its loss;
    ``init_from`` starts from another t5-g2p run's parameters (``seqlab.recipes.init_from``), e.g. to fine-tune it
    on a dictionary of one's own (with ``train.lora_rank``, its adapters only).

    Raises: ConfigError (a ValueError) for a value out of range, naming the field and the value.
    """

    d_model: int = 128  # D
    d_kv: int = 32  # Dh per head
    d_ff: int = 512  # feed-forward inner size
    num_layers: int = 3  # encoder layers
    num_decoder_layers: int = 3  # decoder layers
    num_heads: int = 4  # N
    relative_attention_num_buckets: int = 32  # relative position buckets
    relative_attention_max_distance: int = 64  # words and pronunciations are shorter than this
    feed_forward_proj: Literal["relu", "gated-gelu"] = "relu"  # v1.0 ReLU | v1.1 gated GELU
    tie_word_embeddings: bool = True  # output layer = shared embedding
    dropout: float = 0.1  # T5's dropout everywhere
    label_smoothing: float = 0.0  # eps of the smoothed cross-entropy

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability("label_smoothing", self.label_smoothing)
        self.model_config(Vocabulary(PREFIXES.values()))  # T5Config checks the rest, before any data is read

    def model_config(self, vocab: Vocabulary) -> T5Config:
        """The T5Config of these sizes over ``vocab`` (its padding symbol also starts the decoder, as in T5)."""
        own = {f.name for f in dataclasses.fields(InitFromConfig)} | {"label_smoothing"}
        sizes = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in own}
        return T5Config(
            vocab_size=len(vocab), pad_id=vocab.pad_id, eos_id=vocab.eos_id, decoder_start_id=vocab.pad_id, **sizes
        )


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data (the g2p recipe's, so both are scored on the same test words), model,
    train, decode (greedy by default)."""

    data: G2PDataConfig = field(default_factory=G2PDataConfig)
    model: T5G2PModelConfig = field(default_factory=T5G2PModelConfig)
    train: Seq2SeqTrainConfig = field(
        default_factory=lambda: Seq2SeqTrainConfig(lr=1e-3, batch_size=64, time_budget=540.0, validate_every=500)
    )
    decode: SearchDecodeConfig = field(default_factory=lambda: SearchDecodeConfig(num_beams=1, max_length=40))
