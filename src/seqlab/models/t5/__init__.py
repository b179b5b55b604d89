"""T5 (Raffel et al., 2020): the text-to-text encoder-decoder, its Hugging Face conversion and span corruption."""

from seqlab.models.t5.config import T5Config
from seqlab.models.t5.model import T5, T5DecoderState

__all__ = ["T5", "T5Config", "T5DecoderState"]
