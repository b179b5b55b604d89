"""Building blocks: recurrent cells and layers, attention, pooling, Transformer layers, causal convolutions,
state-space layers, monotonic-alignment priors. No I/O, no training, no CLI."""

from seqlab.nn.alignment import alibi_slopes, guided_attention_loss, monotonic_alibi_bias
from seqlab.nn.attention import AdditiveAttention, Attention, BilinearAttention, DotProductAttention
from seqlab.nn.cells import GRUCell, LSTMCell, LSTMState, RNNCell, flip_update_gate
from seqlab.nn.decoder_only import (
    DecoderOnlyOutput,
    IncrementalStep,
    TransformerDecoderOnly,
    TransformerDecoderOnlyLayer,
)
from seqlab.nn.functional.attention import (
    AttentionOutput,
    causal_keep_mask,
    linear_attention,
    local_attention,
    scaled_dot_product_attention,
)
from seqlab.nn.kv_cache import KVCache, StaticKVCache
from seqlab.nn.layer_norm_cells import LayerNormGRUCell, LayerNormLSTMCell
from seqlab.nn.multi_head_attention import MultiHeadAttention
from seqlab.nn.pooling import AttentionPooling, LastPooling, MaxPooling, MeanPooling, PoolingOutput, make_pooling
from seqlab.nn.positional import LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding
from seqlab.nn.recurrent import GRU, LSTM, RNN, RecurrentOutput
from seqlab.nn.scalar_mix import ScalarMix
from seqlab.nn.state_space import S4D, S4DBlock, S4DStack, SSMOutput, s4d_stack
from seqlab.nn.temporal_convolution import CausalConv1d, TemporalBlock, TemporalConvNet, TemporalConvOutput
from seqlab.nn.transformer import (
    DecoderLayerOutput,
    DecoderOutput,
    LayerOutput,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from seqlab.nn.transformer_sublayers import (
    FeedForward,
    cross_attention_sublayer,
    feed_forward_sublayer,
    self_attention_sublayer,
)

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "S4D",
    "AdditiveAttention",
    "Attention",
    "AttentionOutput",
    "AttentionPooling",
    "BilinearAttention",
    "CausalConv1d",
    "DecoderLayerOutput",
    "DecoderOnlyOutput",
    "DecoderOutput",
    "DotProductAttention",
    "FeedForward",
    "GRUCell",
    "IncrementalStep",
    "KVCache",
    "LSTMCell",
    "LSTMState",
    "LastPooling",
    "LayerNormGRUCell",
    "LayerNormLSTMCell",
    "LayerOutput",
    "LearnedPositionalEncoding",
    "MaxPooling",
    "MeanPooling",
    "MultiHeadAttention",
    "PoolingOutput",
    "RNNCell",
    "RecurrentOutput",
    "RotaryEmbedding",
    "S4DBlock",
    "S4DStack",
    "SSMOutput",
    "ScalarMix",
    "SinusoidalPositionalEncoding",
    "StaticKVCache",
    "TemporalBlock",
    "TemporalConvNet",
    "TemporalConvOutput",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerDecoderOnly",
    "TransformerDecoderOnlyLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "alibi_slopes",
    "causal_keep_mask",
    "cross_attention_sublayer",
    "feed_forward_sublayer",
    "flip_update_gate",
    "guided_attention_loss",
    "linear_attention",
    "local_attention",
    "make_pooling",
    "monotonic_alibi_bias",
    "s4d_stack",
    "scaled_dot_product_attention",
    "self_attention_sublayer",
]
