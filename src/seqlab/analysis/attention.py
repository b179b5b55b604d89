"""Attention maps of a trained model on one input: where each output step looks.

RNN encoder-decoder: the alignment alpha_tj of target step t over source step j (Bahdanau et al., 2015, eq. 6;
Luong et al., 2015, eq. 7), as ``RNNSeq2Seq.forward`` returns it. Transformers: softmax(Q K^T / sqrt(Dh)) of every
head of every ``MultiHeadAttention`` (Vaswani et al., 2017, eq. 1): encoder self-attention, decoder (causal)
self-attention and cross-attention for ``TransformerSeq2Seq``, causal self-attention for ``GPT``. The weights are
collected with forward hooks that ask each attention module for ``need_weights`` during one ordinary forward, so
they are exactly the weights that forward multiplies the values with.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.errors import CheckpointError
from seqlab.models import GPT, BertForMaskedLM, RNNSeq2Seq, TransformerSeq2Seq
from seqlab.nn import MultiHeadAttention


class AttentionMap(NamedTuple):
    """One head's (or an RNN decoder's) weights for a single input.

    module: the attention module's name in the model ("decoder.attention", "encoder.layers.0.self_attn", ...).
    kind: "self" or "cross". head: the head index (0 for an RNN's single alignment). weights: (rows, cols), float32,
    each row a distribution over the attended positions (rows T, cols S for cross; T x T for self).
    """

    module: str
    kind: str
    head: int
    weights: Tensor


class LabelledAttention(NamedTuple):
    """A model's attention maps on one input, with the symbols of their axes, as a system offers them.

    Attributes:
        maps: every map (``attention_maps``).
        labels: (stack, kind) -> (query symbols, key symbols), where stack is the first part of a map's module
            name ("encoder", "decoder", "layers") and kind "self" or "cross".
        caption: a one-line title (the input, and the output where the model decodes).
        output: the model's output symbols ([] where it only reads).
    """

    maps: list[AttentionMap]
    labels: dict[tuple[str, str], tuple[list[str], list[str]]]
    caption: str
    output: list[str]


def _collect(model: nn.Module, run: Callable[[], Any]) -> list[AttentionMap]:
    """Every head of every MultiHeadAttention in ``model`` during ``run()``, batch row 0, in call order."""
    maps: list[AttentionMap] = []
    handles = []

    def ask_for_weights(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "need_weights": True}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: MultiHeadAttention, args: tuple, kwargs: dict, output: Any) -> None:
            key = args[1] if len(args) > 1 else kwargs.get("key")
            kind = "self" if key is None and kwargs.get("precomputed_kv") is None else "cross"
            for head, weights in enumerate(output.weights[0]):  # (N, T, S) of batch row 0
                maps.append(AttentionMap(name, kind, head, weights.detach().float()))

        return hook

    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            if module.attention_kind == "linear":
                raise CheckpointError(f"{name}: linear attention forms no attention weights to draw")
            handles.append(module.register_forward_pre_hook(ask_for_weights, with_kwargs=True))
            handles.append(module.register_forward_hook(keep(name), with_kwargs=True))
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return maps


def attention_maps(model: nn.Module, source: Sequence[int], target: Sequence[int] | None = None) -> list[AttentionMap]:
    """The attention maps of ``model`` on one input, in eval mode (no dropout).

    Args:
        model: RNNSeq2Seq (with attention), TransformerSeq2Seq, GPT or BertForMaskedLM.
        source: source token ids (S,) for seq2seq; the GPT's or BERT's input ids (T,).
        target: seq2seq decoder input ids (T,), BOS first (teacher forcing); None for GPT and BERT.
    Outputs: a list of AttentionMap: one for an RNNSeq2Seq (target x source), one per head and attention module
        otherwise.
    Raises: CheckpointError if the model is of another kind, an RNNSeq2Seq has no attention (fixed context), or a
        Transformer uses linear attention; ValueError if a seq2seq model gets no target.
    """
    model.eval()
    src = torch.tensor([list(source)], dtype=torch.long)  # (1, S)
    if isinstance(model, GPT | BertForMaskedLM):
        return _collect(model, lambda: model(src))
    if not isinstance(model, RNNSeq2Seq | TransformerSeq2Seq):
        raise CheckpointError(
            "attention maps need an RNNSeq2Seq, TransformerSeq2Seq, GPT or BertForMaskedLM; "
            f"this is a {type(model).__name__}"
        )
    if target is None:
        raise ValueError("a seq2seq model needs the decoder input (target ids, BOS first)")
    tgt = torch.tensor([list(target)], dtype=torch.long)  # (1, T)
    lengths = torch.tensor([len(source)])
    if isinstance(model, TransformerSeq2Seq):
        return _collect(model, lambda: model(src, lengths, tgt))
    if model.decoder.attention is None:
        raise CheckpointError("this RNNSeq2Seq has no attention (attention = 'none', a fixed context)")
    with torch.no_grad():
        weights = model(src, lengths, tgt).attention[0]  # (T, S)
    return [AttentionMap("decoder.attention", "cross", 0, weights.float())]


def plot_attention(
    maps: Sequence[AttentionMap], path: Path, *, rows: Sequence[str], columns: Sequence[str], title: str
) -> None:
    """Heatmaps of ``maps`` (all of one module group: same rows and columns), one row of panels per module and one
    column per head, ticks labelled with the symbols; written as a PNG.

    Args: rows: the query symbols (T,). columns: the key symbols (T or S,).
    """
    modules = list(dict.fromkeys(m.module for m in maps))
    heads = max(m.head for m in maps) + 1
    cell = max(2.5, 0.28 * max(len(rows), len(columns)))
    width = cell * heads + 1.2  # inches
    fig = new_figure(figsize=(width, cell * len(modules) + 0.8), layout="constrained")
    axes = fig.subplots(len(modules), heads, squeeze=False)
    image = None
    for m in maps:
        ax = axes[modules.index(m.module), m.head]
        image = ax.imshow(m.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(columns)), columns, fontsize=8, rotation=90)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        layer = re.search(r"\.(\d+)\.", m.module)
        ax.set_title(f"layer {layer.group(1)}, head {m.head}" if layer else m.module, fontsize=9)
        ax.set_xlabel("key: attended symbol", fontsize=8)
        ax.set_ylabel("query: output symbol" if m.kind == "cross" else "query: symbol", fontsize=8)
    fig.colorbar(image, ax=axes, label="attention weight (probability)", shrink=0.8)
    fig.suptitle(textwrap.fill(title, width=int(width * 11)), fontsize=10)  # ~11 characters per inch at 10 pt
    save_figure(fig, path, dpi=110)


def row_sums_error(maps: Sequence[AttentionMap]) -> float:
    """max over maps and rows of |sum of the row - 1|: 0 up to rounding when every row is a distribution."""
    return max((float((m.weights.sum(dim=-1) - 1).abs().max()) for m in maps), default=math.nan)
