"""``seqlab compare``: a tiny comparison writes its report; an LSTM solves a short copy task; bad input, one line."""

import json
import os

import pytest
from cli_helpers import assert_error, run_cli

PNG = b"\x89PNG\r\n\x1a\n"
CPUS = os.cpu_count()
TINY = ("--params", 3000, "--max-steps", 6, "--eval-every", 3, "--test-size", 8, "--batch-size", 4)


def test_tiny_comparison_writes_report_pages_numbers_and_pictures(tmp_path):
    out = tmp_path / "report"
    result = run_cli("compare", "--task", "adding", "--lags", "4,6", "--archs", "rnn,transformer", *TINY, "--out", out)
    assert result.code == 0, result.err
    assert [line.split()[:2] for line in result.out.splitlines()[2:6]] == [
        ["rnn", "4"],
        ["transformer", "4"],
        ["rnn", "6"],
        ["transformer", "6"],
    ]
    images = ["curves_lag4.png", "curves_lag6.png", "metric_vs_lag.png"]
    for name in images:
        assert (out / name).read_bytes()[:8] == PNG
    markdown = (out / "report.md").read_text()
    assert markdown.count("\n| rnn |") == 2 and markdown.count("\n| transformer |") == 2
    assert all(f"![{name}]({name})" in markdown for name in images)
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3 and "<td>transformer</td>" in page
    assert 'src="curves' not in page  # self-contained: no links to the PNG files
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["task"] == "adding"
    runs = results["runs"]
    assert [(r["arch"], r["lag"]) for r in runs] == [("rnn", 4), ("transformer", 4), ("rnn", 6), ("transformer", 6)]
    for run in runs:
        assert run["steps"] == 6 and len(run["losses"]) == 6
        assert [v[0] for v in run["validations"]] == [3, 6]
        assert run["final_metric"] == run["validations"][-1][2]
        assert abs(run["parameters"] - 3000) <= 300 and run["peak_bytes"] > 0 and run["tokens_per_s"] > 0


def test_tcn_runs_beside_gru_and_reports_its_receptive_field(tmp_path):
    out = tmp_path / "report"
    result = run_cli(
        "compare", "--task", "copy", "--lags", "3", "--symbols", 2, "--archs", "gru,tcn", *TINY, "--out", out
    )
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "receptive field" in lines[0]
    # copy at lag 3 with 2 symbols: T = 7 steps, read whole by 2 levels of kernel 3 (R = 1 + 2 * 2 * 3 = 13).
    assert lines[2].split()[:2] == ["gru", "3"] and "all" in lines[2].split()
    assert lines[3].split()[:2] == ["tcn", "3"] and "13" in lines[3].split()
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [(r["arch"], r["receptive_field"]) for r in runs] == [("gru", None), ("tcn", 13)]
    assert abs(runs[1]["parameters"] - 3000) <= 300 and runs[1]["steps"] == 6


def test_lstm_solves_the_copy_task_at_lag_5(tmp_path):
    result = run_cli(
        "compare",
        "--task",
        "copy",
        "--lags",
        5,
        "--symbols",
        2,
        "--archs",
        "lstm",
        "--params",
        10_000,
        "--lr",
        0.01,
        "--batch-size",
        64,
        "--max-steps",
        600,
        "--out",
        tmp_path / "copy",
    )
    assert result.code == 0, result.err
    (run,) = json.loads((tmp_path / "copy" / "results.json").read_text())["runs"]
    assert run["solved_at"] is not None and run["solved_at"] <= 600, run["validations"]
    assert run["final_metric"] >= 99.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--archs", "lstm,cnn"),
            "--archs 'lstm,cnn': choose from rnn, gru, lstm, transformer, tcn, ssm, gru_textbook",
        ),
        (("--lags", "10,x"), "--lags '10,x': expected comma-separated integers"),
        (("--lags", "1"), "--lags: lag (1) must be >= 2 for the adding task"),
        (("--max-steps", 0), "--max-steps (0) must be >= 1"),
        (("--threads", 99_999), f"--threads (99999) must be an integer in [1, {CPUS}], this machine's CPUs"),
        (("--params", 10**12), "--params (1000000000000) must be <= 1000000000 (MAX_PARAMETERS, a model's limit)"),
        (("--time-budget", -1), "--time-budget (-1.0) must be > 0"),
        (
            ("--params", 40, "--archs", "transformer"),
            "no transformer width has about 40 parameters: the closest, width 2, has 161 (more than 10% away)",
        ),
    ],
)
def test_bad_arguments_end_in_one_line_and_write_nothing(tmp_path, argv, message):
    out = tmp_path / "never"
    assert_error(run_cli("compare", "--task", "adding", *argv, "--out", out), message)
    assert not out.exists()


def test_unknown_task_and_existing_output(tmp_path):
    assert_error(
        run_cli("compare", "--task", "sort"),
        "seqlab compare: argument --task: invalid choice: 'sort' (choose from 'copy', 'adding')",
    )
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    result = run_cli("compare", "--task", "adding", *TINY, "--out", tmp_path / "full")
    assert_error(result, f"--out {tmp_path / 'full'}: already exists and is not empty; pass --overwrite to replace it")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def test_the_state_space_model_runs_beside_a_recurrent_one_on_the_copy_task(tmp_path):
    out = tmp_path / "report"
    result = run_cli("compare", "--task", "copy", "--lags", "4", "--archs", "gru,ssm", *TINY, "--out", out)
    assert result.code == 0, result.err
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [run["arch"] for run in runs] == ["gru", "ssm"]
    ssm = runs[1]
    assert ssm["steps"] == 6 and abs(ssm["parameters"] - 3000) <= 300 and 0 <= ssm["final_metric"] <= 100
    assert "\n| ssm |" in (out / "report.md").read_text()


def test_recipe_is_trained_once_per_arch(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the lord said unto moses and aaron in the land of egypt\n" * 40)
    tiny = [
        f"data.train_path={corpus}",
        "data.batches_per_epoch=3",
        "data.valid_tokens=128",
        "train.batch_size=4",
        "model.num_layers=1",
        "model.d_model=16",
        "model.num_heads=2",
        "model.context_length=16",
        "model.hidden_size=16",
        "model.embedding_size=16",
        "model.rnn_layers=1",
        "data.bptt_len=8",
        "model.state_size=8",
    ]
    out = tmp_path / "lm"
    settings = [item for setting in tiny for item in ("--set", setting)]
    archs = ["gpt", "lstm", "ssm"]
    result = run_cli("compare", "--recipe", "lm", "--archs", ",".join(archs), "--max-steps", 4, *settings, "--out", out)
    assert result.code == 0, result.err
    assert [line.split()[0] for line in result.out.splitlines()[2:5]] == archs
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert set(runs) == set(archs)
    for arch in archs:
        assert (out / arch / "metrics.jsonl").is_file()
        assert runs[arch]["parameters"] > 0 and "test_perplexity" in runs[arch]["results"]
    assert (out / "curves.png").read_bytes()[:8] == PNG
    assert 'src="data:image/png;base64,' in (out / "report.html").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--recipe", "lm", "--archs", "gpt,cnn"),
            "--archs 'gpt,cnn': choose from gpt, lstm, gru, gru_textbook, rnn, tcn, ssm",
        ),
        (("--recipe", "lm", "--lags", "10"), "--lags applies to --task runs; give a recipe's sizes with --set"),
        (("--recipe", "lm", "--params", 9), "--params applies to --task runs; give a recipe's sizes with --set"),
        (("--recipe", "vowels"), "--recipe vowels: its config has no model.arch choice to compare"),
        (
            ("--task", "copy", "--set", "model.arch=gpt"),
            "--set applies to --recipe runs; a --task run takes its sizes from the options",
        ),
        (("--task", "copy", "--recipe", "lm"), "seqlab compare: argument --recipe: not allowed with argument --task"),
    ],
)
def test_bad_recipe_arguments(tmp_path, argv, message):
    out = tmp_path / "never"
    assert_error(run_cli("compare", *argv, "--out", out), message)
    assert not out.exists()
