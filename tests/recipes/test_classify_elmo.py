"""The classify recipe's elmo arm against static embeddings: what its biLM pre-trains on (unlabelled names, never
the validation or test texts), and a pre-trained biLM loaded by model.elmo_path, used frozen and unchanged."""

import json
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.data.labelled_text import LabelledText
from seqlab.data.names import name_origin_examples, unlabelled_names
from seqlab.data.vocab import Vocabulary
from seqlab.models import ELMo, ELMoConfig, load_pretrained
from seqlab.models.elmo.sentences import load_elmo_encoder
from seqlab.recipes.classify.config import ELMoArmConfig, StaticArmConfig
from seqlab.recipes.classify.training import pretraining_texts

TINY = ["model.hidden_size=8", "model.elmo_hidden_size=8", "model.elmo_num_layers=1"]
STEPS = ["train.max_steps=30", "train.lr=0.01", "train.batch_size=16", "pretrain.max_steps=5", "pretrain.batch_size=16"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = random.Random(1)
    lines = []
    for label, endings in {"russian": ("ov", "in"), "swedish": ("son", "berg")}.items():
        for _ in range(40):
            stem = "".join(rng.choice("abdeiklmnoprstu") for _ in range(rng.randint(2, 5))).capitalize()
            lines.append(f"{stem}{rng.choice(endings)}\t{label}")
    path = tmp_path_factory.mktemp("data") / "names.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def train(out, data, *settings):
    result = run_cli("train", "classify", "--out", out, "--no-progress", "--set", f"data.train_path={data}", *settings)
    assert result.code == 0, result.err
    return result


@pytest.fixture(scope="module")
def pretrained(data, tmp_path_factory):
    """A run of the elmo arm whose biLM pre-trained on the training texts, and a run that reuses that biLM."""
    root = tmp_path_factory.mktemp("runs")
    train(root / "first", data, "model.arch=elmo", "model.elmo_corpus=train", *TINY, *STEPS)
    result = train(root / "reused", data, "model.arch=elmo", f"model.elmo_path={root / 'first'}", *TINY, *STEPS)
    return root, result


def test_the_names_corpus_holds_every_labelled_name_and_the_census_lists_less_the_excluded():
    examples = name_origin_examples()
    held_out = {e.text for e in examples[::10]}
    corpus = unlabelled_names(exclude=held_out)
    assert not held_out & set(corpus) and corpus == sorted(set(corpus))
    assert {e.text for e in examples} - held_out <= set(corpus)
    assert {"Smith", "Johnson", "Garcia", "Mary"} <= set(corpus)  # census lists, capitalised as nameCreator writes
    assert len(corpus) > 10 * len(examples)


def test_the_biLM_reads_the_training_texts_and_unlabelled_names_but_never_a_held_out_text():
    train_set = [LabelledText("Zzyzxov", "russian"), LabelledText("Petrov", "russian")]
    held_out = [LabelledText("Ivanov", "russian"), LabelledText("Smith", "american")]
    names = pretraining_texts(ELMoArmConfig(), train_set, held_out=held_out)
    assert {"Zzyzxov", "Petrov", "Sato"} <= set(names) and not {"Ivanov", "Smith"} & set(names)
    only_train = pretraining_texts(ELMoArmConfig(elmo_corpus="train"), train_set, held_out=held_out)
    assert only_train == ["Zzyzxov", "Petrov"]
    for model in (StaticArmConfig(), ELMoArmConfig(elmo_path="runs/elmo")):
        assert pretraining_texts(model, train_set, held_out=held_out) == []


def test_the_default_elmo_arm_pre_trains_on_the_names_corpus_with_the_vocabulary_covering_it(data, tmp_path):
    result = train(tmp_path / "run", data, "model.arch=elmo", *TINY, *STEPS)
    count = len(unlabelled_names())  # and 64 generated training names, less the 16 held out if real names
    logged = [line for line in (result.out + result.err).splitlines() if line.startswith("biLM corpus:")]
    assert len(logged) == 1 and count - 16 <= int(logged[0].split()[2]) <= count + 64
    vocab = Vocabulary.load(tmp_path / "run" / "vocab.json")
    assert all(vocab.encode(name) for name in ("Sörensen", "Béatrice", "O'Brien"))


def test_the_reused_biLM_is_bit_identical_after_training_and_gives_its_representations_exactly(pretrained):
    root, result = pretrained
    assert "biLM corpus" not in result.out + result.err and "biLM pre-training" not in result.out + result.err
    first, reused = load_pretrained(root / "first"), load_pretrained(root / "reused")
    for (name, a), (_, b) in zip(first.elmo.state_dict().items(), reused.elmo.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    elmo, _, vocab = load_elmo_encoder(root / "first")
    assert Vocabulary.load(root / "reused" / "vocab.json").symbols == vocab.symbols
    x = torch.tensor([vocab.encode("Petrov", add_bos=True, add_eos=True)])
    with torch.no_grad():
        assert torch.equal(reused.elmo.elmo_representations(x).layers, elmo.elmo_representations(x).layers)
    learned = not torch.equal(reused.mix.scalars, torch.zeros(2)) and not torch.equal(reused.mix.gamma, torch.ones(()))
    assert learned  # the ScalarMix got gradient while the biLM stayed fixed
    assert json.loads((root / "reused" / "results.json").read_text())["steps"] == 30


def test_a_saved_biLM_with_its_vocabulary_serves_as_elmo_path(data, tmp_path):
    vocab = Vocabulary.build(line.split("\t")[0] for line in data.read_text().splitlines())
    torch.manual_seed(0)
    bilm = ELMo(ELMoConfig(vocab_size=len(vocab), hidden_size=8, num_layers=1))
    bilm.save_pretrained(tmp_path / "bilm")
    vocab.save(tmp_path / "bilm" / "vocab.json")
    train(tmp_path / "run", data, "model.arch=elmo", f"model.elmo_path={tmp_path / 'bilm'}", *TINY, *STEPS)
    torch.testing.assert_close(load_pretrained(tmp_path / "run").elmo.state_dict(), bilm.state_dict(), rtol=0, atol=0)


def test_a_biLM_of_other_sizes_or_a_run_without_one_is_one_line(pretrained, data, tmp_path):
    root, _ = pretrained
    settings = [f"data.train_path={data}", "model.arch=elmo", f"model.elmo_path={root / 'first'}", *STEPS]
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--set", *settings, "model.elmo_hidden_size=16")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert "model.elmo_path holds a biLM of other sizes: vocab_size=" in result.err
    assert "hidden_size=8 (model: 16)" in result.err and not (tmp_path / "run").exists()
    train(tmp_path / "static", data, "model.arch=static", *TINY[:2], *STEPS)  # the static arm has no biLM layers
    settings[2] = f"model.elmo_path={tmp_path / 'static'}"
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--set", *settings, *TINY)
    assert_error(result, f"{tmp_path / 'static'}: holds a 'seq2vec_classifier' model, not an ELMo")


def test_elmo_path_is_refused_for_an_arch_that_is_not_elmo(tmp_path):
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--set", "model.elmo_path=/nonexistent")
    assert_error(result, "--set model.elmo_path: does not apply to model.arch=bilstm (a key of model.arch=elmo)")
    assert not (tmp_path / "run").exists()
