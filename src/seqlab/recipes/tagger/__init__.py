"""Recipe ``tagger``: sequence labelling, the lexical stress of every vowel of an English pronunciation (CMUdict).

Task: phonemes in, one label per phoneme out (``HH AH L OW`` -> ``HH AH0 L OW1``): the stress digit of each vowel,
0 (none), 1 (primary) or 2 (secondary). Data: the dictionary that ships with the ``cmudict`` package, read with
its stress digits and split by word exactly as the ``g2p`` recipe splits it (``seqlab.data.pronunciations``, same
fractions and seed, so no test word of either recipe was seen in training), or the user's own CMUdict-format files.

Labels: the input is the stress-stripped phoneme sequence; a vowel (a phoneme the training data marks with a
digit) is labelled with its digit, and a consonant carries no label: its position is masked out of the loss and
of every metric (ignore index -100), since whether a position is a vowel is read off the input and a "none"
class would only pad the accuracy. Model (``model.arch``): ``rnn``, ``seqlab.models.RNNSequenceTagger`` (Graves 2012,
Sec. 3.2), a bidirectional LSTM by default (``model.cell``: rnn | gru | gru_textbook | lstm) with y_t = W_y h_t + b_y at
every step; or ``transformer``, a BERT-style encoder with learned positions and the same per-step head
(``seqlab.models.BertForTokenClassification``, Devlin et al. 2019, Sec. 4.3), trained from scratch.

Metrics (percent): vowel accuracy (vowels whose stress is right) and word accuracy (pronunciations whose every
vowel is right). A pronunciation that the dictionary lists with several stress patterns (same word, same
phonemes) is scored once, against the pattern closest to the prediction, as the g2p recipe scores variants.
Baselines in the same row: ``majority`` (each vowel phoneme's most frequent stress in training) and ``first``
(primary stress on the first vowel, none on the others).

Modules: ``config`` (the sections), ``stress`` (labels, scores, baselines), ``system`` (a trained run: predict,
evaluate), ``training`` (``prepare`` and the training parts).
"""

from seqlab.recipes.tagger.config import Config, RNNTaggerConfig, TaggerDataConfig, TransformerTaggerConfig
from seqlab.recipes.tagger.stress import (
    IGNORE,
    NUM_LABELS,
    StressedPronunciation,
    StressScores,
    baseline_patterns,
    group_patterns,
    join_stress,
    split_stress,
    stress_scores,
)
from seqlab.recipes.tagger.system import StressPrediction, TaggerSystem
from seqlab.recipes.tagger.training import TaggerData, TaggerTraining, prepare, read_data

NAME = "tagger"
DESCRIPTION = "sequence labelling: stress (0/1/2) of every vowel of a CMUdict pronunciation, BiLSTM, vowel/word acc (%)"
System = TaggerSystem

__all__ = [
    "DESCRIPTION",
    "IGNORE",
    "NAME",
    "NUM_LABELS",
    "Config",
    "RNNTaggerConfig",
    "StressPrediction",
    "StressScores",
    "StressedPronunciation",
    "System",
    "TaggerData",
    "TaggerDataConfig",
    "TaggerSystem",
    "TaggerTraining",
    "TransformerTaggerConfig",
    "baseline_patterns",
    "group_patterns",
    "join_stress",
    "prepare",
    "read_data",
    "split_stress",
    "stress_scores",
]
