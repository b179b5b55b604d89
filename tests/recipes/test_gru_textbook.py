"""The textbook GRU (``gru_textbook``) in every recipe that takes a recurrent cell: a few training steps through
the command line, the run's saved config names the cell, the loaded model runs textbook cells (the two GRU forms
have the same parameter shapes, so a loader that dropped the name would load silently into the other form), and a
saved copy of the loaded run predicts what the run predicts. A cell name that no layer has is one line listing the
accepted ones."""

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_error, run_cli
from torch import nn

from seqlab.nn import GRUCell
from seqlab.recipes import load_system

CELLS = "rnn, gru, gru_textbook, lstm"


def g2p_run(folder: Path) -> tuple[list[str], list[str]]:
    rng = random.Random(0)
    letters = {"a": "AE", "b": "B", "d": "D", "k": "K", "o": "OW", "s": "S", "t": "T"}
    words = {"".join(rng.choice(sorted(letters)) for _ in range(rng.randint(2, 5))) for _ in range(40)}
    path = folder / "words.dict"
    path.write_text("".join(f"{w.upper()}  {' '.join(letters[c] for c in w)}\n" for w in sorted(words)))
    data = [f"data.{split}_path={path}" for split in ("train", "valid", "test")]
    settings = ["model.arch=rnn", "model.hidden_size=16", "model.embedding_size=8", "decode.num_beams=1"]
    return [*data, *settings, "model.cell=gru_textbook", "train.max_steps=3"], ["BADTOK", "SOTA"]


def lm_run(folder: Path) -> tuple[list[str], list[str]]:
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran"]
    path = folder / "corpus.txt"
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(8)).capitalize() + ".\n" for _ in range(120)))
    settings = ["model.hidden_size=16", "model.embedding_size=8", "model.rnn_layers=2", "data.bptt_len=8"]
    steps = ["train.max_steps=3", "data.batches_per_epoch=3", "train.batch_size=4", "data.valid_tokens=64"]
    config = [f"data.train_path={path}", "model.arch=gru_textbook", *settings, *steps, "decode.max_new_tokens=12"]
    return config, ["The cat", "A dog"]


def tagger_run(folder: Path) -> tuple[list[str], list[str]]:
    rng = random.Random(0)
    lines = []
    for i in range(60):
        phonemes = [f"{rng.choice('KST')} {rng.choice(('AA', 'IY', 'UW'))}{int(j == 0)}" for j in range(2)]
        lines.append(f"w{i}  {' '.join(phonemes)} T")
    path = folder / "dict.txt"
    path.write_text("\n".join(lines) + "\n")
    settings = ["model.hidden_size=8", "model.embedding_size=8", "model.num_layers=1", "model.cell=gru_textbook"]
    return [f"data.train_path={path}", *settings, "train.max_steps=3"], ["K AA S IY T", "T UW K AA T"]


def forecast_run(folder: Path) -> tuple[list[str], list[str]]:
    path = folder / "sine.txt"
    path.write_text("".join(f"{np.sin(i / 3):.5f}, {i / 100:.3f}\n" for i in range(120)))
    data = [f"data.path={path}", "data.season=12", "data.input_length=12", "data.horizon=3", "eval.arima=false"]
    model = ["model.arch=gru_textbook", "model.hidden_size=8", "model.num_layers=2"]
    return [*data, *model, "train.max_steps=3"], [str(path)]


def translate_run(folder: Path) -> tuple[list[str], list[str]]:
    rng = random.Random(0)
    lexicon = {"the": "ka", "cat": "mipo", "dog": "rulo", "sees": "tenu", "a": "o", "bird": "fesh"}
    src = [" ".join(rng.choice(sorted(lexicon)) for _ in range(rng.randint(2, 4))) for _ in range(60)]
    (folder / "src.txt").write_text("".join(f"{s}\n" for s in src))
    (folder / "tgt.txt").write_text("".join(" ".join(lexicon[w] for w in reversed(s.split())) + "\n" for s in src))
    data = [f"data.{prefix}src={folder / 'src.txt'}" for prefix in ("", "valid_", "test_")]
    data += [f"data.{prefix}tgt={folder / 'tgt.txt'}" for prefix in ("", "valid_", "test_")]
    model = ["model.arch=rnn", "model.cell=gru_textbook", "model.hidden_size=16", "model.embedding_size=8"]
    settings = ["data.bpe_size=300", "decode.num_beams=2", "decode.max_length=12", "train.max_steps=3"]
    return [*data, *model, *settings], ["the cat sees a bird", "a dog"]


def vec2seq_run(folder: Path) -> tuple[list[str], list[str]]:
    rng = random.Random(0)
    lines = [
        "".join(rng.choice(letters) for _ in range(rng.randint(3, 6))).capitalize() + f"\t{letters}"
        for letters in ("abc", "xyz")
        for _ in range(40)
    ]
    path = folder / "names.tsv"
    path.write_text("\n".join(lines) + "\n")
    model = ["model.cell=gru_textbook", "model.hidden_size=16", "model.embedding_size=8"]
    model.append("model.class_embedding_size=4")
    sample = ["sample.samples_per_class=4", "sample.checker_hidden_size=8", "sample.checker_embedding_size=8"]
    return [f"data.train_path={path}", *model, *sample, "train.max_steps=3", "checker.max_steps=3"], ["abc", "xyz"]


def vowels_run(folder: Path) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(0)
    lines = ["@problemName toy", "@timeStamps false", "@missing false", "@univariate false", "@dimensions 2"]
    lines += ["@equalLength false", "@classLabel true a b", "@data"]
    for i in range(12):
        series = rng.normal(size=(2, int(rng.integers(3, 8)))) + (i % 2)
        lines.append(":".join([*(",".join(f"{v:.4f}" for v in channel) for channel in series), "ab"[i % 2]]))
    path = folder / "toy.ts"
    path.write_text("\n".join(lines) + "\n")
    model = ["model.cell=gru_textbook", "model.hidden_size=8", "train.batch_size=4", "train.max_steps=3"]
    return [f"data.train_path={path}", f"data.test_path={path}", *model], [str(path)]


RECIPES: dict[str, Callable[[Path], tuple[list[str], list[str]]]] = {
    "g2p": g2p_run,
    "lm": lm_run,
    "tagger": tagger_run,
    "forecast": forecast_run,
    "translate": translate_run,
    "vec2seq": vec2seq_run,
    "vowels": vowels_run,
}


def gru_cells(system: object) -> list[GRUCell]:
    """The GRU cells of every module the loaded system holds."""
    modules = [value for value in vars(system).values() if isinstance(value, nn.Module)]
    return [m for module in modules for m in module.modules() if isinstance(m, GRUCell)]


def lines(system, inputs: list[str]) -> list[str]:
    return [line for prediction in system.predict(inputs) for line in prediction.lines()]


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_trains_saves_and_loads_the_textbook_gru_and_predicts_identically(tmp_path, recipe):
    settings, inputs = RECIPES[recipe](tmp_path)
    out = tmp_path / "run"
    result = run_cli("train", recipe, "--out", out, "--no-progress", "--set", *settings)
    assert result.code == 0, result.err
    assert '"gru_textbook"' in (out / "recipe.json").read_text() + (out / "config.json").read_text()
    system = load_system(out)
    cells = gru_cells(system)
    assert cells and {cell.variant for cell in cells} == {"textbook"}
    predicted = lines(system, inputs)
    system.save(tmp_path / "copy")
    shutil.copy(out / "recipe.json", tmp_path / "copy")  # the training skeleton's file, not the system's
    again = load_system(tmp_path / "copy")
    assert {cell.variant for cell in gru_cells(again)} == {"textbook"}
    assert lines(again, inputs) == predicted
    assert json.loads((tmp_path / "copy" / "config.json").read_text()) == json.loads((out / "config.json").read_text())


@pytest.mark.parametrize(
    ("recipe", "key", "accepted"),
    [
        ("g2p", "model.cell", CELLS),
        ("tagger", "model.cell", CELLS),
        ("translate", "model.cell", CELLS),
        ("vec2seq", "model.cell", CELLS),
        ("vowels", "model.cell", CELLS),
        ("forecast", "model.arch", "gru, gru_textbook, lstm, rnn, transformer, tcn, ssm"),
        ("lm", "model.arch", "gpt, lstm, gru, gru_textbook, rnn, tcn, ssm"),
    ],
)
def test_a_bad_cell_name_lists_the_accepted_ones_in_one_line(tmp_path, recipe, key, accepted):
    settings = ["model.arch=rnn"] if recipe in ("g2p", "translate") else []
    result = run_cli("train", recipe, "--out", tmp_path / "run", "--set", *settings, f"{key}=gru_text")
    assert_error(result, f"--set {key}: 'gru_text' is not one of {accepted}")
    assert not (tmp_path / "run").exists()
