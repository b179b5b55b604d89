"""``seqlab analyze ...`` and ``seqlab plot``: each writes its picture and numbers; bad input ends in one line."""

import csv
import json
from pathlib import Path

import pytest
from cli_helpers import assert_error, run_cli

from seqlab.analysis.exposure import exposure_bias
from seqlab.config import apply_overrides, parse_assignments
from seqlab.data.batching import batch_iterator
from seqlab.data.cmudict import read_cmudict
from seqlab.data.tokenizers import CharTokenizer
from seqlab.models import GPT
from seqlab.recipes import g2p, lm
from seqlab.recipes.saved_run import save_recipe_file
from seqlab.training import MetricsLog
from seqlab.training.records import StepRecord

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
RNN_G2P, TRANSFORMER_G2P = FIXTURES / "g2p_v0_1", FIXTURES / "g2p_transformer_v0_1"
PNG = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG


@pytest.fixture(scope="module")
def gpt_checkpoint(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("gpt")
    tokenizer = CharTokenizer(list("abcdefgh "))
    sizes = ["model.context_length=16", "model.d_model=8", "model.num_heads=2", "model.num_layers=2"]
    config = apply_overrides(lm.Config(), parse_assignments(sizes))
    model = GPT(config.model.model_config(vocab_size=tokenizer.vocab_size))
    lm.LanguageModelSystem(model, tokenizer, config).save(directory)
    save_recipe_file(directory, "lm", config)
    return directory


def test_gradients_compares_three_fresh_cells(tmp_path):
    result = run_cli("analyze", "gradients", "--length", 12, "--hidden-size", 5, "--out", tmp_path / "g")
    assert result.code == 0, result.err
    assert [line.split()[0] for line in result.out.splitlines()[2:5]] == ["rnn", "gru", "lstm"]
    assert_png(tmp_path / "g" / "gradient_flow.png")
    rows = list(csv.DictReader((tmp_path / "g" / "gradient_flow.csv").open()))
    assert len(rows) == 3 * 13
    rnn = [r for r in rows if r["arch"] == "rnn"]
    assert all(float(r["jacobian_norm"]) <= float(r["bound"]) * (1 + 1e-6) for r in rnn)
    assert rows[-1]["gate_product"] and not rows[-1]["bound"]  # the LSTM has gates, no gamma bound


def test_gradients_of_a_checkpoints_recurrent_layer(tmp_path):
    result = run_cli("analyze", "gradients", RNN_G2P, "--length", 5, "--out", tmp_path / "g")
    assert result.code == 0, result.err
    assert json.loads((tmp_path / "g" / "summary.json").read_text())[0]["arch"] == "lstm"


def test_gradient_regimes_draw_each_scale_and_clipping_for_the_largest_above_one(tmp_path):
    out = tmp_path / "g"
    argv = ["--recurrent-scale", "0.5,2", "--scale-by", "spectral_radius", "--input-std", "0.1", "--clip-norm", "0.5"]
    result = run_cli("analyze", "gradients", "--length", 10, "--hidden-size", 4, *argv, "--out", out)
    assert result.code == 0, result.err
    rows = [line.split() for line in result.out.splitlines()[2:8]]
    assert [(r[0], r[1]) for r in rows] == [(a, s) for a in ("rnn", "gru", "lstm") for s in ("0.5", "2")]
    for name in ("gradient_regimes.png", "clipping.png"):
        assert_png(out / name)
    curves = list(csv.DictReader((out / "gradient_regimes.csv").open()))
    assert len(curves) == 6 * 11
    rnn, lstm = [r for r in curves if r["arch"] == "rnn"], [r for r in curves if r["arch"] == "lstm"]
    assert all(float(r["jacobian_norm"]) <= float(r["bound"]) * (1 + 1e-6) for r in rnn)
    assert all(r["eigen_rate"] for r in rnn) and all(r["direct_path"] and r["memory_jacobian_norm"] for r in lstm)
    clipped = [float(r["clipped_grad_norm"]) for r in csv.DictReader((out / "clipping.csv").open())]
    assert len(clipped) == 40


def test_gradient_regimes_of_a_checkpoints_layer_scale_a_copy_of_its_cell(tmp_path):
    before = (RNN_G2P / "model.safetensors").read_bytes()
    argv = ["--recurrent-scale", "2", "--length", 5, "--out", tmp_path / "g"]
    result = run_cli("analyze", "gradients", RNN_G2P, *argv)
    assert result.code == 0, result.err
    assert [r["arch"] for r in json.loads((tmp_path / "g" / "summary.json").read_text())] == ["lstm"]
    assert_png(tmp_path / "g" / "clipping.png")  # the clipped run trains the checkpoint's LSTM cell
    assert (RNN_G2P / "model.safetensors").read_bytes() == before


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "--recurrent-scale (0.0) must be a number > 0 and <= 100"),
        ("0.5,-1", "--recurrent-scale (-1.0) must be a number > 0 and <= 100"),
        ("nan", "--recurrent-scale (nan) must be a number > 0 and <= 100"),
        ("1e9", "--recurrent-scale (1000000000.0) must be a number > 0 and <= 100"),
        ("abc", "seqlab analyze gradients: argument --recurrent-scale: expected comma-separated numbers, got 'abc'"),
    ],
)
def test_a_bad_recurrent_scale_is_one_line_and_writes_nothing(tmp_path, value, message):
    result = run_cli("analyze", "gradients", "--recurrent-scale", value, "--out", tmp_path / "g")
    assert_error(result, message)
    assert not (tmp_path / "g").exists()


def test_attention_of_an_rnn_and_a_transformer_g2p_checkpoint(tmp_path):
    result = run_cli("analyze", "attention", RNN_G2P, "--input", "hello", "--out", tmp_path / "rnn")
    assert result.code == 0, result.err
    assert_png(tmp_path / "rnn" / "attention_decoder_cross.png")
    result = run_cli("analyze", "attention", TRANSFORMER_G2P, "--input", "hello", "--out", tmp_path / "tf")
    assert result.code == 0, result.err
    for group in ("encoder_self", "decoder_self", "decoder_cross"):
        assert_png(tmp_path / "tf" / f"attention_{group}.png")
    record = json.loads((tmp_path / "tf" / "attention.json").read_text())
    assert len(record["maps"]) == 6  # 1 layer each, 2 heads, three kinds
    for m in record["maps"]:
        assert all(abs(sum(row) - 1) < 1e-5 for row in m["weights"])


def test_attention_of_a_gpt(gpt_checkpoint, tmp_path):
    result = run_cli("analyze", "attention", gpt_checkpoint, "--input", "abc deh", "--out", tmp_path / "a")
    assert result.code == 0, result.err
    record = json.loads((tmp_path / "a" / "attention.json").read_text())
    assert len(record["maps"]) == 4 and all(len(m["weights"]) == 7 for m in record["maps"])


def test_positional_and_complexity_write_their_files(tmp_path):
    result = run_cli("analyze", "positional", "--d-model", 16, "--max-len", 32, "--out", tmp_path / "p")
    assert result.code == 0, result.err
    assert json.loads((tmp_path / "p" / "summary.json").read_text())["max_shift_error"] < 1e-5
    assert_png(tmp_path / "p" / "positional.png")
    out = tmp_path / "c"
    result = run_cli(
        "analyze", "complexity", "--lengths", "4,8,16", "--width", 8, "--repeats", 1, "--mode", "inference",
        "--layers", "lstm,attention_fused", "--out", out,
    )  # fmt: skip
    assert result.code == 0, result.err
    assert_png(out / "complexity.png")
    assert len(list(csv.DictReader((out / "complexity.csv").open()))) == 2 * 3
    rows = json.loads((out / "cost_table.json").read_text())["rows"]
    assert [r["layer"] for r in rows] == ["lstm", "attention_fused"] and rows[1]["complexity"] == "O(T^2 D)"


def test_complexity_measures_both_forms_of_the_state_space_block(tmp_path):
    out = tmp_path / "c"
    result = run_cli(
        "analyze", "complexity", "--lengths", "4,8,16", "--width", 8, "--repeats", 1, "--mode", "both",
        "--layers", "gru,ssm_convolution,ssm_recurrent", "--out", out,
    )  # fmt: skip
    assert result.code == 0, result.err
    assert len(list(csv.DictReader((out / "complexity.csv").open()))) == 3 * 2 * 3
    rows = json.loads((out / "cost_table.json").read_text())["rows"]
    assert [(r["layer"], r["complexity"]) for r in rows] == [
        ("gru", "O(T D^2)"),
        ("ssm_convolution", "O(T D (N + log T))"),
        ("ssm_recurrent", "O(T D N)"),
    ]


def test_plot_draws_a_run_directory(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in range(1, 5):
        log.on_step_end(None, StepRecord(step, 1, 2.0 / step, 0.01, 1.0, 8, 50.0, step))
    log.on_validation_end(
        None,
        {
            "epoch": 1,
            "step": 4,
            "train_loss": 1.0,
            "grad_norm": 1.0,
            "lr": 0.01,
            "tokens_per_s": 50.0,
            "per": 9.0,
            "seconds": 4.0,
        },
    )
    result = run_cli("plot", tmp_path, "--out", tmp_path / "plot")
    assert result.code == 0, result.err
    assert "last per" in result.out
    assert_png(tmp_path / "plot" / "training_curves.png")


def test_default_output_directories_are_fresh(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert run_cli("analyze", "positional", "--d-model", 4, "--max-len", 4).code == 0
    assert sorted(p.name for p in (tmp_path / "analysis").iterdir()) == ["positional", "positional-2"]


def test_bad_arguments_end_in_one_line_and_leave_nothing(tmp_path, gpt_checkpoint):
    out, missing = tmp_path / "out", tmp_path / "missing"
    layers = (
        "rnn, gru, lstm, attention_reference, attention_fused, attention_local, attention_linear, ssm_convolution, "
        "ssm_recurrent"
    )
    cases = [
        (("analyze", "gradients", "--length", 0), "--length (0) must be >= 1 and <= 65536"),
        (("analyze", "gradients", "--length", 10**8), "--length (100000000) must be >= 1 and <= 65536"),
        (("analyze", "gradients", "--arch", "rnn,cnn"), "--arch 'rnn,cnn': choose from rnn, gru, lstm, gru_textbook"),
        (("analyze", "gradients", missing), f"{missing}: no such checkpoint directory"),
        (("analyze", "gradients", "--clip-norm", 2), "--scale-by and --clip-norm apply to --recurrent-scale runs"),
        (
            ("analyze", "gradients", "--recurrent-scale", 2, "--clip-norm", "nan"),
            "--clip-norm (nan) must be a finite number > 0",
        ),
        (
            ("analyze", "gradients", RNN_G2P, "--hidden-size", 8),
            "--arch and --hidden-size describe fresh cells; a checkpoint brings its own layer",
        ),
        (
            ("analyze", "gradients", TRANSFORMER_G2P),
            "the model (TransformerSeq2Seq) has no RNN, GRU or LSTM layer to analyse",
        ),
        (("analyze", "attention", missing, "--input", "a"), f"{missing}: no such checkpoint directory"),
        (
            ("analyze", "attention", gpt_checkpoint, "--input", "abc" * 6),
            "--input: 18 tokens, more than the model's context of 16",
        ),
        (("analyze", "positional", "--d-model", 7), "--d-model (7) must be even and >= 2"),
        (("analyze", "complexity", "--lengths", "0,8"), "--lengths: T (0) must be >= 1"),
        (("analyze", "complexity", "--layers", "cnn"), f"--layers 'cnn': choose from {layers}"),
        (("plot", missing), f"{missing}: no such run directory"),
    ]
    for argv, message in cases:
        assert_error(run_cli(*argv, "--out", out), message)
        assert not out.exists()


def test_out_is_never_overwritten_and_must_be_writable(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep")
    assert_error(
        run_cli("analyze", "positional", "--out", tmp_path / "full"),
        f"--out {tmp_path / 'full'}: already exists and is not empty; pass --overwrite to replace it",
    )
    assert_error(  # --overwrite replaces an earlier output of the same analysis only
        run_cli("analyze", "positional", "--max-len", 8, "--out", tmp_path / "full", "--overwrite"),
        f"--out {tmp_path / 'full'}: not a seqlab output (no .seqlab-output or recipe.json); "
        "--overwrite replaces only what `seqlab analyze positional` wrote",
    )
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["mine.txt"]
    (tmp_path / "file").write_text("")
    result = run_cli("analyze", "positional", "--out", tmp_path / "file" / "sub")
    assert_error(result, f"--out {tmp_path / 'file' / 'sub'}: {tmp_path / 'file'} is not a directory")


@pytest.mark.parametrize("checkpoint", [RNN_G2P, TRANSFORMER_G2P])
def test_exposure_of_a_g2p_checkpoint_on_a_file(checkpoint, tmp_path):
    """The command's numbers are exposure_bias of the checkpoint on the file (batched differently), over every
    phoneme and EOS of the file."""
    data = FIXTURES / "train.dict"
    result = run_cli("analyze", "exposure", checkpoint, "--data", data, "--out", tmp_path / "e")
    assert result.code == 0, result.err
    assert_png(tmp_path / "e" / "exposure.png")
    numbers = json.loads((tmp_path / "e" / "exposure.json").read_text())
    system = g2p.G2PSystem.load(checkpoint)
    entries = read_cmudict(data, keep_stress=system.config.data.keep_stress)
    batches = batch_iterator(g2p.encode_pairs(system, entries, source="data"), batch_size=7, shuffle=False)
    phonemes = system.phonemes
    expected = exposure_bias(system.model, batches, pad_id=phonemes.pad_id, eos_id=phonemes.eos_id)
    assert numbers["num_tokens"] == expected.num_tokens == sum(len(p.phonemes) + 1 for p in entries)
    for name in ("teacher_forced_loss", "free_running_loss", "teacher_forced_accuracy", "free_running_accuracy"):
        assert numbers[name] == pytest.approx(getattr(expected, name), rel=1e-5)
    # a difference of two float32 means: its error is absolute (~1e-7 per loss, batched differently), not relative
    assert numbers["loss_gap"] == pytest.approx(expected.free_running_loss - expected.teacher_forced_loss, abs=1e-6)


def test_exposure_needs_a_g2p_run(gpt_checkpoint, tmp_path):
    assert_error(
        run_cli("analyze", "exposure", gpt_checkpoint, "--out", tmp_path / "e"),
        f"{gpt_checkpoint}: a lm run; measuring exposure bias needs a run of g2p",
    )
    assert not (tmp_path / "e").exists()
