"""Assembled models; each implements save_pretrained / from_pretrained, and generators the decoding step interface.

``load_pretrained(directory)`` builds whichever registered model (``MODEL_TYPES``) a checkpoint holds.
"""

from seqlab.models.bert import (
    Bert,
    BertConfig,
    BertForMaskedLM,
    BertForMeanPooledClassification,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from seqlab.models.classifier import (
    ClassifierOutput,
    Seq2VecClassifier,
    Seq2VecClassifierConfig,
    TCNClassifier,
    TCNClassifierConfig,
)
from seqlab.models.elmo import ELMo, ELMoClassifier, ELMoClassifierConfig, ELMoConfig, ELMoRepresentations
from seqlab.models.interfaces import (
    LanguageModelOutput,
    LanguageModelStepModel,
    Seq2SeqOutput,
    StepModel,
    StepOutput,
    select_rows,
)
from seqlab.models.language_model import (
    GPT,
    CompiledGPT,
    CompiledGPTState,
    GPTConfig,
    GPTState,
    RNNLanguageModel,
    RNNLanguageModelConfig,
    SSMLanguageModel,
    SSMLanguageModelConfig,
    TCNLanguageModel,
    TCNLanguageModelConfig,
    ZarembaPreset,
    ZarembaTraining,
    zaremba_large,
    zaremba_medium,
    zaremba_small,
)
from seqlab.models.pretrained import MODEL_TYPES, load_pretrained
from seqlab.models.seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig, TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.models.t5 import T5, T5Config
from seqlab.models.tagger import RNNSequenceTagger, RNNSequenceTaggerConfig, TaggerOutput
from seqlab.models.vec2seq import ClassBoundGenerator, ConditionedRNNGenerator, ConditionedRNNGeneratorConfig

__all__ = [
    "GPT",
    "MODEL_TYPES",
    "T5",
    "Bert",
    "BertConfig",
    "BertForMaskedLM",
    "BertForMeanPooledClassification",
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "ClassBoundGenerator",
    "ClassifierOutput",
    "CompiledGPT",
    "CompiledGPTState",
    "ConditionedRNNGenerator",
    "ConditionedRNNGeneratorConfig",
    "ELMo",
    "ELMoClassifier",
    "ELMoClassifierConfig",
    "ELMoConfig",
    "ELMoRepresentations",
    "GPTConfig",
    "GPTState",
    "LanguageModelOutput",
    "LanguageModelStepModel",
    "RNNLanguageModel",
    "RNNLanguageModelConfig",
    "RNNSeq2Seq",
    "RNNSeq2SeqConfig",
    "RNNSequenceTagger",
    "RNNSequenceTaggerConfig",
    "SSMLanguageModel",
    "SSMLanguageModelConfig",
    "Seq2SeqOutput",
    "Seq2VecClassifier",
    "Seq2VecClassifierConfig",
    "StepModel",
    "StepOutput",
    "T5Config",
    "TCNClassifier",
    "TCNClassifierConfig",
    "TCNLanguageModel",
    "TCNLanguageModelConfig",
    "TaggerOutput",
    "TransformerSeq2Seq",
    "TransformerSeq2SeqConfig",
    "ZarembaPreset",
    "ZarembaTraining",
    "load_pretrained",
    "select_rows",
    "zaremba_large",
    "zaremba_medium",
    "zaremba_small",
]
