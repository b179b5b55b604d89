"""Hugging Face BERT folders <-> seqlab's BERT models: config fields and tensor names, with safetensors and json.

A folder (``BertModel.save_pretrained`` or a task model's) holds config.json and model.safetensors; only
safetensors is read (a pytorch_model.bin would have to be unpickled). Task models prefix the body's tensors with
``bert.``, ``BertModel`` does not; both load. Names map one to one (seqlab's body may sit under ``bert.`` too):

    embeddings.word_embeddings / position_embeddings / token_type_embeddings     the same names without embeddings.
    embeddings.LayerNorm                               embedding_norm
    encoder.layer.{i}.attention.self.query/key/value   encoder.layers.{i}.self_attn.q_proj / k_proj / v_proj
    encoder.layer.{i}.attention.output.dense           encoder.layers.{i}.self_attn.out_proj
    encoder.layer.{i}.attention.output.LayerNorm       encoder.layers.{i}.norm1
    encoder.layer.{i}.intermediate.dense / output.dense    encoder.layers.{i}.feed_forward.linear1 / linear2
    encoder.layer.{i}.output.LayerNorm                 encoder.layers.{i}.norm2
    pooler.dense                                       pooler
    cls.predictions.transform.dense / LayerNorm, cls.predictions.bias     mlm_head.dense / norm / bias
    cls.seq_relationship                               nsp_head
    classifier                                         classifier

The MLM decoder's weight is the word embedding (tied) and its bias ``cls.predictions.bias``; the file's copies
(``cls.predictions.decoder.*``), the ``position_ids`` buffer and tensors of heads the model lacks are not read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from torch import nn

from seqlab.errors import CheckpointError
from seqlab.models.hf_folder import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    open_weights,
    read_hf_config,
    refuse_unsupported,
    write_hf_folder,
)
from seqlab.models.pretrained import check_weight

BODY_PREFIX = "bert."
# Hugging Face hidden_act -> seqlab activation ("gelu_new" and "gelu_pytorch_tanh" are both GELU's tanh form).
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
# (seqlab pattern, Hugging Face replacement), applied to names with the body's ``bert.`` prefix removed.
_NAMES = [
    (r"^(word|position|token_type)_embeddings\.", r"embeddings.\1_embeddings."),
    (r"^embedding_norm\.", "embeddings.LayerNorm."),
    (r"^encoder\.layers\.(\d+)\.self_attn\.q_proj\.", r"encoder.layer.\1.attention.self.query."),
    (r"^encoder\.layers\.(\d+)\.self_attn\.k_proj\.", r"encoder.layer.\1.attention.self.key."),
    (r"^encoder\.layers\.(\d+)\.self_attn\.v_proj\.", r"encoder.layer.\1.attention.self.value."),
    (r"^encoder\.layers\.(\d+)\.self_attn\.out_proj\.", r"encoder.layer.\1.attention.output.dense."),
    (r"^encoder\.layers\.(\d+)\.norm1\.", r"encoder.layer.\1.attention.output.LayerNorm."),
    (r"^encoder\.layers\.(\d+)\.feed_forward\.linear1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"^encoder\.layers\.(\d+)\.feed_forward\.linear2\.", r"encoder.layer.\1.output.dense."),
    (r"^encoder\.layers\.(\d+)\.norm2\.", r"encoder.layer.\1.output.LayerNorm."),
    (r"^pooler\.", "pooler.dense."),
    (r"^mlm_head\.dense\.", "cls.predictions.transform.dense."),
    (r"^mlm_head\.norm\.", "cls.predictions.transform.LayerNorm."),
    (r"^mlm_head\.bias$", "cls.predictions.bias"),
    (r"^nsp_head\.", "cls.seq_relationship."),
    (r"^classifier\.", "classifier."),
]


def hf_name(name: str) -> str:
    """The Hugging Face name (without the body's ``bert.`` prefix) of a seqlab BERT parameter."""
    name = name.removeprefix(BODY_PREFIX)
    for pattern, replacement in _NAMES:
        renamed, n = re.subn(pattern, replacement, name)
        if n:
            return renamed
    raise ValueError(f"no Hugging Face name for the BERT parameter {name!r}")


def read_config(directory: Path) -> dict[str, Any]:
    """The ``BertConfig`` fields of the Hugging Face folder ``directory``'s config.json (``pooler`` excepted).

    Raises: CheckpointError (one line) if the file is missing or not JSON, is not a BERT config, or sets a field
        this BERT cannot compute (named with its value).
    """
    path, hf = read_hf_config(directory, "bert", "BERT")
    refuse_unsupported(
        path,
        {
            "hidden_act": (hf.get("hidden_act", "gelu"), tuple(ACTIVATIONS)),
            "position_embedding_type": (hf.get("position_embedding_type", "absolute"), ("absolute",)),
            "is_decoder": (hf.get("is_decoder", False), (False,)),
            "add_cross_attention": (hf.get("add_cross_attention", False), (False,)),
        },
    )
    try:
        return {
            "vocab_size": hf["vocab_size"],
            "d_model": hf["hidden_size"],
            "num_heads": hf["num_attention_heads"],
            "num_layers": hf["num_hidden_layers"],
            "d_ff": hf["intermediate_size"],
            "max_positions": hf["max_position_embeddings"],
            "type_vocab_size": hf.get("type_vocab_size", 2),
            "dropout": hf.get("hidden_dropout_prob", 0.1),  # seqlab has one rate for hidden and attention dropout
            "activation": ACTIVATIONS[hf.get("hidden_act", "gelu")],
            "layer_norm_eps": hf.get("layer_norm_eps", 1e-12),
            "pad_id": hf.get("pad_token_id") or 0,
            "num_labels": len(hf["id2label"]) if isinstance(hf.get("id2label"), dict) else 2,
        }
    except KeyError as e:
        raise CheckpointError(f"{path}: missing field {e.args[0]!r}") from None


def load_hf(cls: type, directory: Path) -> Any:
    """A ``cls`` (``Bert`` or a task model) with the config and weights of the Hugging Face folder ``directory``;
    float32 parameters, eval mode.

    Raises: CheckpointError (one line) naming the file and the missing or mis-shaped tensor, or as ``read_config``.
    """
    fields = read_config(directory)
    path = directory / WEIGHTS_FILE
    with open_weights(directory) as f:
        names = list(f.keys())
        prefixed = any(name.startswith(BODY_PREFIX) for name in names)
        stored = {name.removeprefix(BODY_PREFIX): name for name in names}
        fields["pooler"] = "pooler.dense.weight" in stored
        if "pooler.dense.bias" in stored and not fields["pooler"]:  # half a pooler is a damaged file, not none
            raise CheckpointError(f"{path}: missing tensor {stored['pooler.dense.bias'].removesuffix('bias')}weight")
        try:
            model = cls(cls.config_class(**fields))
        except ValueError as e:
            raise CheckpointError(f"{directory / CONFIG_FILE}: bad config ({e})") from None
        state = {}
        for name, expected in model.state_dict().items():
            wanted = hf_name(name)
            file_name = BODY_PREFIX + wanted if prefixed and name.startswith(BODY_PREFIX) else wanted
            if wanted not in stored:
                raise CheckpointError(f"{path}: missing tensor {file_name}")
            found = tuple(f.get_slice(stored[wanted]).get_shape())
            if found != tuple(expected.shape):
                raise CheckpointError(
                    f"{path}: tensor {stored[wanted]} is {list(found)}, the config needs {list(expected.shape)}"
                )
            tensor = f.get_tensor(stored[wanted])
            if expected.is_floating_point():
                check_weight(path, stored[wanted], tensor)
            state[name] = tensor.float()
    model.load_state_dict(state)
    model.eval()
    return model


def save_hf(model: nn.Module, directory: Path) -> None:
    """Write ``model`` (``Bert`` or a task model) as a Hugging Face folder that transformers' class of the same
    architecture loads with the same outputs."""
    config = model.config
    architecture = getattr(model, "hf_architecture", "BertModel")
    hf_config = {
        "architectures": [architecture],
        "model_type": "bert",
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_attention_heads": config.num_heads,
        "num_hidden_layers": config.num_layers,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_positions,
        "type_vocab_size": config.type_vocab_size,
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.dropout,
        "hidden_act": HF_ACTIVATIONS[config.activation],
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_id,
        "position_embedding_type": "absolute",
        "id2label": {str(i): f"LABEL_{i}" for i in range(config.num_labels)},
        "label2id": {f"LABEL_{i}": i for i in range(config.num_labels)},
        "tie_word_embeddings": True,
    }
    prefix = BODY_PREFIX if architecture != "BertModel" else ""
    tensors = {}
    for name, tensor in model.state_dict().items():
        wanted = hf_name(name)
        tensors[prefix + wanted if name.startswith(BODY_PREFIX) else wanted] = tensor
    write_hf_folder(directory, hf_config, tensors)
