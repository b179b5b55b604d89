"""Recipe ``classify``: text classification; by default, which language a personal name is from.

Task: given a short text (a name), predict its class (the language of origin), the classic character-level
classification task (the PyTorch char-RNN tutorial classifies surnames into 18 languages). Data: names in 9
languages from the ``nameCreator`` package (``seqlab.data.names``: 14,100 first and last names), split 80/10/10 per
class with a fixed seed; or the user's own ``TEXT<TAB>LABEL`` files. Models (``model.arch``, one config class each
in ``config.py``, built in ``models.py``): on characters, ``bilstm`` (BiLSTM baseline), ``static`` (static
embeddings as wide as ELMo's features) and ``elmo`` (a biLM pre-trained on unlabelled names, ``model.elmo_corpus``,
or loaded from ``model.elmo_path``, frozen, ScalarMix features), each ending in the same BiLSTM + pooling + softmax,
and ``tcn`` (a causal temporal convolutional network over a character embedding, pooled; its receptive field is on
the log line); on MiniLM's WordPiece pieces, ``minilm`` (the pretrained MiniLM-L6 fine-tuned with a mean-pooled
softmax head) and
``bert`` (the same architecture, small and from scratch). The run directory keeps the arm's vocabulary:
``vocab.json`` (characters) or ``tokenizer.json`` (WordPiece). Metric: test accuracy (%). ``model.init_from`` starts
from another run or a Hugging Face folder.

Fine-tuning MiniLM wants a small learning rate for the body and a larger one for the new head, e.g.
``--set model.arch=minilm train.lr=1e-3 train.body_lr_scale=0.05``; ``train.freeze=bert`` trains the head alone.

ELMo against static embeddings of the same width, the biLM's pre-training the only difference (same head, same
labelled data, same head budget): pre-train once, then train heads from that biLM with any seed::

    seqlab train classify --out runs/elmo --set model.arch=elmo pretrain.time_budget=2400
    seqlab train classify --out runs/elmo-1 --set model.arch=elmo model.elmo_path=runs/elmo train.seed=1
    seqlab train classify --out runs/static-1 --set model.arch=static train.seed=1
"""

from seqlab.recipes.classify.config import Config
from seqlab.recipes.classify.system import ClassifySystem, ClassPrediction
from seqlab.recipes.classify.training import prepare

NAME = "classify"
DESCRIPTION = (
    "text classification (names -> language, nameCreator): bilstm | static | elmo | minilm | bert | tcn, accuracy (%)"
)
System = ClassifySystem

__all__ = ["DESCRIPTION", "NAME", "ClassPrediction", "Config", "System", "prepare"]
