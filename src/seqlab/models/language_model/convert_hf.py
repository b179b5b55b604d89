"""Hugging Face GPT-2 folders <-> seqlab ``GPT``: config fields and tensor names, with safetensors and json only.

A GPT-2 folder (``GPT2LMHeadModel.save_pretrained``) holds config.json and model.safetensors. GPT-2's linear layers
are ``Conv1D`` modules whose weight is the transpose of ``nn.Linear``'s, (in, out), and its attention packs the
query, key and value projections into one ``c_attn`` of (D, 3 D), in that order. seqlab's tensors map one to one:

    transformer.wte / wpe                 wte / wpe
    transformer.h.{i}.ln_1 / ln_2         decoder.layers.{i}.norm1 / norm2
    transformer.h.{i}.attn.c_attn         decoder.layers.{i}.self_attn.{q,k,v}_proj   (transposed, split in 3)
    transformer.h.{i}.attn.c_proj         decoder.layers.{i}.self_attn.out_proj       (transposed)
    transformer.h.{i}.mlp.c_fc / c_proj   decoder.layers.{i}.feed_forward.linear1 / linear2   (transposed)
    transformer.ln_f                      decoder.final_norm
    lm_head                               lm_head (only when the embeddings are not tied)

Older folders (the original ``gpt2`` upload) name the tensors without ``transformer.``; both load. The causal-mask
buffers some versions saved (``attn.bias``, ``attn.masked_bias``) are not weights and are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqlab.errors import CheckpointError, ConfigError
from seqlab.models.hf_folder import (
    WEIGHTS_FILE,
    open_weights,
    read_hf_config,
    refuse_unsupported,
    write_hf_folder,
)
from seqlab.models.pretrained import check_weight

PREFIX = "transformer."
# Hugging Face activation_function -> seqlab activation (gelu_new and gelu_pytorch_tanh are both the tanh form).
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_MASK_BUFFER = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")


def read_gpt2_config(directory: Path) -> dict[str, Any]:
    """The ``GPTConfig`` fields of the GPT-2 folder ``directory``'s config.json.

    Raises: CheckpointError (one line) if the file is missing or not JSON, is not a GPT-2 config, or sets a field
        this GPT cannot compute (named with its value).
    """
    path, hf = read_hf_config(directory, "gpt2", "GPT-2")
    refuse_unsupported(
        path,
        {
            "activation_function": (hf.get("activation_function", "gelu_new"), tuple(ACTIVATIONS)),
            "scale_attn_weights": (hf.get("scale_attn_weights", True), (True,)),
            "scale_attn_by_inverse_layer_idx": (hf.get("scale_attn_by_inverse_layer_idx", False), (False,)),
            "reorder_and_upcast_attn": (hf.get("reorder_and_upcast_attn", False), (False,)),
            "add_cross_attention": (hf.get("add_cross_attention", False), (False,)),
        },
    )
    try:
        return {
            "vocab_size": hf["vocab_size"],
            "context_length": hf["n_positions"],
            "d_model": hf["n_embd"],
            "num_heads": hf["n_head"],
            "num_layers": hf["n_layer"],
            "d_ff": hf.get("n_inner"),
            "dropout": hf.get("resid_pdrop", 0.1),  # seqlab has one rate for embd_pdrop, attn_pdrop and resid_pdrop
            "activation": ACTIVATIONS[hf.get("activation_function", "gelu_new")],
            "layer_norm_eps": hf.get("layer_norm_epsilon", 1e-5),
            "tie_embeddings": hf.get("tie_word_embeddings", True),
        }
    except KeyError as e:
        raise CheckpointError(f"{path}: missing field {e.args[0]!r}") from None


def to_gpt2_tensors(state: dict[str, Tensor], num_layers: int, *, tied: bool) -> dict[str, Tensor]:
    """seqlab GPT state_dict -> GPT-2 tensors (names without the ``transformer.`` prefix, except ``lm_head``)."""
    out = {"wte.weight": state["wte.weight"], "wpe.weight": state["wpe.weight"]}
    for i in range(num_layers):
        p, h = f"decoder.layers.{i}.", f"h.{i}."
        attn = p + "self_attn."
        for kind in ("weight", "bias"):
            out[h + f"ln_1.{kind}"] = state[p + f"norm1.{kind}"]
            out[h + f"ln_2.{kind}"] = state[p + f"norm2.{kind}"]
        qkv_weight = torch.cat([state[attn + f"{x}_proj.weight"] for x in "qkv"])  # (3D, D), nn.Linear layout
        out[h + "attn.c_attn.weight"] = qkv_weight.T  # Conv1D layout (D, 3D)
        out[h + "attn.c_attn.bias"] = torch.cat([state[attn + f"{x}_proj.bias"] for x in "qkv"])  # (3D,)
        for hf_name, name in (
            ("attn.c_proj", attn + "out_proj"),
            ("mlp.c_fc", p + "feed_forward.linear1"),
            ("mlp.c_proj", p + "feed_forward.linear2"),
        ):
            out[h + hf_name + ".weight"] = state[name + ".weight"].T  # Conv1D layout (in, out)
            out[h + hf_name + ".bias"] = state[name + ".bias"]
    out["ln_f.weight"] = state["decoder.final_norm.weight"]
    out["ln_f.bias"] = state["decoder.final_norm.bias"]
    if not tied:
        out["lm_head.weight"] = state["lm_head.weight"]
    return out


def from_gpt2_tensors(hf: dict[str, Tensor], num_layers: int, *, tied: bool) -> dict[str, Tensor]:
    """GPT-2 tensors (names without the ``transformer.`` prefix) -> seqlab GPT state_dict; inverse of
    ``to_gpt2_tensors``."""
    out = {"wte.weight": hf["wte.weight"], "wpe.weight": hf["wpe.weight"]}
    for i in range(num_layers):
        p, h = f"decoder.layers.{i}.", f"h.{i}."
        attn = p + "self_attn."
        for kind in ("weight", "bias"):
            out[p + f"norm1.{kind}"] = hf[h + f"ln_1.{kind}"]
            out[p + f"norm2.{kind}"] = hf[h + f"ln_2.{kind}"]
        q_w, k_w, v_w = hf[h + "attn.c_attn.weight"].T.chunk(3)  # (D, D) each, nn.Linear layout
        q_b, k_b, v_b = hf[h + "attn.c_attn.bias"].chunk(3)
        for x, w, b in (("q", q_w, q_b), ("k", k_w, k_b), ("v", v_w, v_b)):
            out[attn + f"{x}_proj.weight"], out[attn + f"{x}_proj.bias"] = w, b
        for hf_name, name in (
            ("attn.c_proj", attn + "out_proj"),
            ("mlp.c_fc", p + "feed_forward.linear1"),
            ("mlp.c_proj", p + "feed_forward.linear2"),
        ):
            out[name + ".weight"] = hf[h + hf_name + ".weight"].T
            out[name + ".bias"] = hf[h + hf_name + ".bias"]
    out["decoder.final_norm.weight"] = hf["ln_f.weight"]
    out["decoder.final_norm.bias"] = hf["ln_f.bias"]
    if not tied:
        out["lm_head.weight"] = hf["lm_head.weight"]
    return out


def _file_name(name: str) -> str:
    """The name a tensor has in a folder written by today's transformers."""
    return name if name.startswith("lm_head.") else PREFIX + name


def read_gpt2_weights(directory: Path, expected: dict[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """Read ``directory``'s model.safetensors into a seqlab GPT state_dict matching ``expected`` (the target
    model's own state_dict, whose shapes the file must have).

    Raises: CheckpointError (one line) naming the file and the first missing, unexpected or mis-shaped tensor.
    """
    path = directory / WEIGHTS_FILE
    tied = "lm_head.weight" not in expected
    wanted = {name: tuple(t.shape) for name, t in to_gpt2_tensors(expected, num_layers, tied=tied).items()}
    with open_weights(directory) as f:
        stored = {name.removeprefix(PREFIX): name for name in f.keys()}  # noqa: SIM118
        for name in wanted:
            if name not in stored:
                raise CheckpointError(f"{path}: missing tensor {_file_name(name)}")
        for name in stored:
            if name not in wanted and not _MASK_BUFFER.match(name) and not (tied and name == "lm_head.weight"):
                raise CheckpointError(f"{path}: unexpected tensor {stored[name]}")
        tensors = {}
        for name, shape in wanted.items():
            found = tuple(f.get_slice(stored[name]).get_shape())
            if found != shape:
                raise CheckpointError(f"{path}: tensor {stored[name]} is {list(found)}, the config needs {list(shape)}")
            tensor = f.get_tensor(stored[name])
            check_weight(path, stored[name], tensor)
            tensors[name] = tensor.float()
    return from_gpt2_tensors(tensors, num_layers, tied=tied)


def write_gpt2(directory: Path, config: Any, state: dict[str, Tensor]) -> None:
    """Write a GPT-2 folder (config.json, model.safetensors) for a seqlab ``GPTConfig`` and state_dict.

    Raises: ConfigError if GPT-2 cannot express the config: rotary positions, no biases, or activation "relu".
    """
    if config.positional != "learned" or not config.bias or config.activation == "relu":
        raise ConfigError(
            "a GPT-2 folder needs learned positions, biases and a GELU activation; got positional "
            f"{config.positional!r}, bias {config.bias}, activation {config.activation!r}"
        )
    hf_activation = {"gelu_tanh": "gelu_new", "gelu": "gelu"}[config.activation]
    hf_config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.context_length,
        "n_embd": config.d_model,
        "n_head": config.num_heads,
        "n_layer": config.num_layers,
        "n_inner": config.d_ff,
        "activation_function": hf_activation,
        "layer_norm_epsilon": config.layer_norm_eps,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "tie_word_embeddings": config.tie_embeddings,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "bos_token_id": None,
        "eos_token_id": None,
    }
    tensors = to_gpt2_tensors(state, config.num_layers, tied=config.tie_embeddings)
    write_hf_folder(directory, hf_config, {_file_name(name): t for name, t in tensors.items()})
