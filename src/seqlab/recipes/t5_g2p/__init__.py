"""Recipe ``t5-g2p``: one T5 (Raffel et al., 2020) trained text-to-text on CMUdict in both directions.

Every pronunciation gives two training pairs, told apart by a task prefix, as T5 tells its tasks apart:

    graphemes to phonemes: h e l l o   ->   HH AH L OW
    phonemes to graphemes: HH AH L OW  ->   h e l l o

One character-level vocabulary holds the letters, the phoneme symbols and the two prefixes, each a token; the
encoder input is prefix + symbols + EOS, the decoder starts from the padding symbol as in T5. Data and split are
the g2p recipe's (``seqlab.data.pronunciations.load_splits``, the same ``[data]`` section), so both recipes are
scored on the same test words. Metrics, in percent: phoneme error rate and word error rate for graphemes ->
phonemes (against every reference pronunciation of a word), letter error rate and word accuracy for phonemes ->
graphemes (against every test word with that pronunciation, homophones included), edit distances by rapidfuzz
through ``seqlab.metrics``.

Modules: ``config`` (the sections), ``system`` (a trained run: predict, evaluate), ``training`` (``prepare``).
"""

from seqlab.recipes.t5_g2p.config import PREFIXES, Config, T5G2PModelConfig
from seqlab.recipes.t5_g2p.system import T5G2PPrediction, T5G2PSystem, parse_input
from seqlab.recipes.t5_g2p.training import T5G2PTraining, prepare

NAME = "t5-g2p"
DESCRIPTION = "one T5 text-to-text on CMUdict both ways: g2p PER/WER (%), p2g letter error rate / word accuracy (%)"
System = T5G2PSystem

__all__ = [
    "DESCRIPTION",
    "NAME",
    "PREFIXES",
    "Config",
    "System",
    "T5G2PModelConfig",
    "T5G2PPrediction",
    "T5G2PSystem",
    "T5G2PTraining",
    "parse_input",
    "prepare",
]
