"""The vec2seq recipe through the command line, on generated names whose class fixes their letters: the samples
carry their class by the checker, predict and generate reproduce with a seed and honour the class, evaluate equals
an independent computation, bad input gets one line."""

import json
import math
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.data.vocab import Vocabulary
from seqlab.errors import ConfigError
from seqlab.models import ConditionedRNNGenerator, ConditionedRNNGeneratorConfig
from seqlab.recipes import load_system, vec2seq
from seqlab.recipes.common.labelled_text import LabelledSplits
from seqlab.recipes.system import GenerationRequest, NBestSource, SystemOptions
from seqlab.recipes.vec2seq.system import PREDICT_SAMPLES, Vec2SeqSystem
from seqlab.recipes.vec2seq.training import Vec2SeqTraining

LETTERS = {"abc": "abc", "mno": "mno", "xyz": "xyz"}
TINY = ["model.hidden_size=16", "model.embedding_size=8", "model.class_embedding_size=4"]
STEPS = ["train.max_steps=120", "train.lr=0.02", "train.batch_size=32", "checker.max_steps=60", "checker.lr=0.02"]
SAMPLE = ["sample.samples_per_class=20", "sample.checker_hidden_size=8", "sample.checker_embedding_size=8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = random.Random(0)
    lines = []
    for label, letters in LETTERS.items():
        for _ in range(80):
            lines.append("".join(rng.choice(letters) for _ in range(rng.randint(3, 6))).capitalize() + f"\t{label}")
    path = tmp_path_factory.mktemp("data") / "names.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "vec2seq"
    settings = [f"data.train_path={data}", *TINY, *STEPS, *SAMPLE]
    result = run_cli("train", "vec2seq", "--out", out, "--no-progress", "--set", *settings)
    assert result.code == 0, result.err
    return out


def test_the_samples_carry_their_class(run):
    results = json.loads((run / "results.json").read_text())
    assert results["samples"] == 60 and results["chance_accuracy"] == pytest.approx(100 / 3)
    assert results["real_class_accuracy"] > 90.0
    assert results["sample_class_accuracy"] > 80.0
    assert 0.0 <= results["novelty"] <= 100.0 and 0.0 < results["uniqueness"] <= 100.0


def test_predict_is_reproducible_and_each_sample_uses_its_class_letters(run):
    first = run_cli("predict", run, "ABC", "xyz", "--nbest", "4")
    assert first.code == 0, first.err
    assert run_cli("predict", run, "ABC", "xyz", "--nbest", "4").out == first.out
    rows = [line.split("\t") for line in first.out.splitlines()]
    assert [label for label, _ in rows] == ["abc"] * 4 + ["xyz"] * 4
    in_class = [set(name.lower()) <= set(LETTERS[label]) for label, name in rows]
    assert sum(in_class) >= 6


def test_generate_takes_a_class_and_a_prefix_and_a_seed_reproduces(run):
    first = run_cli("generate", run, "--prompt", "mno:Mo", "--num-return-sequences", "3", "--seed", "7")
    assert first.code == 0, first.err
    assert run_cli("generate", run, "--prompt", "mno:Mo", "--num-return-sequences", "3", "--seed", "7").out == first.out
    lines = first.out.splitlines()
    assert lines[::2] == [f"--- sample {i}/3 ---" for i in (1, 2, 3)]
    assert [line[:6] for line in lines[1::2]] == ["mno:Mo"] * 3  # the prompt, then the text after its prefix
    beam = run_cli("generate", run, "--prompt", "abc", "--num-beams", "3")
    assert beam.code == 0 and len(beam.out.splitlines()) == 1 and beam.out.startswith("abc")


def test_generate_streams_one_finished_chunk_per_text_after_the_prefix_as_sample_draws_it(run):
    system = Vec2SeqSystem.load(run)
    request = GenerationRequest("mno:Mo", num_return_sequences=3, seed=7, temperature=0.5)
    chunks = list(system.generate(request))
    assert [(c.index, c.finished) for c in chunks] == [(0, True), (1, True), (2, True)]
    texts = system.sample([1, 1, 1], torch.Generator().manual_seed(7), prefix="Mo", temperature=0.5)
    assert ["Mo" + c.text for c in chunks] == texts
    greedy = list(system.generate(GenerationRequest("abc", do_sample=False)))
    assert greedy == list(system.generate(GenerationRequest("abc", do_sample=False, seed=3)))


def test_predict_draws_nbest_samples_of_each_class_from_the_options(run):
    system = Vec2SeqSystem.load(run, SystemOptions(nbest=2))
    predictions = system.predict(["abc", "XYZ"])
    assert [(p.label, len(p.samples)) for p in predictions] == [("abc", 2), ("xyz", 2)]
    seed = system.config.sample.seed
    samples = [system.sample([c, c], torch.Generator().manual_seed(seed)) for c in (0, 2)]
    assert [list(p.samples) for p in predictions] == samples
    assert predictions[0].lines() == [f"abc\t{samples[0][0]}", f"abc\t{samples[0][1]}"]
    assert len(Vec2SeqSystem.load(run).predict(["abc"])[0].samples) == PREDICT_SAMPLES


def test_the_samples_of_an_input_do_not_depend_on_the_other_inputs_of_the_call(run):
    """What lets a server batch predict requests: each request gets what it gets alone."""
    system = Vec2SeqSystem.load(run, SystemOptions(nbest=3))
    together = system.predict(["abc", "xyz", "ABC"])
    assert together == [*system.predict(["abc"]), *system.predict(["xyz"]), *system.predict(["abc"])]
    assert len(set(together[0].samples)) > 1  # the samples of one input still differ from each other


def test_a_served_request_sets_the_samples_per_class_and_gets_what_a_run_loaded_with_it_predicts(run):
    system = load_system(run)
    assert isinstance(system, NBestSource) and system.with_search() is system
    for nbest in (1, 3):
        loaded = Vec2SeqSystem.load(run, SystemOptions(nbest=nbest)).predict(["abc", "xyz"])
        assert system.with_search(nbest=nbest).predict(["abc", "xyz"]) == loaded
        assert system.with_search(num_beams=1, nbest=nbest).nbest == nbest
    assert system.nbest == PREDICT_SAMPLES  # the run's own, unchanged
    with pytest.raises(
        ConfigError, match=r"^num_beams \(2\) must be 1: this model samples its texts, it searches no beam$"
    ):
        system.with_search(num_beams=2)
    with pytest.raises(ConfigError, match=r"^nbest \(0\) must be >= 1$"):
        system.with_search(nbest=0)
    fastapi = pytest.importorskip("fastapi.testclient", reason="the [serve] extra is not installed")
    from seqlab.serving import create_app, load_models

    client = fastapi.TestClient(create_app(load_models([run], nbest=5)))
    answer = client.post("/v1/predict", json={"model": run.name, "inputs": ["mno"], "nbest": 2}).json()
    loaded = Vec2SeqSystem.load(run, SystemOptions(nbest=2)).predict(["mno"])
    assert [p["lines"] for p in answer["predictions"]] == [p.lines() for p in loaded]
    refused = client.post("/v1/predict", json={"model": run.name, "inputs": ["mno"], "num_beams": 3})
    assert refused.status_code == 400
    assert refused.json() == {"error": "num_beams (3) must be 1: this model samples its texts, it searches no beam"}


def test_the_validation_loss_is_the_token_mean_of_the_validation_texts():
    vocab = Vocabulary.build(["abc", "ab"])
    labels = ["x", "y"]
    torch.manual_seed(0)
    config = vec2seq.Config()
    model = ConditionedRNNGenerator(
        ConditionedRNNGeneratorConfig(vocab_size=len(vocab), num_classes=2, hidden_size=8, embedding_size=4)
    ).eval()
    ids = [vocab.encode(t, add_bos=True, add_eos=True) for t in ("abc", "ab", "b")]
    classes = [0, 1, 1]
    system = Vec2SeqSystem(model, vocab, labels, config)
    data = LabelledSplits([], [], [], "hand-made")
    training = Vec2SeqTraining(system, data, {"train": (ids, classes), "valid": (ids, classes)})
    total, count = 0.0, 0
    with torch.no_grad():
        for row, c in zip(ids, classes, strict=True):
            log_probs = torch.log_softmax(model(torch.tensor([row[:-1]]), torch.tensor([c])).logits, -1)[0]
            total -= sum(log_probs[t, row[t + 1]].item() for t in range(len(row) - 1))
            count += len(row) - 1
    assert training.validate(model)["valid_loss"] == pytest.approx(total / count, rel=1e-6)
    batch = next(training.train_batches(0, torch.Generator().manual_seed(0), 3))
    assert training.loss(model, batch).num_tokens == count  # every character and end token, no padding


def test_evaluate_equals_an_independent_computation(run, data):
    result = run_cli("evaluate", run, "--data", data, "--json")
    assert result.code == 0, result.err
    model, vocab = ConditionedRNNGenerator.from_pretrained(run).eval(), Vocabulary.load(run / "vocab.json")
    labels = json.loads((run / "labels.json").read_text())["labels"]
    total, count = 0.0, 0
    with torch.no_grad():
        for line in data.read_text().splitlines():
            text, label = line.split("\t")
            ids = vocab.encode(text, add_bos=True, add_eos=True)
            log_probs = torch.log_softmax(
                model(torch.tensor([ids[:-1]]), torch.tensor([labels.index(label)])).logits, -1
            )
            total -= sum(log_probs[0, t, ids[t + 1]].item() for t in range(len(ids) - 1))
            count += len(ids) - 1
    scores = json.loads(result.out)
    assert scores["nats_per_char"] == pytest.approx(total / count, rel=1e-5)
    assert scores["bits_per_char"] == pytest.approx(total / count / math.log(2), rel=1e-5)


def test_bad_input_gets_one_line(run):
    assert_error(run_cli("predict", run, "klingon"), "inputs: unknown class 'klingon' (known: abc, mno, xyz)")
    assert_error(run_cli("generate", run, "--prompt", "abc:Q!"), "--prompt: characters the model never saw: '!' 'Q'")
    assert_error(
        run_cli("generate", run, "--prompt", "abc", "--num-beams", "2", "--temperature", "0.5"),
        "num_beams (2) > 1 finds the most likely text; it takes no sampling setting",
    )
    assert_error(
        run_cli("generate", run, "--prompt", "abc", "--num-beams", "2", "--num-return-sequences", "2"),
        "num_beams (2) > 1 finds the one most likely text; num_return_sequences (2) must be 1",
    )
    assert_error(
        run_cli("generate", run, "--prompt", "abc", "--stop", "x"),
        "--stop: a vec2seq sample ends at its end token; generate takes no stop string",
    )
    assert run_cli("recipes", "vec2seq").out.startswith("vec2seq: a name generated")
