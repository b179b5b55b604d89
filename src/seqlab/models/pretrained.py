"""``save_pretrained`` / ``from_pretrained`` / ``load_pretrained``: a model directory is its frozen config as JSON
plus safetensors weights.

``config.json`` holds ``{"model_type": NAME, "config": {...}}``, where NAME is the model's stable registry name
(``model_type``, as in Hugging Face's ``config.json``), never its Python class name, so renaming a class breaks no
checkpoint. A model with LoRA adapters (``seqlab.nn.lora``) adds ``"lora": {LAYER: {"rank", "alpha", "dropout"}}``
and its weights hold each adapted layer's ``lora_A`` and ``lora_B``; it loads adapted, as it was saved. A quantized
model adds ``"quantization"`` and stores int8 weights with their scales (``seqlab.models.quantized``). Nothing is
unpickled on load: ``config.json`` is plain JSON checked against the config dataclass, and the weights are read by
safetensors, so a checkpoint from elsewhere can never run code.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_file, save_model
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from seqlab.data.files import read_json_file
from seqlab.errors import CheckpointError
from seqlab.files import atomic_path, atomic_write
from seqlab.models.quantized import QUANTIZATION_KEY, Quantization, load_quantized, quantization_of, quantized_tensors
from seqlab.nn.lora import add_lora_settings, lora_settings
from seqlab.validation import check_parameter_count, is_int

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
LORA_KEY = "lora"  # config.json's LoRA adapters (``seqlab.nn.lora.lora_settings``); absent for a plain model
_FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}  # safetensors' names of the floating-point dtypes
# seqlab 0.1.0 wrote the class name as model_type; its checkpoints keep loading under these aliases.
LEGACY_MODEL_TYPES = {
    "RNNSeq2Seq": "rnn_seq2seq",
    "TransformerSeq2Seq": "transformer_seq2seq",
    "Seq2VecClassifier": "seq2vec_classifier",
}

ModelT = TypeVar("ModelT", bound="PretrainedMixin")

MODEL_TYPES: dict[str, type[PretrainedMixin]] = {}  # the registry, model_type -> class; filled by class definitions


class PretrainedMixin:
    """Adds directory checkpoints to an ``nn.Module`` built from one frozen dataclass config.

    A subclass sets ``config_class``, takes the config as its only constructor argument, and sets
    ``model_type``, its registry name in ``config.json``; defining the class registers it in ``MODEL_TYPES``.
    Building one from a config first builds it on the meta device (no memory) to count its parameters, so a size
    past ``seqlab.validation.MAX_PARAMETERS`` is refused before anything is allocated, whether the config came
    from a recipe, ``load_pretrained`` or ``from_hf``.

    Raises:
        TypeError: at class definition, if another class already registered the same ``model_type``.
        ConfigError: at construction, for a model of more than ``MAX_PARAMETERS`` parameters (naming the
            config's largest size).
    """

    config_class: ClassVar[type]
    model_type: ClassVar[str]
    config: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if args and not _COUNTING.get():  # cls(config): check the size first (copy and pickle pass no args)
            _check_size(cls, args[0])
        return super().__new__(cls)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("model_type")
        if name is None:  # a subclass of a registered model saves and loads as its parent's type
            return
        if name in MODEL_TYPES:
            raise TypeError(f"model_type {name!r} is taken by {MODEL_TYPES[name].__qualname__}")
        MODEL_TYPES[name] = cls

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed), each atomically
        (``seqlab.files``).

        Raises:
            StorageError: a file cannot be written (a full disk); the file it would have replaced is unchanged.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        payload: dict[str, Any] = {"model_type": self.model_type, "config": dataclasses.asdict(self.config)}
        assert isinstance(self, nn.Module)
        adapters = lora_settings(self)
        if adapters:
            payload[LORA_KEY] = adapters
        quantization = quantization_of(self)
        if quantization is not None:
            payload[QUANTIZATION_KEY] = quantization.to_json()
        atomic_write(directory / CONFIG_FILE, json.dumps(payload, indent=2) + "\n")
        with atomic_path(directory / WEIGHTS_FILE) as temporary:
            if quantization is None:
                save_model(self, str(temporary))
            else:
                save_file(quantized_tensors(self, quantization), str(temporary))

    @classmethod
    def from_pretrained(cls: type[ModelT], directory: str | Path) -> ModelT:
        """Build the model from ``directory``'s config and load its weights (float32 parameters, eval mode; the
        Linear layers a quantized checkpoint names hold int8 weights, ``seqlab.models.quantized``).

        Raises:
            CheckpointError: the directory or one of its files is missing, the config was written for another
                model type or has unknown fields, or the weights do not match the config.
        """
        config_path, payload = _read_config(Path(directory))
        found = _model_type(payload)
        if found != cls.model_type:
            raise CheckpointError(f"{config_path}: holds a {found!r} model, expected {cls.model_type!r}")
        return cls._build(config_path, payload)

    @classmethod
    def _build(cls: type[ModelT], config_path: Path, payload: dict[str, Any]) -> ModelT:
        if not isinstance(payload.get("config"), dict):
            raise CheckpointError(f"{config_path}: no 'config' object")
        try:
            config = cls.config_class(**payload["config"])
            model = cls(config)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{config_path}: bad config ({e})") from None
        assert isinstance(model, nn.Module)
        if LORA_KEY in payload:
            try:
                add_lora_settings(model, payload[LORA_KEY])
            except (TypeError, ValueError) as e:
                raise CheckpointError(f"{config_path}: bad {LORA_KEY} section ({e})") from None
        weights_path = config_path.parent / WEIGHTS_FILE
        if not weights_path.is_file():
            raise CheckpointError(f"{weights_path}: missing")
        if QUANTIZATION_KEY in payload:
            load_quantized(model, Quantization.from_json(payload[QUANTIZATION_KEY], config_path), weights_path)
            return model
        _check_weight_shapes(model, weights_path)
        load_model(model, str(weights_path))
        _check_finite(model, weights_path)
        model.eval()
        return model


_COUNTING: contextvars.ContextVar[bool] = contextvars.ContextVar("counting_parameters", default=False)


def _check_size(cls: type, config: Any) -> None:
    """Build ``cls(config)`` on the meta device (shapes only) and hold its parameter count to MAX_PARAMETERS.
    A config the constructor refuses raises here as it would in the real build; a constructor that cannot run on
    the meta device (NotImplementedError, RuntimeError) is left to the real build."""
    token = _COUNTING.set(True)
    try:
        with _NoInitialisation(), torch.device("meta"):
            model = cls(config)
    except (NotImplementedError, RuntimeError):
        return
    finally:
        _COUNTING.reset(token)
    count = sum(p.numel() for p in model.parameters())
    sizes = {}
    if dataclasses.is_dataclass(config):
        sizes = {f.name: v for f in dataclasses.fields(config) if is_int(v := getattr(config, f.name))}
    check_parameter_count(cls.model_type, count, sizes or {"the model": count})


class _NoInitialisation(TorchFunctionMode):
    """Skips ``torch.nn.init``'s functions and a tensor's in-place random fills: a model built to count its
    parameters keeps no values, and the first ``normal_`` on the meta device imports torch's Python meta kernels,
    which took seconds of every command's start (``_check_size``)."""

    FILLS = frozenset({Tensor.normal_, Tensor.uniform_, Tensor.random_, Tensor.bernoulli_, Tensor.exponential_})

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in self.FILLS or getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def load_pretrained(directory: str | Path) -> PretrainedMixin:
    """The model saved in ``directory``, as the class its ``config.json`` names (float32 parameters, eval mode).

    Raises:
        CheckpointError: as ``from_pretrained``, or ``model_type`` names no registered model (one line that
            lists the registered names).
    """
    config_path, payload = _read_config(Path(directory))
    found = _model_type(payload)
    if found not in MODEL_TYPES:
        raise CheckpointError(f"{config_path}: unknown model_type {found!r}; known: {', '.join(sorted(MODEL_TYPES))}")
    return MODEL_TYPES[found]._build(config_path, payload)


def _read_config(directory: Path) -> tuple[Path, Any]:
    """``directory``'s config.json path and its parsed JSON; CheckpointError (one line) if it cannot be read."""
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    config_path = directory / CONFIG_FILE
    missing = f"missing; is {directory} a seqlab checkpoint?"
    return config_path, read_json_file(config_path, error=CheckpointError, missing=missing)


def _model_type(payload: Any) -> Any:
    """The registry name recorded in a parsed config.json, with 0.1.0's class names mapped to it; None if absent."""
    found = payload.get("model_type") if isinstance(payload, dict) else None
    return LEGACY_MODEL_TYPES.get(found, found) if isinstance(found, str) else found


def _check_weight_shapes(model: nn.Module, weights_path: Path) -> None:
    """Raise CheckpointError (one line) unless the file holds exactly the model's tensors, with its shapes, and
    floating-point tensors where the model has them (integer weights would be converted without a word)."""
    state = model.state_dict()
    expected = {name: tuple(t.shape) for name, t in state.items()}
    try:
        with safe_open(str(weights_path), framework="pt") as f:
            stored = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
            dtypes = {name: f.get_slice(name).get_dtype() for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights_path}: cannot load weights ({e})") from None
    # save_model keeps one name of tensors that share memory (tied weights): the others are not missing.
    kept = {state[name].data_ptr() for name in stored if name in state}
    missing = sorted(name for name in set(expected) - set(stored) if state[name].data_ptr() not in kept)
    unexpected = sorted(set(stored) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{weights_path}: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for name, shape in stored.items():
        if shape != expected[name]:
            raise CheckpointError(
                f"{weights_path}: weights do not match the config ({name} is {list(shape)}, "
                f"the config needs {list(expected[name])})"
            )
        if state[name].is_floating_point() and dtypes[name] not in _FLOAT_DTYPES:
            raise CheckpointError(f"{weights_path}: {name} holds {dtypes[name]} values, expected floating point")


def _check_finite(model: nn.Module, weights_path: Path) -> None:
    """Raise CheckpointError (one line) if a loaded tensor holds a NaN or an infinity (a diverged model)."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point():
            check_weight(weights_path, name, tensor)


def check_weight(path: Path, name: str, tensor: Tensor) -> None:
    """Refuse a weight read from ``path`` for a floating-point parameter that would load without a word and
    compute garbage: integer or bool values (``.float()`` and ``load_model`` convert them silently), or a NaN or
    an infinity (a diverged model). ``load_pretrained`` and every ``from_hf`` check each weight with it.

    Raises: CheckpointError naming the file and the tensor: ``PATH: NAME holds int64 values, expected floating
        point`` or ``PATH: NAME holds NaN or infinite values (a diverged model?)``.
    """
    if not tensor.is_floating_point():
        dtype = str(tensor.dtype).removeprefix("torch.")
        raise CheckpointError(f"{path}: {name} holds {dtype} values, expected floating point")
    if not bool(torch.isfinite(tensor).all()):
        raise CheckpointError(f"{path}: {name} holds NaN or infinite values (a diverged model?)")
