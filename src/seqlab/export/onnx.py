"""``export_onnx``: a trained run's model as ONNX graphs in a directory of their own, with a manifest.

The export directory holds one ``NAME.onnx`` per graph (``seqlab.export.graphs`` for the decoders,
``seqlab.export.whole_models`` for the rest), ``export.json`` (the manifest:
the graphs with their inputs and outputs, the model type, the run it came from and the SHA-256 of the run's
``model.safetensors``, so that a stale export is refused), and copies of the run's JSON files (``recipe.json``,
``config.json``, the tokenizer or vocabularies), so the directory alone tells how to tokenize. It is written aside
under a temporary name and renamed into place when whole; an existing directory is replaced only with
``overwrite``, and only if it is an export (holds ``export.json``).

Graphs are made by ``torch.onnx.export(..., dynamo=True)`` (``onnxscript`` translates the exported program), in
float32 on the CPU, with the model in eval mode.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from seqlab.errors import CheckpointError, ConfigError
from seqlab.export.graphs import STEP_GRAPHS, Graph
from seqlab.export.whole_models import WHOLE_MODEL_GRAPHS
from seqlab.files import atomic_path, atomic_write, output_directory
from seqlab.models.pretrained import load_pretrained

MANIFEST_FILE = "export.json"
WEIGHTS_FILE = "model.safetensors"
EXPORT_DIRECTORY = "onnx"  # the default export directory, inside the run (``--backend onnxruntime`` looks there)
EXTRA_HINT = "pip install -e '.[export]'"
GRAPH_BUILDERS = {**STEP_GRAPHS, **WHOLE_MODEL_GRAPHS}  # model type -> its graphs


def require_modules(*names: str, purpose: str) -> None:
    """Refuse, in one line, to go on without the optional modules ``names`` (the ``[export]`` extra).

    Raises: ConfigError naming the missing modules and how to install them.
    """
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{purpose} needs {', '.join(missing)} (the export extra: {EXTRA_HINT})")


def weights_digest(run: Path) -> str:
    """The SHA-256 (hex) of the run's ``model.safetensors``. Raises: CheckpointError if it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(run / WEIGHTS_FILE, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise CheckpointError(f"{run / WEIGHTS_FILE}: cannot read ({e.strerror or e})") from None
    return digest.hexdigest()


@torch.inference_mode(False)  # torch.export traces no inference tensors, so a caller's inference mode is left
def export_onnx(run: Path, out: Path, *, overwrite: bool = False) -> dict[str, Any]:
    """Export the model of run directory ``run`` to ``out`` (module docstring); return the manifest.

    Raises:
        ConfigError: ``out`` exists (without ``overwrite``, or it is not an export), the model type has no graphs,
            or the export extra is not installed.
        CheckpointError: the run's model cannot be loaded.
        StorageError: a file cannot be written (``out`` is then unchanged).
    """
    require_modules("onnx", "onnxscript", purpose="seqlab export --format onnx")
    model = load_pretrained(run)
    builder = GRAPH_BUILDERS.get(model.model_type)
    if builder is None:
        supported = ", ".join(sorted(GRAPH_BUILDERS))
        raise ConfigError(f"{run}: a {model.model_type} model cannot be exported yet; exported types: {supported}")
    model = model.float().eval()
    with output_directory(out, kind="export", overwrite=overwrite, inputs=[run]) as staging:
        graphs = {graph.name: export_graph(graph, staging) for graph in builder(model)}
        copied = [path.name for path in sorted(run.glob("*.json")) if path.is_file()]
        for name in copied:
            atomic_write(staging / name, (run / name).read_bytes())
        manifest = {
            "format": "onnx",
            "model_type": model.model_type,
            "run": str(run.resolve()),
            "model_sha256": weights_digest(run),
            "torch": torch.__version__,
            "graphs": graphs,
            "context_length": getattr(model, "context_length", None),
            "run_files": copied,
        }
        atomic_write(staging / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
    return manifest


@torch.inference_mode(False)
def export_graph(graph: Graph, directory: Path) -> dict[str, Any]:
    """Export ``graph`` (e.g. ``seqlab.export.whole_models.recurrent_layer_graph(layer)``) to
    ``directory/NAME.onnx``, written atomically; return its manifest entry (file, inputs, outputs).

    Raises: ConfigError if the export extra is not installed; StorageError if the file cannot be written.
    """
    require_modules("onnx", "onnxscript", purpose="an ONNX export")
    with warnings.catch_warnings():
        # torch.onnx names each dynamic axis once and warns that the others sharing its constraints go unnamed.
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used.*")
        program = torch.onnx.export(
            graph.module.eval(),
            graph.example,
            input_names=graph.inputs,
            output_names=graph.outputs,
            dynamic_shapes=graph.dynamic_shapes,
            dynamo=True,
            verbose=False,
        )
        path = directory / f"{graph.name}.onnx"
        with atomic_path(path) as temporary:
            program.save(str(temporary))
    return {"file": path.name, "inputs": graph.inputs, "outputs": graph.outputs}


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of export directory ``directory``.

    Raises: CheckpointError (one line naming the file) if it is missing or malformed.
    """
    path = directory / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; make the export with `seqlab export RUN --format onnx`") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("graphs"), dict):
        raise CheckpointError(f"{path}: not a seqlab export manifest")
    return manifest
