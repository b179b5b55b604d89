"""What every recipe shares: the ``Recipe`` protocol, the report, the run directory and the train skeleton.

A recipe is one module of task logic (data, model, metrics) that satisfies :class:`Recipe`. It hands the shared
skeleton (:func:`run_training`) a :class:`TrainingRun`, and the skeleton does the rest the same way for every
task: seed, build, log one summary line, train with best-checkpoint saving, save, test, write ``results.json``.
A run directory holds the model's own files (``config.json``, ``model.safetensors``), whatever the recipe adds
(vocabularies, labels), ``recipe.json`` (the recipe's name and its whole sectioned config) and ``results.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

import torch
from torch import nn

from seqlab.errors import CheckpointError, ConfigError
from seqlab.files import atomic_write
from seqlab.recipes.init_from import InitFromConfig, load_by_name
from seqlab.recipes.run_directory import (
    RECIPE_FILE,
    RESULTS_FILE,
    RunDirectory,
    RunMode,
    check_writable,
    has_results,
    refuse_occupied,
)
from seqlab.training.averaging import AverageLastValidated
from seqlab.training.callbacks import MetricsLog, run_dir_callbacks
from seqlab.training.checkpoint import STATE_FILE, load_training_state, save_training_state
from seqlab.training.device import training_device
from seqlab.training.distributed import is_writer
from seqlab.training.optim import freeze_parameters
from seqlab.training.scheduled_sampling import ScheduledSampling
from seqlab.training.seeding import seed_everything
from seqlab.training.strategies import Strategy
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer

ConfigT = TypeVar("ConfigT")


class Report(NamedTuple):
    """What ``seqlab train`` prints: the results row and (input, reference, prediction) examples from the test data."""

    results: dict[str, float]
    examples: list[tuple[str, str, str]]


class Recipe(Protocol):
    """A named task that ``seqlab train | evaluate | predict`` runs; a module with these members satisfies it.

    Attributes:
        NAME: the registry name (``seqlab train NAME``), also written to ``recipe.json``.
        DESCRIPTION: one line for ``seqlab recipes``.
        Config: a frozen dataclass whose fields are frozen section dataclasses (``data``, ``model``, ``train``, ...)
            with defaults; ``Config()`` is the recipe's default setup.
        PREDICT_OPTIONS: the keyword-only arguments ``predict`` takes (e.g. ``("beam_size", "nbest")``, or ``()``);
            the command line passes an option only to a recipe that names it here, and refuses it otherwise.

    A recipe may also name in ``EVALUATE_OPTIONS`` the keyword-only arguments its ``evaluate`` takes (g2p:
    ``("ensemble", "errors")``); the command line refuses them for a recipe that has none.

    A recipe that generates text (``lm``) also has ``generate(checkpoint, prompt, *, max_new_tokens, temperature,
    top_k, top_p, num_beams, seed, num_samples, stop, on_text) -> list[str]``; ``seqlab generate`` refuses a
    checkpoint whose recipe has none, so the others need nothing.
    """

    NAME: str
    DESCRIPTION: str
    Config: type[Any]
    PREDICT_OPTIONS: tuple[str, ...]

    def train(
        self,
        config: Any,
        out_dir: Path,
        *,
        progress: bool = True,
        log: Callable[[str], None] = print,
        mode: RunMode = "new",
    ) -> Report:
        """Train on the config's data, leave the run directory in ``out_dir``, and report the test scores.

        ``mode`` is "new", "overwrite" or "resume" (``seqlab.recipes.run_directory``); ``run_training`` does it.

        Raises: DataError or ConfigError (one line) before ``out_dir`` is created.
        """
        ...

    def evaluate(self, checkpoint: Path, data_path: str) -> dict[str, float]:
        """Scores of the run directory ``checkpoint`` on a data file in the task's standard format."""
        ...

    def predict(self, checkpoint: Path, inputs: Sequence[str], /, **options: Any) -> list[str]:
        """Output lines for ``inputs``; ``options`` are exactly the recipe's ``PREDICT_OPTIONS`` (each optional)."""
        ...


# Key of the training state under which a run with train.average_last keeps the weights it will average.
AVERAGED_KEY = "averaged_validations"
RECIPE_MEMBERS = ("NAME", "DESCRIPTION", "Config", "PREDICT_OPTIONS", "train", "evaluate", "predict")  # of Recipe


class TrainingRun(NamedTuple):
    """A recipe's built model and the task functions around it, as :func:`run_training` uses them."""

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
    name: str,
    config: Any,
    out_dir: Path,
    prepare: Callable[[], TrainingRun],
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """The train skeleton every recipe shares, for recipe ``name`` and its sectioned ``config`` (with a
    ``train`` section, a ``TrainConfig``).

    Checks ``out_dir`` and, for "resume" and "overwrite", locks it (``seqlab.recipes.run_directory``); reads
    the training checkpoint to resume from; seeds Python, NumPy and torch with ``config.train.seed``; calls
    ``prepare()`` (which reads the data, builds the model and checks everything that can fail, so an error
    leaves no directory behind); loads ``config.model.init_from`` by name if the model section has one
    (``seqlab.recipes.init_from``) and freezes ``config.train.freeze``; creates and locks the run directory;
    writes the run's files (``run.save``) and ``recipe.json``; logs
    ``checkpoint: DIR; SUMMARY; model: N parameters[, SUMMARY_MODEL]``; trains with a :class:`Trainer`, saving
    the run (``run.save`` and ``recipe.json``) each time validation improves and the training state
    (``training_state.safetensors``) at each checkpoint (the first one swaps an overwriting run in); saves the
    best model, or with ``train.average_last`` = k the average of the weights at the last k validations
    (``seqlab.training.averaging``; kept in the training state under ``AVERAGED_KEY``, so a resumed run averages
    the same validations); tests it; writes ``results.json``. Every file is written atomically
    (``seqlab.files``).

    In data-parallel training (``seqlab.training.distributed``) rank 0 does all of this; the other ranks
    only read the data and the checkpoint, build the model and train with rank 0, and write nothing.

    Returns: Report(results, examples): the test scores, then the best ``valid_metric``, steps, epochs,
        train_seconds and total_seconds (wall-clock seconds); ``results.json`` adds ``stopped_by``. Ranks
        other than 0 return an empty report.
    """
    started = time.perf_counter()
    train_config: TrainConfig = config.train
    training_device(train_config.device, train_config.precision)  # refuse an unusable device before writing
    if not is_writer():
        return _train_beside_rank0(config, out_dir / STATE_FILE if mode == "resume" else None, prepare)
    directory = RunDirectory(out_dir, mode)
    directory.lock_target()
    failed = True
    try:
        resume_from = load_training_state(out_dir / STATE_FILE) if mode == "resume" else None
        seed_everything(train_config.seed)
        run = prepare()
        pretrained = _initialise(run, config, log)
        _refuse_unused_settings(name, train_config, run, pretrained)
        path = directory.open()
        run.save(path)  # vocabularies and tokenizers first: a resumed run reads them instead of rebuilding them
        save_recipe_file(path, name, config)
        parameters = sum(p.numel() for p in run.model.parameters())
        note = f", {run.summary_model}" if run.summary_model else ""
        log(f"checkpoint: {out_dir}; {run.summary}; model: {parameters:,} parameters{note}")
        logs = run_dir_callbacks(path)
        for callback in logs:
            if isinstance(callback, MetricsLog) and resume_from is not None:
                callback.rewind(step=resume_from["run"]["step"], validated_at=resume_from["run"]["validated_at"])

        def save() -> None:
            run.save(directory.path)
            save_recipe_file(directory.path, name, config)

        averager = None if train_config.average_last is None else AverageLastValidated(train_config.average_last)
        if averager is not None and resume_from is not None:
            if AVERAGED_KEY in resume_from:
                averager.load_state_dict(resume_from[AVERAGED_KEY])
            else:
                log("the training checkpoint predates saved averages: averaging the validations after the resume")

        def checkpoint(state: dict[str, Any]) -> None:
            if averager is not None:
                state = {**state, AVERAGED_KEY: averager.state_dict()}
            save_training_state(directory.path / STATE_FILE, state)
            if not directory.committed:
                moved_to = directory.commit()
                for callback in logs:
                    if isinstance(callback, MetricsLog):
                        callback.path = moved_to / callback.path.name

        trainer = Trainer(
            run.model,
            train_config,
            loss_fn=run.loss_fn,
            train_batches=run.train_batches,
            validate=run.validate,
            on_best=lambda model, record: save(),
            progress=progress,
            log=log,
            callbacks=[*logs, *([averager] if averager is not None else [])],
            strategy=run.strategy,
            checkpoint=checkpoint,
            pretrained=pretrained,
        )
        try:
            result = trainer.fit(resume_from=resume_from)
        except CheckpointError as e:
            raise CheckpointError(f"{out_dir / STATE_FILE}: {e}") from None
        if averager is not None:
            run.model.load_state_dict(averager.average())
        save()
        tested = run.test()
        row = {
            **tested.results,
            run.valid_metric: result.best.get(run.valid_metric, math.nan),
            "steps": float(result.steps),
            "epochs": float(result.epochs),
            "train_seconds": result.seconds,
            "total_seconds": time.perf_counter() - started,
        }
        results = json.dumps({**row, "stopped_by": result.stopped_by}, indent=2) + "\n"
        atomic_write(directory.path / RESULTS_FILE, results)
        failed = False
    finally:
        directory.close(failed=failed)
    return Report(row, tested.examples)


def _refuse_unused_settings(name: str, config: TrainConfig, run: TrainingRun, pretrained: list[str]) -> None:
    """Settings every recipe's ``train`` section has but only some runs use: refused where they would be ignored.

    Raises: ConfigError naming the setting.
    """
    if (config.teacher_forcing != 1.0 or config.teacher_forcing_schedule != "constant") and not isinstance(
        run.strategy, ScheduledSampling
    ):
        raise ConfigError(
            f"train.teacher_forcing: the {name} recipe does not train with scheduled sampling (the g2p recipe does)"
        )
    if config.body_lr_scale != 1.0 and not pretrained:
        raise ConfigError(
            "train.body_lr_scale: no pretrained body to scale; set model.init_from (or an arch with one) as well"
        )


def _initialise(run: TrainingRun, config: Any, log: Callable[[str], None]) -> list[str]:
    """Load ``config.model.init_from`` into ``run.model`` if the model section has one, freeze
    ``config.train.freeze``; return the names of the pretrained parameters (``run.pretrained`` and those loaded)."""
    pretrained = list(run.pretrained)
    if isinstance(config.model, InitFromConfig) and config.model.init_from is not None:
        pretrained += load_by_name(run.model, config.model.init_from, strict=config.model.init_strict, log=log)
    freeze_parameters(run.model, config.train.freeze)
    return pretrained


def _train_beside_rank0(config: Any, state_file: Path | None, prepare: Callable[[], TrainingRun]) -> Report:
    """A data-parallel rank other than 0: the same data, model, initialisation and steps as rank 0 (resumed
    from ``state_file`` if given), and no files, logs or tests."""
    resume_from = None if state_file is None else load_training_state(state_file)
    seed_everything(config.train.seed)
    run = prepare()
    pretrained = _initialise(run, config, lambda line: None)  # rank 0 logs
    trainer = Trainer(
        run.model,
        config.train,
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


def save_recipe_file(directory: Path, name: str, config: Any) -> None:
    """Write ``recipe.json``: the recipe's ``name`` and its sectioned ``config``, section by section."""
    payload = {"recipe": name, "config": dataclasses.asdict(config)}
    atomic_write(directory / RECIPE_FILE, json.dumps(payload, indent=2) + "\n")


def load_recipe_config(directory: Path, config_class: type[ConfigT]) -> ConfigT:
    """The sectioned config saved in ``directory``'s ``recipe.json``, each section rebuilt (and validated) as its
    dataclass.

    Raises:
        CheckpointError: the file is missing or unreadable, a section is missing, or a section has unknown or
            invalid values (one line naming the file and the reason).
    """
    path = directory / RECIPE_FILE
    section_types = typing.get_type_hints(config_class)
    try:
        saved = json.loads(path.read_text())["config"]
        sections = {f.name: section_types[f.name](**saved[f.name]) for f in dataclasses.fields(config_class)}
        return config_class(**sections)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path}: not valid JSON") from None
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad recipe config ({e!s})") from None


def read_json_list(path: Path, key: str) -> list[Any]:
    """The list stored under ``key`` in the JSON object file ``path`` (a run's labels, vowels, ...).

    Raises: CheckpointError (one line naming the file) if it is missing, not JSON, or has no list under ``key``.
    """
    try:
        value = json.loads(path.read_text())[key]
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: bad {key} file ({e!s})") from None
    if not isinstance(value, list):
        raise CheckpointError(f"{path}: bad {key} file ({key} is not a list)")
    return value


def check_model_config(directory: Path, from_recipe: Any, from_weights: Any) -> None:
    """Refuse a run directory whose ``recipe.json`` describes another model than its ``config.json``.

    Args:
        directory: the run directory, for the message.
        from_recipe: the model config that the recipe's saved config (and data files) imply.
        from_weights: the model config that ``config.json`` holds (the weights were loaded with it).
    Raises:
        CheckpointError: naming the first field on which the two disagree, with both values.
    """
    for f in dataclasses.fields(from_recipe):
        wanted, found = getattr(from_recipe, f.name), getattr(from_weights, f.name)
        if wanted != found:
            raise CheckpointError(
                f"{directory}: {RECIPE_FILE} and config.json disagree on {f.name} ({wanted!r} vs {found!r})"
            )


def check_vocabulary_size(path: Path, size: int, model_size: int) -> None:
    """Refuse a vocabulary file (or labels, tokenizer) whose ``size`` is not the ``model_size`` of the weights.

    Raises:
        CheckpointError: naming ``path`` and both sizes.
    """
    if size != model_size:
        raise CheckpointError(
            f"{path}: {size} symbols, but the model's weights have {model_size}; not this model's file"
        )


def recipe_name_of(directory: Path) -> str:
    """The name of the recipe that wrote run directory ``directory``, from its ``recipe.json``.

    Raises:
        CheckpointError: the directory is missing or has no readable ``recipe.json``.
    """
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    path = directory / RECIPE_FILE
    try:
        name = json.loads(path.read_text())["recipe"]
    except FileNotFoundError:
        raise CheckpointError(f"{directory}: not a seqlab checkpoint (no {path.name})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise CheckpointError(f"{path}: not a seqlab recipe file") from None
    if not isinstance(name, str):
        raise CheckpointError(f"{path}: not a seqlab recipe file")
    return name


def run_directory(requested: Path | None, recipe: str, *, overwrite: bool) -> Path:
    """The run directory of ``seqlab train``: ``requested`` (``--out``; refused if it holds results, unless
    ``overwrite``), else the first free ``runs/RECIPE``, ``runs/RECIPE-2``, ...

    The recipe creates it only once its data and configuration have been checked, so a failed start leaves nothing.

    Raises:
        ConfigError: ``requested`` is unusable (``run_directory.check_writable``), or a directory with results
            without ``overwrite``.
    """
    if requested is not None:
        check_writable(requested)
        if has_results(requested) and not overwrite:
            raise refuse_occupied(requested)
        return requested
    candidate, n = Path("runs") / recipe, 1
    while candidate.exists():
        n += 1
        candidate = Path("runs") / f"{recipe}-{n}"
    return candidate
