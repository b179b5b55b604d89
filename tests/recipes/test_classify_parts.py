"""The classify recipe's parts alone: the model section as a choice of one class per arch (old runs' sections
load), the classifier's validation against a direct computation, the biLM's token-weighted validation, and the
System's typed predictions."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqlab.config import apply_overrides
from seqlab.data.vocab import Vocabulary
from seqlab.errors import ConfigError
from seqlab.models import ELMo, ELMoConfig, Seq2VecClassifier
from seqlab.recipes import classify
from seqlab.recipes.classify.config import BiLSTMArmConfig, ELMoArmConfig, ScratchBertArmConfig
from seqlab.recipes.classify.models import BiLMPretraining
from seqlab.recipes.common.text_classifier import ClassifierTraining, bilstm_config
from seqlab.recipes.saved_run import load_recipe_config

FIXTURE = Path(__file__).parent.parent / "fixtures" / "checkpoints" / "classify_9a192c4"


def test_model_arch_picks_its_class_and_refuses_another_archs_key_in_one_line():
    config = apply_overrides(classify.Config(), {"model.arch": "elmo", "model.elmo_concat": "true"})
    assert config.model == ELMoArmConfig(elmo_concat=True)
    bert = apply_overrides(classify.Config(), {"model.arch": "bert", "model.bert_num_layers": "1"}).model
    assert type(bert) is ScratchBertArmConfig and bert.bert_num_layers == 1
    with pytest.raises(ConfigError) as caught:
        apply_overrides(classify.Config(), {"model.arch": "bilstm", "model.bert_d_model": "64"})
    assert (
        str(caught.value) == "--set model.bert_d_model: does not apply to model.arch=bilstm (a key of model.arch=bert)"
    )
    with pytest.raises(ConfigError) as caught:
        apply_overrides(classify.Config(), {"model.arch": "minilm", "model.hidden_size": "8"})
    assert str(caught.value) == (
        "--set model.hidden_size: does not apply to model.arch=minilm "
        "(a key of model.arch=bilstm | static | elmo | tcn)"
    )


def test_a_run_saved_with_every_archs_keys_loads_as_its_archs_class():
    config = load_recipe_config(FIXTURE, classify.Config)
    assert config.model == BiLSTMArmConfig(embedding_size=8, hidden_size=8)


def test_the_classifier_validation_is_the_mean_loss_and_error_over_texts():
    torch.manual_seed(0)
    model = Seq2VecClassifier(
        bilstm_config(vocab_size=6, num_labels=3, embedding_size=4, hidden_size=4, pooling="max", dropout=0.0)
    ).eval()
    ids, targets = [[1, 4, 5, 2], [1, 3, 2], [1, 5, 5, 5, 4, 2]], [0, 2, 1]
    training = ClassifierTraining(ids, targets, ids, targets)
    with torch.no_grad():
        logits = torch.cat([model(torch.tensor([row])).logits for row in ids])  # (3, C), no padding
    expected_loss = F.cross_entropy(logits, torch.tensor(targets)).item()
    wrong = sum(int(logits[i].argmax()) != t for i, t in enumerate(targets))
    scores = training.validate(model)
    assert scores["valid_loss"] == pytest.approx(expected_loss, rel=1e-6)
    assert scores["valid_error"] == pytest.approx(100.0 * wrong / 3)
    batch = next(training.train_batches(0, torch.Generator().manual_seed(0), 3))
    out = training.loss(model, batch)
    assert out.num_tokens == 3 and out.loss.item() == pytest.approx(expected_loss, rel=1e-6)


def test_the_biLM_validation_is_the_token_mean_of_each_direction():
    torch.manual_seed(0)
    bilm = ELMo(ELMoConfig(vocab_size=7, hidden_size=4, num_layers=1)).eval()
    ids = [[1, 4, 5, 2], [1, 3, 6, 6, 6, 2], [1, 3, 2]]
    scores = BiLMPretraining(ids, ids).validate(bilm)
    forward, backward, count = 0.0, 0.0, 0
    with torch.no_grad():
        for row in ids:
            out = bilm.language_model_loss(torch.tensor([row]))
            forward += out.forward_nll.item() * out.num_predictions
            backward += out.backward_nll.item() * out.num_predictions
            count += out.num_predictions
    assert scores["valid_forward"] == pytest.approx(forward / count, rel=1e-6)
    assert scores["valid_backward"] == pytest.approx(backward / count, rel=1e-6)
    assert scores["valid_loss"] == pytest.approx((forward + backward) / count, rel=1e-6)


def test_a_prediction_holds_every_class_probability_and_prints_the_most_likely():
    system = classify.System.load(FIXTURE)
    predictions = system.predict(["Ivanov", "Tanaka"])
    vocab = Vocabulary.load(FIXTURE / "vocab.json")
    for prediction in predictions:
        x = torch.tensor([vocab.encode(prediction.text, add_bos=True, add_eos=True)])
        with torch.no_grad():
            probabilities = system.model(x).logits.softmax(-1)[0].tolist()
        assert list(prediction.probabilities) == system.labels
        assert list(prediction.probabilities.values()) == pytest.approx(probabilities, abs=1e-6)
        assert prediction.label == max(prediction.probabilities, key=prediction.probabilities.get)
        assert prediction.lines() == [f"{prediction.text}\t{prediction.label}"]
