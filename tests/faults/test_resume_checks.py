"""Resume checks what it continues: the best model is never replaced by fresh weights, and a resume whose
``recipe.json`` was edited, whose data changed, or whose relative data path resolves elsewhere is refused in one
line with nothing changed. A training checkpoint written before these checks still resumes."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import assert_error, run_cli
from faults.helpers import Killed, g2p_config, kill_at_micro_batch, resume, train

from seqlab.files import LOCK_FILE
from seqlab.recipes.base import DATA_KEY, RECIPE_KEY
from seqlab.training.checkpoint import STATE_FILE, load_training_state, save_training_state

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` with the SHA-256 of a file's bytes, or "dir" (the run lock: "lock", its holder
    line changes with every run that takes it)."""
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else "lock"
        if p.name == LOCK_FILE
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def killed(tmp_path_factory, dictionary) -> Path:
    """A g2p run killed at its 13th micro-batch: after validations at steps 5 and 10 saved a best model, and the
    checkpoint of step 12. Its data file lies beside it."""
    root = tmp_path_factory.mktemp("killed")
    data = root / "words.dict"
    shutil.copy(dictionary, data)
    with pytest.MonkeyPatch.context() as patch:
        kill_at_micro_batch(patch, 13)
        with pytest.raises(Killed):
            train("g2p", g2p_config(data), root / "run")
    return root


@pytest.fixture
def run(killed, tmp_path) -> Path:
    """A copy of the killed run (and its data), to resume."""
    shutil.copytree(killed, tmp_path, dirs_exist_ok=True)
    return tmp_path / "run"


def retarget(run: Path, data: Path) -> None:
    """Point the run's recipe.json and training checkpoint at the data file ``data`` (a copied run's data)."""
    recipe = json.loads((run / "recipe.json").read_text())
    for split in ("train", "valid", "test"):
        recipe["config"]["data"][f"{split}_path"] = str(data)
    (run / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    state = load_training_state(run / STATE_FILE)
    state[RECIPE_KEY]["config"] = recipe["config"]
    state[DATA_KEY] = {key: {**value, "path": str(data.resolve())} for key, value in state[DATA_KEY].items()}
    save_training_state(run / STATE_FILE, state)


@pytest.fixture
def resumable(run) -> Path:
    retarget(run, run.parent / "words.dict")
    return run


def test_a_resume_killed_at_once_keeps_the_best_model(resumable, monkeypatch):
    best = (resumable / "model.safetensors").read_bytes()
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 1)
        with pytest.raises(Killed):
            resume("g2p", resumable)
    assert (resumable / "model.safetensors").read_bytes() == best
    resume("g2p", resumable)  # and it still resumes to the end
    assert (resumable / "results.json").exists()


def test_a_resume_with_an_edited_recipe_json_is_refused(resumable):
    recipe = json.loads((resumable / "recipe.json").read_text())
    recipe["config"]["model"]["hidden_size"] = 32
    (resumable / "recipe.json").write_text(json.dumps(recipe))
    before = tree(resumable.parent)
    assert_error(
        run_cli("train", "--resume", resumable, "--no-progress"),
        f"--resume {resumable}: recipe.json does not match the training checkpoint (model.hidden_size: 32 in "
        "recipe.json, 16 in the checkpoint); restore the run's files, or train a new run",
    )
    assert tree(resumable.parent) == before


def test_a_resume_with_another_recipes_recipe_json_is_refused(resumable):
    shutil.copy(FIXTURES / "lm_gpt_9a192c4" / "recipe.json", resumable / "recipe.json")
    before = tree(resumable.parent)
    assert_error(
        run_cli("train", "--resume", resumable, "--no-progress"),
        f"--resume {resumable}: recipe.json names the lm recipe, but the training checkpoint is of a g2p run",
    )
    assert tree(resumable.parent) == before


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda text: text + "ZOO  Z UW1\n", "size {now} now, {then} then"),
        (lambda text: text[:-2] + ("Z" if text[-2] != "Z" else "S") + "\n", "sha256 {now} now, {then} then"),
    ],
)
def test_a_resume_on_changed_data_is_refused(resumable, change, what):
    data = resumable.parent / "words.dict"
    fingerprint = load_training_state(resumable / STATE_FILE)[DATA_KEY]["data.train_path"]
    data.write_text(change(data.read_text()))
    before = tree(resumable.parent)
    result = run_cli("train", "--resume", resumable, "--no-progress")
    key = "size" if what.startswith("size") else "sha256"
    now = data.stat().st_size if key == "size" else hashlib.sha256(data.read_bytes()).hexdigest()
    assert_error(
        result,
        f"--resume {resumable}: data.train_path: {data.resolve()} changed since the run was trained "
        f"({what.format(now=now, then=fingerprint[key])}); restore it, or train a new run",
    )
    assert tree(resumable.parent) == before


def test_a_relative_data_path_resolving_elsewhere_is_refused(tmp_path, dictionary, monkeypatch):
    started, elsewhere = tmp_path / "started", tmp_path / "elsewhere"
    for directory in (started, elsewhere):
        directory.mkdir()
        shutil.copy(dictionary, directory / "words.dict")
    (elsewhere / "words.dict").write_text("CAT  K AE1 T\n" * 30)  # another file of the same name
    monkeypatch.chdir(started)
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 5)
        with pytest.raises(Killed):
            train("g2p", g2p_config(Path("words.dict")), tmp_path / "run")
    monkeypatch.chdir(elsewhere)
    before = tree(tmp_path)
    assert_error(
        run_cli("train", "--resume", tmp_path / "run", "--no-progress"),
        f"--resume {tmp_path / 'run'}: data.train_path ('words.dict') resolves to {elsewhere / 'words.dict'} here, "
        f"but the run was trained on {started / 'words.dict'}; resume from the directory the run was started in",
    )
    assert tree(tmp_path) == before
    monkeypatch.chdir(started)
    assert run_cli("train", "--resume", tmp_path / "run", "--no-progress").code == 0


def without_checks(run: Path) -> None:
    """Make the run's training checkpoint one written before resume checks: no config, no data fingerprints."""
    state = load_training_state(run / STATE_FILE)
    del state[RECIPE_KEY], state[DATA_KEY]
    save_training_state(run / STATE_FILE, state)


def test_a_checkpoint_from_before_the_checks_still_resumes(resumable):
    without_checks(resumable)
    result = run_cli("train", "--resume", resumable, "--no-progress")
    assert result.code == 0, result.err
    assert "the training checkpoint predates data fingerprints; the data files are not checked" in result.err
    assert DATA_KEY in load_training_state(resumable / STATE_FILE)  # checked from now on


def test_a_checkpoint_from_before_the_checks_refuses_another_model(resumable):
    without_checks(resumable)
    recipe = json.loads((resumable / "recipe.json").read_text())
    recipe["config"]["model"]["hidden_size"] = 32
    (resumable / "recipe.json").write_text(json.dumps(recipe))
    before = tree(resumable.parent)
    result = run_cli("train", "--resume", resumable, "--no-progress")
    assert result.code == 2 and result.err.splitlines()[-1].startswith(
        f"seqlab: error: --resume {resumable}: recipe.json describes another model than the training checkpoint "
        "(parameter "
    ), result.err
    assert tree(resumable.parent) == before


def test_a_run_whose_data_lies_inside_it_resumes(run):
    """Only a replacement must not hold its inputs: a resume deletes nothing."""
    shutil.copy(run.parent / "words.dict", run / "words.dict")
    retarget(run, run / "words.dict")
    result = run_cli("train", "--resume", run, "--no-progress")
    assert result.code == 0, result.err
