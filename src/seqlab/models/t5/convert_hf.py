"""Hugging Face ``T5ForConditionalGeneration`` folders <-> seqlab ``T5``: config fields and tensor names, with
safetensors and json only.

    shared                                         shared
    {stack}.block.0.layer.0.SelfAttention
        .relative_attention_bias                   {stack}.relative_bias.embedding
    {stack}.block.{i}.layer.0.layer_norm           {stack}.layers.{i}.self_attn_norm
    {stack}.block.{i}.layer.0.SelfAttention.{q,k,v,o}   {stack}.layers.{i}.self_attn.{q,k,v,out}_proj
    decoder.block.{i}.layer.1.layer_norm           decoder.layers.{i}.cross_attn_norm
    decoder.block.{i}.layer.1.EncDecAttention.*    decoder.layers.{i}.cross_attn.*
    {stack}.block.{i}.layer.{f}.layer_norm         {stack}.layers.{i}.ff_norm        (f = 1 encoder, 2 decoder)
    ....layer.{f}.DenseReluDense.wi / wi_0 / wi_1 / wo   ....feed_forward.linear1 / gate / linear1 / linear2
    {stack}.final_layer_norm                       {stack}.final_norm
    lm_head                                        lm_head (untied only)

Tying: T5 v1.0 ties the output layer to ``shared`` and scales the decoder output by D ** -0.5; v1.1 has its own
``lm_head`` and no scaling. Older folders say which by ``tie_word_embeddings``; transformers 5 always writes
``tie_word_embeddings: true`` and records the scaling as ``scale_decoder_outputs``, storing ``lm_head`` only when it
differs from ``shared``. A folder without scaling and without ``lm_head`` loads as untied with lm_head = shared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqlab.errors import CheckpointError, ConfigError
from seqlab.models.hf_folder import (
    WEIGHTS_FILE,
    open_weights,
    read_hf_config,
    write_hf_folder,
)
from seqlab.models.pretrained import check_weight
from seqlab.models.t5.config import FEED_FORWARD_PROJS, T5Config

ARCHITECTURE = "T5ForConditionalGeneration"
LM_HEAD = "lm_head.weight"
# Copies of ``shared`` that some versions wrote; they are the same tensor and are not loaded separately.
EMBEDDING_COPIES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def hf_tensor_names(config: T5Config) -> dict[str, str]:
    """seqlab state_dict name -> Hugging Face tensor name, for every tensor of a ``T5`` built from ``config``."""
    gated = config.feed_forward_proj == "gated-gelu"
    names = {"shared.weight": "shared.weight"}
    if not config.tie_word_embeddings:
        names[LM_HEAD] = LM_HEAD
    for stack, depth in (("encoder", config.num_layers), ("decoder", config.num_decoder_layers)):
        names[f"{stack}.relative_bias.embedding.weight"] = (
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        )
        names[f"{stack}.final_norm.weight"] = f"{stack}.final_layer_norm.weight"
        for i in range(depth):
            ours, theirs = f"{stack}.layers.{i}.", f"{stack}.block.{i}.layer."
            attentions = [("self_attn", "0.SelfAttention")]
            norms = [("self_attn_norm", "0")]
            ff = "1"
            if stack == "decoder":
                attentions.append(("cross_attn", "1.EncDecAttention"))
                norms.append(("cross_attn_norm", "1"))
                ff = "2"
            norms.append(("ff_norm", ff))
            for module, hf_module in attentions:
                for x, hf_x in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "o")):
                    names[f"{ours}{module}.{x}.weight"] = f"{theirs}{hf_module}.{hf_x}.weight"
            for module, index in norms:
                names[f"{ours}{module}.weight"] = f"{theirs}{index}.layer_norm.weight"
            linears = (("gate", "wi_0"), ("linear1", "wi_1")) if gated else (("linear1", "wi"),)
            for x, hf_x in (*linears, ("linear2", "wo")):
                names[f"{ours}feed_forward.{x}.weight"] = f"{theirs}{ff}.DenseReluDense.{hf_x}.weight"
    return names


def read_t5_config(directory: Path) -> T5Config:
    """The ``T5Config`` of the Hugging Face T5 folder ``directory`` (its config.json, and whether its weights hold
    a separate ``lm_head``).

    Raises: CheckpointError (one line) if config.json is missing or not JSON, names another model type or
        architecture, lacks a field, or sets a value T5Config rejects (named with its value).
    """
    path, hf = read_hf_config(directory, "t5", "T5")
    architectures = hf.get("architectures") or [ARCHITECTURE]
    if ARCHITECTURE not in architectures:
        raise CheckpointError(f"{path}: architecture {architectures[0]!r}, expected {ARCHITECTURE!r}")
    feed_forward_proj = hf.get("feed_forward_proj", "relu")
    if feed_forward_proj not in FEED_FORWARD_PROJS:
        choices = ", ".join(map(repr, FEED_FORWARD_PROJS))
        raise CheckpointError(f"{path}: unsupported feed_forward_proj {feed_forward_proj!r} (supported: {choices})")
    scaled = hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True) is not False)
    try:
        return T5Config(
            vocab_size=hf["vocab_size"],
            d_model=hf["d_model"],
            d_kv=hf["d_kv"],
            d_ff=hf["d_ff"],
            num_layers=hf["num_layers"],
            num_decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
            num_heads=hf["num_heads"],
            relative_attention_num_buckets=hf.get("relative_attention_num_buckets", 32),
            relative_attention_max_distance=hf.get("relative_attention_max_distance", 128),
            dropout=hf.get("dropout_rate", 0.1),
            layer_norm_eps=hf.get("layer_norm_epsilon", 1e-6),
            feed_forward_proj=feed_forward_proj,
            tie_word_embeddings=scaled,
            pad_id=hf.get("pad_token_id", 0),
            eos_id=hf.get("eos_token_id", 1),
            decoder_start_id=hf.get("decoder_start_token_id", hf.get("pad_token_id", 0)),
        )
    except KeyError as e:
        raise CheckpointError(f"{path}: missing field {e.args[0]!r}") from None
    except ConfigError as e:
        raise CheckpointError(f"{path}: {e}") from None


def read_t5_weights(directory: Path, expected: dict[str, Tensor], config: T5Config) -> dict[str, Tensor]:
    """Read ``directory``'s model.safetensors into a seqlab T5 state_dict matching ``expected`` (the target model's
    own state_dict, whose shapes the file must have), in float32.

    Raises: CheckpointError (one line) naming the file and the first missing, unexpected or mis-shaped tensor, or an
        ``lm_head`` that differs from ``shared`` in a tied (scaled) model.
    """
    path = directory / WEIGHTS_FILE
    names = hf_tensor_names(config)
    with open_weights(directory) as f:
        stored = set(f.keys())
        optional = {*EMBEDDING_COPIES, LM_HEAD}
        unexpected = sorted(stored - set(names.values()) - optional)
        if unexpected:
            raise CheckpointError(f"{path}: unexpected tensor {unexpected[0]}")
        state = {}
        for ours, theirs in names.items():
            if theirs == LM_HEAD and LM_HEAD not in stored:
                theirs = "shared.weight"  # transformers 5 stores an untied lm_head only when it differs
            if theirs not in stored:
                raise CheckpointError(f"{path}: missing tensor {theirs}")
            found, shape = tuple(f.get_slice(theirs).get_shape()), tuple(expected[ours].shape)
            if found != shape:
                raise CheckpointError(f"{path}: tensor {theirs} is {list(found)}, the config needs {list(shape)}")
            tensor = f.get_tensor(theirs)
            check_weight(path, theirs, tensor)
            state[ours] = tensor.float()
        tied = config.tie_word_embeddings and LM_HEAD in stored
        if tied and not torch.equal(f.get_tensor(LM_HEAD).float(), state["shared.weight"]):
            raise CheckpointError(
                f"{path}: {LM_HEAD} differs from shared.weight, but the config scales the decoder output "
                "as only a tied T5 does"
            )
    return state


def write_t5_folder(directory: Path, config: T5Config, state: dict[str, Tensor]) -> None:
    """Write a Hugging Face ``T5ForConditionalGeneration`` folder (config.json, model.safetensors) for a seqlab
    ``T5Config`` and state_dict; ``lm_head`` is written only when untied."""
    hf_config: dict[str, Any] = {
        "architectures": [ARCHITECTURE],
        "model_type": "t5",
        "is_encoder_decoder": True,
        "vocab_size": config.vocab_size,
        "d_model": config.d_model,
        "d_kv": config.d_kv,
        "d_ff": config.d_ff,
        "num_layers": config.num_layers,
        "num_decoder_layers": config.num_decoder_layers,
        "num_heads": config.num_heads,
        "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
        "dropout_rate": config.dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_factor": 1.0,
        "feed_forward_proj": config.feed_forward_proj,
        "tie_word_embeddings": config.tie_word_embeddings,
        "pad_token_id": config.pad_id,
        "eos_token_id": config.eos_id,
        "decoder_start_token_id": config.decoder_start_id,
    }
    write_hf_folder(directory, hf_config, {theirs: state[ours] for ours, theirs in hf_tensor_names(config).items()})
