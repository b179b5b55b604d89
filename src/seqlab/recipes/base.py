"""What every recipe shares: the ``Recipe`` protocol, the report and the train skeleton.

A recipe is one module of task logic (data, model, metrics) that satisfies :class:`Recipe`. It hands the shared
skeleton (:func:`run_training`) a :class:`TrainingRun`, and the skeleton does the rest the same way for every
task: seed, build, log one summary line, train with best-checkpoint saving, save, test, write ``results.json``.
A run directory holds the model's own files (``config.json``, ``model.safetensors``), whatever the recipe adds
(vocabularies, labels), ``recipe.json`` (the recipe's name and its whole sectioned config) and ``results.json``.
The directory itself (chosen, locked, replaced) is ``seqlab.recipes.run_directory``'s; ``recipe.json`` written and
read back, and the checks a trained run's files pass when it is loaded, are ``seqlab.recipes.saved_run``'s.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch
from torch import nn

from seqlab.config import check_sections, flatten
from seqlab.data.files import DATA_FILE, DataFormat
from seqlab.errors import CheckpointError, ConfigError
from seqlab.files import atomic_write, file_fingerprint
from seqlab.recipes.init_from import InitFromConfig, load_by_name
from seqlab.recipes.run_directory import RECIPE_FILE, RESULTS_FILE, RunDirectory, RunMode
from seqlab.recipes.saved_run import save_recipe_file
from seqlab.recipes.system import System
from seqlab.training.averaging import AverageLastValidated
from seqlab.training.callbacks import MetricsLog, OnCycleEnd, run_dir_callbacks
from seqlab.training.checkpoint import STATE_FILE, load_training_state, save_training_state
from seqlab.training.device import training_device
from seqlab.training.distributed import is_writer
from seqlab.training.lora import adapt_pretrained
from seqlab.training.optim import freeze_parameters
from seqlab.training.seeding import seed_everything
from seqlab.training.strategies import Strategy
from seqlab.training.trainer import LossOutput, Trainer


class Report(NamedTuple):
    """What ``seqlab train`` prints: the results row and (input, reference, prediction) examples from the test data,
    and ``notes``: lines the skeleton logs after testing (how a metric was computed, e.g. sacrebleu's signature)."""

    results: dict[str, float]
    examples: list[tuple[str, str, str]]
    notes: tuple[str, ...] = ()


class Recipe(Protocol):
    """A named task that ``seqlab train`` runs and whose runs ``seqlab evaluate | predict | generate | analyze`` use
    through its ``System``; a module with these members satisfies it.

    Attributes:
        NAME: the registry name (``seqlab train NAME``), also written to ``recipe.json``.
        DESCRIPTION: one line for ``seqlab recipes``.
        Config: a frozen dataclass whose fields are frozen section dataclasses (``data``, ``model``, ``train``, ...)
            with defaults; ``Config()`` is the recipe's default setup. A section may be a choice among typed
            configs (``model: RNNConfig | TransformerConfig``, chosen by ``model.arch``; ``seqlab.config``).
        System: the class of a trained run (``seqlab.recipes.system.System``).
    """

    NAME: str
    DESCRIPTION: str
    Config: type[Any]
    System: type[System]

    def prepare(self, config: Any, *, resume_from: Path | None = None) -> TrainingRun:
        """Read the data, build the model and check everything that can fail, writing nothing; return the
        parts the skeleton (``run_training``) trains with. ``resume_from`` is the run directory a resumed run
        continues: a recipe whose vocabulary is not rebuilt deterministically from its data (bert-mlm's
        WordPiece) reads its own there; the others rebuild theirs and may ignore it.

        Raises: DataError or ConfigError (one line) for bad data or settings.
        """
        ...


# Key of the training state under which a run with train.average_last keeps the weights it will average.
AVERAGED_KEY = "averaged_validations"
RECIPE_KEY = "recipe"  # ... the recipe's name and config it was trained with (a resume refuses an edited recipe.json)
DATA_KEY = "data_files"  # ... the fingerprints of its data files (data_fingerprints; a resume refuses changed data)
# Folder of a run directory with train.cycles > 1 that holds one run directory per cosine cycle, cycle-1, cycle-2, ...
SNAPSHOTS_DIR = "snapshots"
RECIPE_MEMBERS = ("NAME", "DESCRIPTION", "Config", "System", "prepare")  # of Recipe


class TrainingRun(NamedTuple):
    """What a recipe's ``prepare`` hands the skeleton (:func:`run_training`): the config it resolved, the model and
    the task's parts, each a function or a bound method that can be tested alone."""

    config: Any  # the sectioned config the run trains with (``prepare`` may resolve presets), saved in recipe.json
    model: nn.Module
    loss_fn: Callable[[nn.Module, Any], LossOutput]  # (model, batch) -> LossOutput
    train_batches: Callable[[int, torch.Generator, int], Iterable[Any]]  # (epoch, generator, batch_size) -> batches
    validate: Callable[[nn.Module], dict[str, float]]  # model -> {"valid_loss": ..., ...}
    save: Callable[[Path], None]  # writes the model and the task's own files (vocabularies, labels) into a directory
    test: Callable[[], Report]  # scores and examples of the trained model on the test data
    summary: str  # the data that was read, for the log line: "checkpoint: DIR; <summary>; model: N parameters"
    summary_model: str = ""  # a note on the model, appended to the log line (e.g. the architecture or kernel path)
    valid_metric: str = "valid_loss"  # the validation metric, at the best validation, reported in the results
    strategy: Strategy | None = None  # how the trainer turns a batch into a loss; None = FullSequence()
    pretrained: tuple[str, ...] = ()  # parameters the recipe loaded pretrained, trained at train.body_lr_scale


def run_training(
    recipe: Recipe,
    config: Any,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """The train skeleton every recipe shares: train ``recipe`` with its sectioned ``config`` (whose ``train``
    section is a ``TrainConfig``) into the run directory ``out_dir`` ("new", "overwrite" or "resume": ``mode``).

    In order: check and lock ``out_dir`` (``RunDirectory``: it must not hold the run's input files); read the
    training state to resume from and check that ``config`` and the data files are the ones the run was trained
    with (``_check_resume``); seed with ``config.train.seed``; ``recipe.prepare`` (data, model, every check: an
    error leaves no directory); load ``model.init_from`` and freeze ``train.freeze`` (``_initialise``); create the
    run directory with the run's files and ``recipe.json`` and log its summary line (``_open_run``; a resumed run
    keeps its files, its best model above all, until a better one exists); train, saving the best model and the
    training state (with the config and the data files' fingerprints) as it goes, and test the final model
    (``_SavedTraining``); write ``results.json``. Every file is written atomically (``seqlab.files``). In
    data-parallel training rank 0 does all of this; the other ranks read, build and train beside it and write
    nothing (``_train_beside_rank0``).

    Returns: Report(results, examples): the test scores, then the best ``valid_metric``, steps, epochs,
        train_seconds and total_seconds (wall-clock seconds); ``results.json`` adds ``stopped_by``. Ranks
        other than 0 return an empty report.
    Raises:
        ConfigError: ``config`` is not a ``recipe.Config`` or a section is not of its annotated class
            (``seqlab.config.check_sections``).
        CheckpointError: a resume whose ``recipe.json`` or data files differ from those of its training checkpoint,
            or whose model does not fit the checkpoint's (one line naming the key, file or parameter).
    """
    started = time.perf_counter()
    check_sections(config, recipe.Config)  # a config built in Python: a wrong section class fails here, not mid-run
    training_device(config.train.device, config.train.precision)  # refuse an unusable device before writing
    if not is_writer():
        return _train_beside_rank0(recipe, config, out_dir / STATE_FILE if mode == "resume" else None)
    inputs = config_inputs(config)
    directory = RunDirectory(out_dir, mode, inputs=inputs.values())
    directory.lock_target()
    failed = True
    try:
        resume_from = load_training_state(out_dir / STATE_FILE) if mode == "resume" else None
        data = data_fingerprints(inputs)
        if resume_from is not None:
            data = _check_resume(out_dir, recipe.NAME, config, data, resume_from, log)
        seed_everything(config.train.seed)
        run = recipe.prepare(config, resume_from=out_dir if mode == "resume" else None)
        pretrained = _initialise(run, log)  # adapters (train.lora_rank) are part of the model the checkpoint holds
        if resume_from is not None:
            _check_resumed_model(out_dir, run.model, resume_from)
        _open_run(recipe.NAME, run, directory, log)
        saved = {RECIPE_KEY: {"recipe": recipe.NAME, "config": dataclasses.asdict(run.config)}, DATA_KEY: data}
        result = _SavedTraining(recipe.NAME, run, directory, resume_from, log, saved).fit(pretrained, progress)
        row = {**_test_row(run, result), "total_seconds": time.perf_counter() - started}
        results = json.dumps({**row, "stopped_by": result.stopped_by}, indent=2) + "\n"
        atomic_write(directory.path / RESULTS_FILE, results)
        failed = False
    finally:
        directory.close(failed=failed)
    return Report(row, result.tested.examples)


def config_inputs(config: Any) -> dict[str, str]:
    """The paths a sectioned ``config`` reads: ``{"data.train_path": "words.dict", ...}``, every string value that
    names an existing file or directory (data files, ``model.init_from``), as given."""
    found = {}
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        for f in dataclasses.fields(values) if dataclasses.is_dataclass(values) else ():
            value = getattr(values, f.name)
            if isinstance(value, str) and value and os.path.exists(value):
                found[f"{section.name}.{f.name}"] = value
    return found


def data_fingerprints(inputs: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``seqlab.files.file_fingerprint`` (resolved path, size, SHA-256) of each regular file among ``inputs``."""
    return {key: file_fingerprint(path) for key, path in inputs.items() if os.path.isfile(path)}


def _check_resume(
    out_dir: Path,
    name: str,
    config: Any,
    data: dict[str, dict[str, Any]],
    state: dict[str, Any],
    log: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Refuse a resume whose recipe, config (``recipe.json``) or data files are not those its training checkpoint
    was saved with; return the fingerprints to keep saving (the checkpoint's, for a checkpoint that has them).

    Raises: CheckpointError naming the first key or file that differs, with both values.
    """
    where = f"--resume {out_dir}"
    if RECIPE_KEY in state:
        trained = state[RECIPE_KEY]
        if trained["recipe"] != name:
            raise CheckpointError(
                f"{where}: {RECIPE_FILE} names the {name} recipe, but the training checkpoint is of a "
                f"{trained['recipe']} run"
            )
        now, then = (dict(flatten(json.loads(json.dumps(c)))) for c in (dataclasses.asdict(config), trained["config"]))
        for key in sorted(now.keys() & then.keys()):
            if now[key] != then[key]:
                raise CheckpointError(
                    f"{where}: {RECIPE_FILE} does not match the training checkpoint ({key}: {now[key]!r} in "
                    f"{RECIPE_FILE}, {then[key]!r} in the checkpoint); restore the run's files, or train a new run"
                )
    if DATA_KEY not in state:
        log(f"{where}: the training checkpoint predates data fingerprints; the data files are not checked")
        return data
    for key, then in state[DATA_KEY].items():
        given = getattr(getattr(config, key.split(".")[0]), key.split(".")[1], None)
        resolved = os.path.realpath(given) if isinstance(given, str) and given else None
        if resolved != then["path"]:
            raise CheckpointError(
                f"{where}: {key} ({given!r}) resolves to {resolved} here, but the run was trained on {then['path']}; "
                "resume from the directory the run was started in"
            )
        now = data.get(key)
        if now is None:
            raise CheckpointError(f"{where}: {key}: {then['path']} is gone; the run was trained on it")
        for what in ("size", "sha256"):
            if now[what] != then[what]:
                raise CheckpointError(
                    f"{where}: {key}: {then['path']} changed since the run was trained ({what} {now[what]} now, "
                    f"{then[what]} then); restore it, or train a new run"
                )
    return state[DATA_KEY]


def _check_resumed_model(out_dir: Path, model: nn.Module, state: dict[str, Any]) -> None:
    """Refuse a resume whose freshly built model has other parameters or shapes than the training checkpoint's
    (what a checkpoint without a saved config is checked against).

    Raises: CheckpointError naming the first parameter that differs.
    """
    saved, built = state.get("model", {}), model.state_dict()
    for key in sorted(saved.keys() | built.keys()):
        if key not in saved or key not in built or tuple(saved[key].shape) != tuple(built[key].shape):
            then = tuple(saved[key].shape) if key in saved else "absent"
            now = tuple(built[key].shape) if key in built else "absent"
            raise CheckpointError(
                f"--resume {out_dir}: {RECIPE_FILE} describes another model than the training checkpoint (parameter "
                f"{key}: {now} in {RECIPE_FILE}'s model, {then} in the checkpoint); restore the run's files, or train "
                "a new run"
            )


def _open_run(name: str, run: TrainingRun, directory: RunDirectory, log: Callable[[str], None]) -> None:
    """Create the run directory with the run's files and ``recipe.json`` (a resumed run keeps those it has: its
    best model stays until a better one replaces it), and log the run's summary line."""
    path = directory.open()
    if directory.mode != "resume":
        run.save(path)  # vocabularies and tokenizers first: a resumed run reads them instead of rebuilding them
        save_recipe_file(path, name, run.config)
    parameters = sum(p.numel() for p in run.model.parameters())
    note = f", {run.summary_model}" if run.summary_model else ""
    log(f"checkpoint: {directory.target}; {run.summary}; model: {parameters:,} parameters{note}")


class _Fitted(NamedTuple):
    """What the skeleton reports of a finished fit: the trainer's result and the test examples."""

    best: dict[str, float]
    steps: int
    epochs: int
    seconds: float
    stopped_by: str
    tested: Report


class _SavedTraining:
    """A fit whose best model, training state and averages are saved into the run directory as it goes.

    The run's files and ``recipe.json`` are saved each time validation improves, the training state
    (``training_state.safetensors``) at each checkpoint (the first one swaps an overwriting run in). The final model
    is the best one, or with ``train.average_last`` = k the average of the weights at the last k validations
    (``seqlab.training.averaging``; kept in the training state under ``AVERAGED_KEY``, so a resumed run averages the
    same validations). With ``train.cycles`` > 1 the weights at the end of each cosine cycle K are saved as a run
    directory of their own, ``SNAPSHOTS_DIR/cycle-K`` (the run's files and ``recipe.json``), an ensemble member
    (snapshot ensembles, Huang et al. 2017).
    """

    def __init__(
        self,
        name: str,
        run: TrainingRun,
        directory: RunDirectory,
        resume_from: dict[str, Any] | None,
        log: Callable[[str], None],
        saved: dict[str, Any],
    ) -> None:
        self.name, self.run, self.directory, self.resume_from, self.log = name, run, directory, resume_from, log
        self.saved = saved  # what each training checkpoint records beside the trainer's state
        self.logs = run_dir_callbacks(directory.path)
        for callback in self.logs:
            if isinstance(callback, MetricsLog) and resume_from is not None:
                callback.rewind(step=resume_from["run"]["step"], validated_at=resume_from["run"]["validated_at"])
        self.averager = self._averager(run.config.train.average_last)

    def _averager(self, average_last: int | None) -> AverageLastValidated | None:
        if average_last is None:
            return None
        averager = AverageLastValidated(average_last)
        if self.resume_from is not None:
            if AVERAGED_KEY in self.resume_from:
                averager.load_state_dict(self.resume_from[AVERAGED_KEY])
            else:
                self.log("the training checkpoint predates saved averages: averaging the validations after the resume")
        return averager

    def save(self) -> None:
        """Write the run's files and ``recipe.json`` into the run directory."""
        self.run.save(self.directory.path)
        save_recipe_file(self.directory.path, self.name, self.run.config)

    def save_snapshot(self, cycle: int, step: int) -> None:
        """Write the model as it is, the end of cosine cycle ``cycle`` at ``step``, to ``SNAPSHOTS_DIR/cycle-K``."""
        snapshot = Path(SNAPSHOTS_DIR, f"cycle-{cycle}")
        self.run.save(self.directory.path / snapshot)
        save_recipe_file(self.directory.path / snapshot, self.name, self.run.config)
        self.log(f"snapshot of cycle {cycle} (step {step}): {self.directory.target / snapshot}")

    def checkpoint(self, state: dict[str, Any]) -> None:
        """Save the training state (with the averages, config and data fingerprints); the first one swaps an
        overwriting run in."""
        state = {**state, **self.saved}
        if self.averager is not None:
            state = {**state, AVERAGED_KEY: self.averager.state_dict()}
        save_training_state(self.directory.path / STATE_FILE, state)
        if not self.directory.committed:
            moved_to = self.directory.commit()
            for callback in self.logs:
                if isinstance(callback, MetricsLog):
                    callback.path = moved_to / callback.path.name

    def fit(self, pretrained: list[str], progress: bool) -> _Fitted:
        """Train to the end, save the final model (the best, or the average) and test it."""
        run = self.run
        trainer = Trainer(
            run.model,
            run.config.train,
            loss_fn=run.loss_fn,
            train_batches=run.train_batches,
            validate=run.validate,
            on_best=lambda model, record: self.save(),
            progress=progress,
            log=self.log,
            callbacks=[
                *self.logs,
                *([self.averager] if self.averager is not None else []),
                OnCycleEnd(lambda model, cycle, step: self.save_snapshot(cycle, step)),
            ],
            strategy=run.strategy,
            checkpoint=self.checkpoint,
            pretrained=pretrained,
        )
        try:
            result = trainer.fit(resume_from=self.resume_from)
        except CheckpointError as e:
            raise CheckpointError(f"{self.directory.target / STATE_FILE}: {e}") from None
        if self.averager is not None:
            run.model.load_state_dict(self.averager.average())
        self.save()
        tested = run.test()
        for note in tested.notes:
            self.log(note)
        return _Fitted(result.best, result.steps, result.epochs, result.seconds, result.stopped_by, tested)


def _test_row(run: TrainingRun, fitted: _Fitted) -> dict[str, float]:
    """The results row: the test scores, the best validation metric, steps, epochs and training seconds."""
    return {
        **fitted.tested.results,
        run.valid_metric: fitted.best.get(run.valid_metric, math.nan),
        "steps": float(fitted.steps),
        "epochs": float(fitted.epochs),
        "train_seconds": fitted.seconds,
    }


def _initialise(run: TrainingRun, log: Callable[[str], None]) -> list[str]:
    """Load ``config.model.init_from`` into ``run.model`` if the model section has one, add LoRA adapters to the
    pretrained body and freeze it with ``train.lora_rank`` (``seqlab.training.lora``), freeze
    ``config.train.freeze``; return the names of the pretrained parameters (``run.pretrained`` and those loaded).

    Raises: ConfigError for ``train.body_lr_scale`` without a pretrained body to scale, or as ``adapt_pretrained``.
    """
    config, pretrained = run.config, list(run.pretrained)
    if isinstance(config.model, InitFromConfig) and config.model.init_from is not None:
        pretrained += load_by_name(run.model, config.model.init_from, strict=config.model.init_strict, log=log)
    if config.train.lora_rank is not None and not pretrained and not isinstance(config.model, InitFromConfig):
        raise ConfigError("train.lora_rank: this recipe starts from no pretrained body (no model.init_from) to adapt")
    adapt_pretrained(run.model, config.train, pretrained, log=log)
    freeze_parameters(run.model, config.train.freeze)
    if config.train.body_lr_scale != 1.0 and not pretrained:
        raise ConfigError(
            "train.body_lr_scale: no pretrained body to scale; set model.init_from (or an arch with one) as well"
        )
    return pretrained


def _train_beside_rank0(recipe: Recipe, config: Any, state_file: Path | None) -> Report:
    """A data-parallel rank other than 0: the same data, model, initialisation and steps as rank 0 (resumed
    from ``state_file`` if given), and no files, logs or tests."""
    resume_from = None if state_file is None else load_training_state(state_file)
    seed_everything(config.train.seed)
    run = recipe.prepare(config, resume_from=None if state_file is None else state_file.parent)
    pretrained = _initialise(run, lambda line: None)  # rank 0 logs
    trainer = Trainer(
        run.model,
        run.config.train,
        loss_fn=run.loss_fn,
        train_batches=run.train_batches,
        validate=run.validate,
        strategy=run.strategy,
        progress=False,
        log=None,
        pretrained=pretrained,
    )
    trainer.fit(resume_from=resume_from)
    return Report({}, [])


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's parameters, where its inputs must go (the trainer may have moved it)."""
    return next(model.parameters()).device


def data_file_keys(config_class: type[Any]) -> dict[str, DataFormat]:
    """``section.key`` -> format of every data file the recipe config ``config_class`` reads, as its sections
    declare them (``seqlab.data.files.data_file``), in field order; the fault tests cover each of them."""
    keys = {}
    config = config_class()
    for section in dataclasses.fields(config):
        value = getattr(config, section.name)
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                if DATA_FILE in f.metadata:
                    keys[f"{section.name}.{f.name}"] = f.metadata[DATA_FILE]
    return keys
