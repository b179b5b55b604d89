"""T5 (Raffel et al., 2020): the text-to-text encoder-decoder, its Hugging Face conversion and span corruption."""

from seqlab.models.t5.config import T5Config
from seqlab.models.t5.model import T5, T5DecoderState
from seqlab.models.t5.span_corruption import SpanCorruption, random_spans_noise_mask, sentinel_tokens, span_corruption

__all__ = [
    "T5",
    "SpanCorruption",
    "T5Config",
    "T5DecoderState",
    "random_spans_noise_mask",
    "sentinel_tokens",
    "span_corruption",
]
