"""Recipe ``translate``: machine translation of parallel text with an attention RNN or Transformer seq2seq.

Data: the user's parallel files (``data.src``, ``data.tgt``: line i of one translates line i of the other; UTF-8,
one sentence a line); the valid and test pairs come from ``data.valid_src``/``valid_tgt`` and ``data.test_src``/
``test_tgt``, or else from a deterministic split of the training pairs (shuffled with ``data.split_seed``). seqlab
ships no parallel corpus (no package on the index carries a small real one offline), so data.src and data.tgt are
required. Tokens: byte-level BPE (``seqlab.data.tokenizers.BPETokenizer``) learnt on the training pairs, one
vocabulary shared by both languages (``data.shared_bpe``) or one per language; model ids are the BPE ids shifted
by 3 past the seq2seq models' PAD = 0, BOS = 1, EOS = 2. The model section is a choice: ``model.arch=rnn`` (an
attention RNN encoder-decoder) or ``transformer`` (the default).

Metrics: corpus BLEU (Papineni et al., 2002) and chrF (Popovic, 2015) by sacrebleu on the detokenised output (the
BPE decoding of the hypothesis, compared with the reference line as it is in the file), with beam search
(``decode.num_beams``) and with greedy search.

Modules: ``config`` (the sections), ``data`` (parallel files and the split), ``system`` (a trained run: predict,
evaluate, attention maps), ``training`` (``prepare``).
"""

from seqlab.recipes.translate.config import (
    Config,
    DataConfig,
    DecodeConfig,
    RNNModelConfig,
    Seq2SeqModelConfig,
    TransformerModelConfig,
)
from seqlab.recipes.translate.data import Parallel, load_splits, read_parallel
from seqlab.recipes.translate.system import Scores, TranslateSystem, Translation
from seqlab.recipes.translate.training import TranslateTraining, prepare

NAME = "translate"
DESCRIPTION = "translate parallel text (data.src, data.tgt): BPE + RNN or Transformer seq2seq, BLEU/chrF (sacrebleu)"
System = TranslateSystem

__all__ = [
    "DESCRIPTION",
    "NAME",
    "Config",
    "DataConfig",
    "DecodeConfig",
    "Parallel",
    "RNNModelConfig",
    "Scores",
    "Seq2SeqModelConfig",
    "System",
    "TransformerModelConfig",
    "TranslateSystem",
    "TranslateTraining",
    "Translation",
    "load_splits",
    "prepare",
    "read_parallel",
]
