"""``seqlab average``: a run directory whose model is the average of the weights of several runs of one recipe.

The runs must share the recipe, the architecture (``config.json``) and every file the recipe saves beside the model
(vocabularies, tokenizers, labels), byte for byte; checkpoints of one run, or of runs that continue one another,
are what averaging is for (``seqlab.training.averaging``). The new directory (of kind "average": ``seqlab average
--overwrite`` replaces an earlier average, never a training run) holds the first run's ``recipe.json``
and files, the averaged ``model.safetensors`` and ``averaged_from.json`` (the sources, in order); it has no
``results.json`` until it is evaluated, and ``seqlab evaluate`` and ``seqlab predict`` take it like any run.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from safetensors.torch import save_file

from seqlab.errors import CheckpointError, ConfigError
from seqlab.files import atomic_path, atomic_write, is_bookkeeping, output_directory, storage_error
from seqlab.models.pretrained import CONFIG_FILE, WEIGHTS_FILE
from seqlab.recipes.run_directory import RECIPE_FILE, RESULTS_FILE
from seqlab.recipes.saved_run import recipe_name_of
from seqlab.training.averaging import average_checkpoints
from seqlab.training.callbacks import METRICS_FILE
from seqlab.training.checkpoint import STATE_FILE

SOURCES_FILE = "averaged_from.json"
AVERAGE_KIND = "average"  # the kind of an averaged run's directory (seqlab.files.output_kind)
# What a run directory holds about its own training, which an average of several runs does not inherit.
NOT_CARRIED = frozenset({WEIGHTS_FILE, RESULTS_FILE, STATE_FILE, METRICS_FILE, SOURCES_FILE})
__all__ = ["SOURCES_FILE", "average_runs"]


def average_runs(out_dir: Path, runs: Sequence[Path], *, overwrite: bool = False) -> Path:
    """Write run directory ``out_dir`` with the averaged weights of ``runs`` (k >= 2) and return it.

    The directory appears whole or not at all (``seqlab.files.output_directory``, kind "average"): it is written
    in a hidden sibling and renamed into place; with ``overwrite`` it replaces an earlier average, never another
    kind of directory or one that holds one of ``runs``.

    Raises:
        ConfigError: fewer than two runs, or ``out_dir`` is unusable, holds a run, or exists and is not empty
            (without ``overwrite``: one line from ``OutputDirectory``).
        CheckpointError: (one line naming the run) a run is not a seqlab run, is of another recipe or
            architecture, or has another vocabulary (a saved file that differs from the first run's).
        StorageError: a file cannot be written (a full disk); ``out_dir`` is then as it was.
    """
    if len(runs) < 2:
        raise ConfigError(f"average needs at least two runs, got {len(runs)}")
    with output_directory(out_dir, kind=AVERAGE_KIND, overwrite=overwrite, inputs=runs, flag="") as staging:
        first = runs[0]
        recipe = recipe_name_of(first)
        carried = sorted(
            p.name for p in first.iterdir() if p.is_file() and p.name not in NOT_CARRIED and not is_bookkeeping(p.name)
        )
        for run in runs[1:]:
            other = recipe_name_of(run)
            if other != recipe:
                raise CheckpointError(f"{run}: a {other} run, but {first} is a {recipe} run")
        weights = average_checkpoints(runs)  # refuses another architecture, naming the field
        for run in runs[1:]:
            for name in carried:
                if name not in (RECIPE_FILE, CONFIG_FILE) and not _same_bytes(first / name, run / name):
                    raise CheckpointError(f"{run}: {name} differs from {first}'s; averaged runs must share it")
        for name in carried:
            try:
                shutil.copyfile(first / name, staging / name)
            except OSError as e:
                raise storage_error(out_dir / name, e) from None
        with atomic_path(staging / WEIGHTS_FILE) as temporary:
            save_file(weights, str(temporary))
        atomic_write(staging / SOURCES_FILE, json.dumps({"runs": [str(r) for r in runs]}, indent=2) + "\n")
    return out_dir


def _same_bytes(a: Path, b: Path) -> bool:
    return b.is_file() and a.read_bytes() == b.read_bytes()
