"""Hyperparameters of the T5 encoder-decoder (Raffel et al., 2020), as Hugging Face's ``T5Config`` names them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seqlab.errors import ConfigError
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real, check_token_id

FEED_FORWARD_PROJS = ("relu", "gated-gelu")


@dataclass(frozen=True)
class T5Config:
    """Hyperparameters of :class:`seqlab.models.t5.T5`; saved as ``config.json`` with every checkpoint.

    The defaults are t5-small's (v1.0: ReLU feed-forward, tied output layer); T5 v1.1 sets
    feed_forward_proj="gated-gelu" and tie_word_embeddings=False.

    Raises:
        ConfigError: (one line showing the bad value) for a size that is not an integer >= 1, dropout outside
            [0, 1), layer_norm_eps <= 0, an unknown feed_forward_proj, fewer than 4 buckets, a max_distance that
            leaves no logarithmic buckets, or a special id outside the vocabulary.
    """

    vocab_size: int = 32128  # V, shared by encoder and decoder
    d_model: int = 512  # D
    d_kv: int = 64  # Dh, per head; N * Dh need not equal D
    d_ff: int = 2048  # inner size of the feed-forward networks
    num_layers: int = 6  # encoder layers
    num_decoder_layers: int = 6  # decoder layers
    num_heads: int = 8  # N
    relative_attention_num_buckets: int = 32  # buckets of relative positions, each with a learned bias per head
    relative_attention_max_distance: int = 128  # relative distances >= this share the last bucket
    dropout: float = 0.1  # embeddings, attention weights, feed-forward inner activations, sublayer outputs
    layer_norm_eps: float = 1e-6  # eps of the RMS layer norms
    feed_forward_proj: Literal["relu", "gated-gelu"] = "relu"  # v1.0 ReLU | v1.1 gated GELU (tanh form)
    tie_word_embeddings: bool = True  # output layer = shared embedding (decoder output scaled by D ** -0.5)
    pad_id: int = 0  # padding symbol
    eos_id: int = 1  # end-of-sequence symbol
    decoder_start_id: int = 0  # first decoder input (T5 uses the padding symbol)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads"):
            check_int(name, getattr(self, name))
        check_int("relative_attention_num_buckets", self.relative_attention_num_buckets, minimum=4)
        check_int("relative_attention_max_distance", self.relative_attention_max_distance)
        # The causal buckets count distances exactly up to num_buckets / 2, logarithmically beyond.
        if self.relative_attention_max_distance <= self.relative_attention_num_buckets // 2:
            raise ConfigError(
                f"relative_attention_max_distance ({self.relative_attention_max_distance}) must exceed "
                f"relative_attention_num_buckets / 2 ({self.relative_attention_num_buckets // 2})"
            )
        check_probability("dropout", self.dropout)
        check_real("layer_norm_eps", self.layer_norm_eps, greater_than=0.0)
        check_choice("feed_forward_proj", self.feed_forward_proj, FEED_FORWARD_PROJS)
        check_bool("tie_word_embeddings", self.tie_word_embeddings)
        for name in ("pad_id", "eos_id", "decoder_start_id"):
            check_token_id(name, getattr(self, name), self.vocab_size)
