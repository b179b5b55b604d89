"""``seqlab merge-lora``: a plain run directory from a run trained with LoRA adapters (``train.lora_rank``).

Each adapted layer's update is folded into its weight, W' = W + (alpha / r) B A (``seqlab.nn.lora.merge_lora``),
so the new run's model is a plain model of the run's architecture (``config.json`` without its ``lora`` section,
``model.safetensors`` without ``lora_A`` / ``lora_B``) that computes what the adapted model computes. The new
directory holds the run's other files (``recipe.json``, vocabularies, tokenizer, labels, ``results.json``,
``metrics.jsonl``) and ``merged_from.json`` (the source run and the merged layers), but not the training state:
the merged run is for ``evaluate``, ``predict``, ``generate`` and ``serve``, or a further ``model.init_from``.
"""

from __future__ import annotations

import json
from pathlib import Path

from seqlab.errors import ConfigError
from seqlab.files import atomic_write, is_bookkeeping, output_directory
from seqlab.models.pretrained import CONFIG_FILE, WEIGHTS_FILE, load_pretrained
from seqlab.nn.lora import merge_lora
from seqlab.recipes.saved_run import recipe_name_of
from seqlab.training.checkpoint import STATE_FILE

SOURCE_FILE = "merged_from.json"
# The run's files that the merged run replaces (the model) or does not inherit (the state of the LoRA training).
NOT_CARRIED = frozenset({CONFIG_FILE, WEIGHTS_FILE, STATE_FILE, SOURCE_FILE})
__all__ = ["SOURCE_FILE", "merge_lora_run"]


def merge_lora_run(run: Path, out_dir: Path, *, overwrite: bool = False) -> list[str]:
    """Write ``out_dir``, the run ``run`` with its LoRA adapters merged, and return the merged layers' names.

    The output directory follows the output-directory policy (``seqlab.files.output_directory``, kind
    "merge-lora"): it must be new or empty, or with ``overwrite`` an earlier merged run; it appears whole or not at
    all; ``run`` is only read.

    Raises:
        CheckpointError: (one line naming the file) ``run`` is not a readable seqlab run.
        ConfigError: ``run`` has no LoRA adapters; ``out_dir`` is ``run`` or inside it, not empty (without
            ``overwrite``, or holding another command's output), or not writable.
        StorageError: a file cannot be written (``out_dir`` is then as it was).
    """
    recipe_name_of(run)
    if out_dir.resolve() == run.resolve() or run.resolve() in out_dir.resolve().parents:
        raise ConfigError(f"--out {out_dir}: inside the run {run}; give a directory outside it")
    model = load_pretrained(run)
    merged = merge_lora(model)
    if not merged:
        raise ConfigError(f"{run}: has no LoRA adapters to merge (its {CONFIG_FILE} has no 'lora' section)")
    with output_directory(out_dir, kind="merge-lora", overwrite=overwrite, inputs=[run]) as path:
        for source in sorted(run.iterdir()):
            if source.is_file() and source.name not in NOT_CARRIED and not is_bookkeeping(source.name):
                atomic_write(path / source.name, source.read_bytes())
        model.save_pretrained(path)
        atomic_write(path / SOURCE_FILE, json.dumps({"run": str(run), "layers": merged}, indent=2) + "\n")
    return merged
