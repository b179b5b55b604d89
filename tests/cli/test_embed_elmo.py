"""``seqlab embed`` of ELMo checkpoints: a saved ELMo mixes its layers with equal weights, a classify/elmo model
with the mix it learned, and each row is the mean over the sentence's tokens computed by hand from the biLM's
layers on the sentence alone (so padding in a batch changes nothing); bad input is one line."""

import numpy as np
import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.data.vocab import Vocabulary
from seqlab.models import ELMo, ELMoClassifier, ELMoClassifierConfig, ELMoConfig

SENTENCES = ["Petrov", "Sato", "Lindberg and Ko"]


@pytest.fixture
def sentences(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


def by_hand(elmo, vocab, weights, gamma):
    rows = []
    with torch.no_grad():
        for sentence in SENTENCES:
            layers = elmo.elmo_representations(torch.tensor([vocab.encode(sentence, add_bos=True, add_eos=True)]))
            mixed = gamma * (weights[:, None, None, None] * layers.layers).sum(0)  # (1, T, 2H)
            rows.append(mixed[0].mean(0))
    return torch.stack(rows).numpy()


def test_a_saved_elmo_mixes_its_layers_with_equal_weights(tmp_path, sentences):
    vocab = Vocabulary.build(SENTENCES)
    torch.manual_seed(0)
    elmo = ELMo(ELMoConfig(vocab_size=len(vocab), hidden_size=6, num_layers=2)).eval()
    elmo.save_pretrained(tmp_path / "elmo")
    vocab.save(tmp_path / "elmo" / "vocab.json")
    out = tmp_path / "e.npy"
    result = run_cli("embed", tmp_path / "elmo", "--input", sentences, "--out", out, "--batch-size", 2)
    assert result.code == 0, result.err
    ours = np.load(out)
    assert ours.shape == (3, 12) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, by_hand(elmo, vocab, torch.full((3,), 1 / 3), 1.0), atol=1e-6)


def test_a_classify_elmo_model_uses_its_learned_mix(tmp_path, sentences):
    vocab = Vocabulary.build(SENTENCES)
    torch.manual_seed(0)
    model = ELMoClassifier(ELMoClassifierConfig(vocab_size=len(vocab), num_classes=2, elmo_hidden_size=6)).eval()
    with torch.no_grad():
        model.mix.scalars.copy_(torch.tensor([0.5, -1.0, 2.0]))
        model.mix.gamma.fill_(1.7)
    model.save_pretrained(tmp_path / "run")
    vocab.save(tmp_path / "run" / "vocab.json")
    result = run_cli("embed", tmp_path / "run", "--input", sentences, "--out", tmp_path / "e.npy")
    assert result.code == 0, result.err
    weights = torch.softmax(torch.tensor([0.5, -1.0, 2.0]), dim=0)
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), by_hand(model.elmo, vocab, weights, 1.7), atol=1e-6)


def test_bad_input_is_one_line(tmp_path, sentences):
    vocab = Vocabulary.build(["abc"])
    ELMo(ELMoConfig(vocab_size=len(vocab), hidden_size=4, num_layers=1)).save_pretrained(tmp_path / "elmo")
    result = run_cli("embed", tmp_path / "elmo", "--input", sentences, "--out", tmp_path / "e.npy")
    assert_error(
        result,
        f"{tmp_path / 'elmo' / 'vocab.json'}: missing; an ELMo checkpoint needs the character vocabulary it was "
        "trained on",
    )
    vocab.save(tmp_path / "elmo" / "vocab.json")
    result = run_cli("embed", tmp_path / "elmo", "--input", sentences, "--out", tmp_path / "e.npy")
    assert result.code == 2 and result.err.startswith(f"seqlab: error: {sentences}:1: unknown symbol 'P'")
    assert len(result.err.splitlines()) == 1 and not (tmp_path / "e.npy").exists()
