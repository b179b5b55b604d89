"""The model registry: config.json records a stable ``model_type`` and ``load_pretrained`` builds the class it names.

Each registered model round-trips through ``load_pretrained`` (same class, config and weights); an unknown
``model_type`` is one line; the class names that seqlab 0.1.0 wrote still load as aliases.
"""

import json
import re

import pytest
import torch
from torch import nn

from seqlab.errors import CheckpointError
from seqlab.models import (
    GPT,
    MODEL_TYPES,
    T5,
    Bert,
    BertConfig,
    BertForMaskedLM,
    BertForMeanPooledClassification,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    ConditionedRNNGenerator,
    ConditionedRNNGeneratorConfig,
    ELMo,
    ELMoClassifier,
    ELMoClassifierConfig,
    ELMoConfig,
    GPTConfig,
    RNNLanguageModel,
    RNNLanguageModelConfig,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
    RNNSequenceTagger,
    RNNSequenceTaggerConfig,
    Seq2VecClassifier,
    Seq2VecClassifierConfig,
    T5Config,
    TCNClassifier,
    TCNClassifierConfig,
    TCNLanguageModel,
    TCNLanguageModelConfig,
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig,
    load_pretrained,
)
from seqlab.models.denoiser import SequenceDenoiser, SequenceDenoiserConfig
from seqlab.models.field_forecaster import FieldTransformer, FieldTransformerConfig
from seqlab.models.forecaster import Forecaster, ForecasterConfig
from seqlab.models.language_model.ssm import SSMLanguageModel, SSMLanguageModelConfig
from seqlab.models.pretrained import LEGACY_MODEL_TYPES, PretrainedMixin

TINY = {
    "elmo": ELMoConfig(vocab_size=7, hidden_size=4, num_layers=2, tie_embeddings=True),
    "elmo_classifier": ELMoClassifierConfig(vocab_size=7, num_classes=3, elmo_hidden_size=4, hidden_size=3),
    "gpt": GPTConfig(vocab_size=7, context_length=6, d_model=8, num_heads=2, num_layers=1),
    "rnn_seq2seq": RNNSeq2SeqConfig(7, 6, embedding_size=4, hidden_size=5, encoder_layers=1),
    "transformer_seq2seq": TransformerSeq2SeqConfig(7, 6, d_model=8, num_heads=2, d_ff=12, encoder_layers=1),
    "seq2vec_classifier": Seq2VecClassifierConfig(num_classes=3, input_size=2, hidden_size=4),
    "rnn_language_model": RNNLanguageModelConfig(7, embedding_size=4, hidden_size=4, tie_embeddings=True),
    **dict.fromkeys(
        (
            "bert",
            "bert_mlm",
            "bert_pretraining",
            "bert_sequence_classification",
            "bert_token_classification",
            "bert_mean_pooled_classification",
        ),
        BertConfig(vocab_size=7, d_model=8, num_heads=2, num_layers=1, d_ff=12, max_positions=6, num_labels=3),
    ),
    "t5": T5Config(vocab_size=7, d_model=8, d_kv=4, d_ff=12, num_layers=1, num_decoder_layers=1, num_heads=2),
    "rnn_sequence_tagger": RNNSequenceTaggerConfig(7, 3, embedding_size=4, hidden_size=4),
    "conditioned_rnn_generator": ConditionedRNNGeneratorConfig(7, 3, class_embedding_size=2, hidden_size=4),
    "forecaster": ForecasterConfig(channels=2, horizon=3, hidden_size=4, num_layers=1),
    "tcn_language_model": TCNLanguageModelConfig(7, embedding_size=4, hidden_size=4, num_levels=2),
    "tcn_classifier": TCNClassifierConfig(7, 3, embedding_size=4, hidden_size=4, num_levels=2),
    "ssm_language_model": SSMLanguageModelConfig(7, d_model=4, num_layers=1, state_size=4),
    "sequence_denoiser": SequenceDenoiserConfig(frame_size=4, hidden_size=4, num_layers=1),
    "field_transformer": FieldTransformerConfig(
        height=4, width=4, horizon=2, patch_size=2, d_model=8, num_heads=2, d_ff=12, num_layers=1, context_length=3
    ),
}
CLASSES = {
    "elmo": ELMo,
    "elmo_classifier": ELMoClassifier,
    "gpt": GPT,
    "rnn_seq2seq": RNNSeq2Seq,
    "transformer_seq2seq": TransformerSeq2Seq,
    "seq2vec_classifier": Seq2VecClassifier,
    "rnn_language_model": RNNLanguageModel,
    "bert": Bert,
    "bert_mlm": BertForMaskedLM,
    "bert_pretraining": BertForPreTraining,
    "bert_sequence_classification": BertForSequenceClassification,
    "bert_token_classification": BertForTokenClassification,
    "t5": T5,
    "rnn_sequence_tagger": RNNSequenceTagger,
    "conditioned_rnn_generator": ConditionedRNNGenerator,
    "bert_mean_pooled_classification": BertForMeanPooledClassification,
    "forecaster": Forecaster,
    "tcn_language_model": TCNLanguageModel,
    "tcn_classifier": TCNClassifier,
    "ssm_language_model": SSMLanguageModel,
    "sequence_denoiser": SequenceDenoiser,
    "field_transformer": FieldTransformer,
}


def save(tmp_path, model_type):
    torch.manual_seed(0)
    model = CLASSES[model_type](TINY[model_type])
    directory = tmp_path / model_type
    model.save_pretrained(directory)
    return model, directory


def test_every_registered_model_has_a_round_trip_case():
    assert MODEL_TYPES == CLASSES


@pytest.mark.parametrize("model_type", sorted(CLASSES))
def test_load_pretrained_returns_the_saved_class_config_and_weights(tmp_path, model_type):
    model, directory = save(tmp_path, model_type)
    assert json.loads((directory / "config.json").read_text())["model_type"] == model_type
    loaded = load_pretrained(directory)
    assert type(loaded) is CLASSES[model_type]
    assert loaded.config == model.config
    assert not loaded.training
    expected, got = model.state_dict(), loaded.state_dict()
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name


@pytest.mark.parametrize("model_type", sorted(CLASSES))
def test_from_pretrained_of_another_class_is_refused_in_one_line(tmp_path, model_type):
    _, directory = save(tmp_path, model_type)
    other = RNNSeq2Seq if model_type != "rnn_seq2seq" else TransformerSeq2Seq
    message = f"{directory / 'config.json'}: holds a {model_type!r} model, expected {other.model_type!r}"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        other.from_pretrained(directory)


def test_unknown_model_type_is_one_line(tmp_path):
    _, directory = save(tmp_path, "rnn_seq2seq")
    config_path = directory / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "model_type": "no_such_model"}))
    known = ", ".join(sorted(CLASSES))
    message = f"{config_path}: unknown model_type 'no_such_model'; known: {known}"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        load_pretrained(directory)


@pytest.mark.parametrize(("legacy", "model_type"), sorted(LEGACY_MODEL_TYPES.items()))
def test_class_names_written_by_seqlab_0_1_load_as_aliases(tmp_path, legacy, model_type):
    model, directory = save(tmp_path, model_type)
    config_path = directory / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "model_type": legacy}))
    for loaded in (load_pretrained(directory), CLASSES[model_type].from_pretrained(directory)):
        assert type(loaded) is CLASSES[model_type]
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())


def test_a_taken_model_type_is_refused_at_class_definition():
    with pytest.raises(TypeError, match=r"^model_type 'rnn_seq2seq' is taken by RNNSeq2Seq$"):

        class Impostor(PretrainedMixin, nn.Module):
            model_type = "rnn_seq2seq"

    assert MODEL_TYPES["rnn_seq2seq"] is RNNSeq2Seq
