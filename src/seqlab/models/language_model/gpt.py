"""GPT: a decoder-only Transformer language model (Radford et al., 2018; GPT-2, Radford et al., 2019).

    h_0 = W_e[x] + W_p[pos]                       (token embedding plus learned positions; rotary: W_e[x] only;
                                                   sinusoidal: sqrt(D) W_e[x] + PE(pos), Vaswani et al. 2017)
    h_l = block_l(h_{l-1}),  l = 1..L             (pre-LN: causal self-attention, then a feed-forward network)
    p(x_{t+1} | x_<=t) = softmax(LN_f(h_L)_t W_e^T)   (output projection tied to the token embedding)

Blocks are ``seqlab.nn.TransformerDecoderOnlyLayer`` with ``norm_first=True``; attention is SDPA with a causal mask
and one immutable ``KVCache`` per layer. Prompts of different lengths are left-padded: positions count real tokens
only, and padded keys are never attended, so each row computes what its prompt alone computes. ``GPT.from_hf`` and
``GPT.save_hf`` read and write Hugging Face GPT-2 folders (``convert_hf.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.interfaces import LanguageModelOutput, StepOutput, check_token_ids, select_rows
from seqlab.models.language_model import convert_hf
from seqlab.models.pretrained import PretrainedMixin
from seqlab.nn import (
    IncrementalStep,
    KVCache,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    StaticKVCache,
    TransformerDecoderOnly,
    TransformerDecoderOnlyLayer,
    direct_calls,
)
from seqlab.nn.transformer_sublayers import drop
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real

POSITIONALS = ("learned", "sinusoidal", "rotary")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu")


@dataclass(frozen=True)
class GPTConfig:
    """A GPT's shape. Defaults: a small character model; ``gpt2_small()`` gives GPT-2's 124M shape.

    Raises: ConfigError (a ValueError) for a value out of range or d_model not divisible by num_heads.
    """

    vocab_size: int = 65  # V
    context_length: int = 64  # most positions attended (GPT-2's n_positions)
    d_model: int = 128  # D
    num_heads: int = 4  # N; Dh = D / N
    num_layers: int = 4  # L
    d_ff: int | None = None  # feed-forward inner size; 4 D if None
    dropout: float = 0.0  # on embeddings, attention weights and sublayer outputs while training
    positional: Literal["learned", "sinusoidal", "rotary"] = "learned"  # learned (GPT-2), sinusoidal or RoPE
    activation: Literal["gelu_tanh", "gelu", "relu"] = "gelu_tanh"  # GPT-2 uses GELU's tanh form
    layer_norm_eps: float = 1e-5  # epsilon of every layer norm
    bias: bool = True  # biases in linear layers and layer norms
    tie_embeddings: bool = True  # output projection = token embedding W_e (Press & Wolf, 2017)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "d_model", "num_heads", "num_layers"):
            check_int(name, getattr(self, name))
        check_int("d_ff", self.d_ff, optional=True)
        check_probability("dropout", self.dropout)
        check_choice("positional", self.positional, POSITIONALS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_real("layer_norm_eps", self.layer_norm_eps, greater_than=0.0)
        check_bool("bias", self.bias)
        check_bool("tie_embeddings", self.tie_embeddings)
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        if self.positional == "rotary" and (self.d_model // self.num_heads) % 2:
            raise ValueError(f"rotary positions need an even head_dim, got {self.d_model // self.num_heads}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {self.d_model}")

    @property
    def inner_size(self) -> int:
        """d_ff, or 4 D when it is None."""
        return 4 * self.d_model if self.d_ff is None else self.d_ff


class GPTState(NamedTuple):
    """What continues a GPT's streams: one KVCache per layer, keys and values (B, N, S, Dh); next_position (B,)
    long, the position of each row's next real token; keep_mask (B, S) bool, True at cached real tokens, or None
    when every cached token is real; incremental_step: the decoder's ``IncrementalStep`` that ``step`` runs
    without gradients (it reads the decoder's modules at every step, so it never goes stale), made by ``prefill``
    and passed on by ``step``, or None (``step`` then makes one itself). Batch dimension 0 everywhere, so
    ``select_rows`` reorders it.

    A static state (``GPT.static_state``) holds one ``StaticKVCache`` per layer instead, buffers of a fixed
    capacity C, and keep_mask (B, C), False at the slots not yet written, so that every step has the same shapes
    (what a compiled step needs, ``CompiledGPT``)."""

    caches: list[KVCache] | list[StaticKVCache]
    next_position: Tensor
    keep_mask: Tensor | None
    incremental_step: IncrementalStep | None = None


class GPT(PretrainedMixin, nn.Module):
    """Decoder-only Transformer language model (GPT-2 architecture), a ``LanguageModelStepModel``.

    Args:
        config: a ``GPTConfig``.
    Inputs (``forward``): input_ids (B, T) long; state: a ``GPTState`` from an earlier call to continue those
        streams, or None to start; keep_mask (B, T) bool, True at real tokens (pads on the left only), or None;
        logits_to_keep: n in [1, T], the logits of the last n positions only (Hugging Face's name), or None for
        all T: the last layer then computes only their outputs, the earlier positions reaching it as keys and
        values (``TransformerDecoderOnly``'s ``outputs_to_keep``), so the logits equal those of all T at those
        positions up to float rounding, for less work (whole-file scoring by a sliding window).
    Outputs: ``LanguageModelOutput(logits (B, T, V) or (B, n, V) scores of the token after each position,
        GPTState)``; the state holds all T positions either way.
    Raises:
        ValueError: if a row would reach past ``config.context_length`` positions with learned positions (one
            line with the numbers), input_ids / keep_mask have the wrong shape, or logits_to_keep is not None or
            an integer in [1, T].
        TypeError / ConfigError: for input_ids that are not integers in [0, V) (``check_token_ids``, one line;
            checked once per call, so ``step`` leaves it to ``prefill``).
    """

    config_class: ClassVar[type] = GPTConfig
    model_type: ClassVar[str] = "gpt"

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        D, L = config.d_model, config.num_layers
        self.wte = nn.Embedding(config.vocab_size, D)  # W_e
        self.wpe = nn.Embedding(config.context_length, D) if config.positional == "learned" else None  # W_p
        self.sinusoidal = None  # PE(pos), fixed: any position has its code
        if config.positional == "sinusoidal":
            self.sinusoidal = SinusoidalPositionalEncoding(D, max_length=config.context_length)
        self.drop = nn.Dropout(config.dropout)
        rotary = None
        if config.positional == "rotary":
            rotary = RotaryEmbedding(D // config.num_heads, max_length=config.context_length)
        layers = [
            TransformerDecoderOnlyLayer(
                D,
                config.num_heads,
                config.inner_size,
                dropout=config.dropout,
                activation=config.activation,
                norm_first=True,
                layer_norm_eps=config.layer_norm_eps,
                bias=config.bias,
                rotary=rotary,
            )
            for _ in range(L)
        ]
        final_norm = nn.LayerNorm(D, eps=config.layer_norm_eps, bias=config.bias)
        self.decoder = TransformerDecoderOnly(layers, final_norm=final_norm)
        self.lm_head = None if config.tie_embeddings else nn.Linear(D, config.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation: weights N(0, 0.02^2), the projections into the residual stream N(0, 0.02^2 / 2L)
        (Radford et al., 2019, sec. 2.3), biases 0, layer norms 1 and 0."""
        residual_std = 0.02 / math.sqrt(2 * self.config.num_layers)
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                std = residual_std if name.endswith(("out_proj", "linear2")) else 0.02
                nn.init.normal_(module.weight, std=std)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()

    @property
    def context_length(self) -> int | None:
        """Most positions a row may reach: ``config.context_length`` with learned positions, None with sinusoidal
        or rotary ones (computed for any position; quality past the trained length is another matter)."""
        return self.config.context_length if self.config.positional == "learned" else None

    def empty_state(self, batch_size: int) -> GPTState:
        """The state before any token: empty caches, every row at position 0."""
        weight = self.wte.weight
        caches = self.decoder.empty_caches(batch_size, dtype=weight.dtype, device=weight.device)
        return GPTState(caches, torch.zeros(batch_size, dtype=torch.long, device=weight.device), None)

    def _hidden(
        self,
        input_ids: Tensor,
        state: GPTState | None,
        keep_mask: Tensor | None,
        outputs_to_keep: int | None = None,
    ) -> tuple[Tensor, GPTState]:
        """LN_f(h_L) (B, T, D), or (B, n, D) at the last n = outputs_to_keep positions, and the state after
        input_ids."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
        B, T = input_ids.shape
        if keep_mask is not None and (keep_mask.dtype != torch.bool or keep_mask.shape != (B, T)):
            found = f"{keep_mask.dtype} {tuple(keep_mask.shape)}"
            raise ValueError(f"keep_mask must be bool (B, T) = ({B}, {T}), got {found}")
        state = self.empty_state(B) if state is None else state
        if keep_mask is None:
            positions = state.next_position[:, None] + torch.arange(T, device=input_ids.device)  # (B, T)
            counts = T
        else:
            real = keep_mask.long().cumsum(dim=1)  # (B, T) real tokens up to and including t
            positions = state.next_position[:, None] + (real - 1).clamp(min=0)  # pads share their row's first slot
            counts = real[:, -1] if T else 0
        next_position = state.next_position + counts
        x = self.wte(input_ids)  # (B, T, D)
        if self.wpe is not None:
            if not torch.compiler.is_exporting():  # positions are data then; the graph's caller checks the reach
                self.check_reach(state.caches[0].length + T, next_position)
            x = x + self.wpe(positions)
        elif self.sinusoidal is not None:  # scaled as in Vaswani et al. (2017, sec. 3.4), so PE does not swamp W_e
            x = x * math.sqrt(self.config.d_model) + self.sinusoidal.encoding(positions).to(x.dtype)
        # Rotary positions need no per-row shift: <R(m) q, R(n) k> depends on m - n only, the same with or without
        # a row's left pads, and pads are never attended.
        cache_mask = None
        if keep_mask is not None or state.keep_mask is not None:
            S = state.caches[0].length
            old = state.keep_mask if state.keep_mask is not None else input_ids.new_ones(B, S, dtype=torch.bool)
            new = keep_mask if keep_mask is not None else input_ids.new_ones(B, T, dtype=torch.bool)
            cache_mask = torch.cat([old, new], dim=1)  # (B, S + T)
        out = self.decoder(
            drop(self.drop, x), keep_mask=cache_mask, caches=state.caches, outputs_to_keep=outputs_to_keep
        )
        return out.output, GPTState(out.caches, next_position, cache_mask)

    def check_reach(self, reach: int, next_position: Tensor) -> None:
        """Refuse positions past the learned context. No row reaches past ``reach`` = S + T positions (pads take
        cache slots, not positions): only a call that might overflow reads the exact maximum next_position (B,)
        back from the device.

        Raises: ValueError naming the row's length and the context length.
        """
        B = next_position.shape[0]
        last = reach if reach <= self.config.context_length else int(next_position.max()) if B else 0
        if last > self.config.context_length:
            raise ValueError(
                f"a row reaches {last} tokens, past the context length ({self.config.context_length}) of this GPT"
            )

    def _project(self, h: Tensor) -> Tensor:
        """Logits (..., V) = h W_e^T (tied) or h W_out^T."""
        return F.linear(h, self.wte.weight) if self.lm_head is None else self.lm_head(h)

    def forward(
        self,
        input_ids: Tensor,
        state: GPTState | None = None,
        *,
        keep_mask: Tensor | None = None,
        logits_to_keep: int | None = None,
    ) -> LanguageModelOutput:
        if not torch.compiler.is_exporting():  # ids are data in an exported graph: its caller checks them
            check_token_ids(input_ids, self.config.vocab_size)
        T = input_ids.shape[-1]
        if logits_to_keep is not None and (
            isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or not 1 <= logits_to_keep <= T
        ):
            raise ValueError(f"logits_to_keep ({logits_to_keep!r}) must be None or an integer in [1, T] = [1, {T}]")
        h, new_state = self._hidden(input_ids, state, keep_mask, logits_to_keep)
        return LanguageModelOutput(self._project(h), new_state)

    def prefill(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> StepOutput:
        """Run left-padded prompts input_ids (B, T) (keep_mask (B, T), True at real tokens, or None); return the
        logits (B, V) of the token after each prompt and the state. Only the last position is projected to V.
        An all-True keep_mask is dropped here, once, so that the steps attend without a mask.

        Raises: TypeError / ConfigError for ids that are not integers in [0, V) (``check_token_ids``)."""
        check_token_ids(input_ids, self.config.vocab_size)
        if keep_mask is not None and keep_mask.shape == input_ids.shape and bool(keep_mask.all()):
            keep_mask = None
        h, state = self._hidden(input_ids, None, keep_mask)
        fast = None if torch.is_grad_enabled() else self.decoder.incremental_step()
        return StepOutput(self._project(h[:, -1]), state._replace(incremental_step=fast))

    def static_state(self, state: GPTState, capacity: int) -> GPTState:
        """The static form of a state of S cached tokens (e.g. a prefill's): its keys and values copied into
        ``StaticKVCache`` buffers of ``capacity`` C steps, keep_mask (B, C) True at its real tokens only. ``step``
        then writes each token into the next slot, with the same shapes at every position.

        Raises: ValueError if the state's caches are static already, or capacity is not an integer > S.
        """
        caches, next_position, keep_mask, _ = state
        if isinstance(caches[0], StaticKVCache):
            raise ValueError("the state's caches are static already")
        static = [StaticKVCache.holding(cache, capacity) for cache in caches]
        B, S = next_position.shape[0], caches[0].length
        keep = torch.zeros(B, capacity, dtype=torch.bool, device=next_position.device)  # (B, C)
        keep[:, :S] = True if keep_mask is None else keep_mask
        return GPTState(static, next_position, keep, None)

    def step(self, tokens: Tensor, state: GPTState) -> StepOutput:
        """Feed tokens (B,), one per row; return the next token's logits (B, V) and the state.

        Without gradients (``torch.no_grad`` / ``inference_mode``) and with no dropout in effect, the decoder runs
        its fast path, ``IncrementalStep`` (the state's, else made here), over the modules the model holds now
        (wrapped or quantized ones are called; ``state.incremental_step.module_calls`` names them); otherwise
        ``forward``'s modules (``state.incremental_step`` of the result says which ran: None for the modules).
        At one row on the CPU, the widening products (q, k, v stacked, the first feed-forward layer, the head) run
        from transposed copies of their weights that the state's ``incremental_step`` keeps for this decoding run
        (made by ``prefill``) and rebuilds when a weight changes (``seqlab.nn.direct_calls.stacked_product``); at a
        few rows, q, k and v run as one product over their weights stacked, which it keeps too.

        A static state (``static_state``) takes the fast path only, writes the token into slot S of its
        buffers (S + 1 <= C is the caller's to keep: ``CompiledGPT`` grows the buffers) and passes on no
        ``incremental_step``, so that a compiled step traces the decoder's modules at every compilation; its
        learned positions are not checked against the context here (``CompiledGPT`` and ``generate`` keep rows
        within it).

        Raises: ValueError for a static state with gradients enabled, dropout in effect, or no fast path (an
            attention kind other than "full").
        """
        static = isinstance(state.caches[0], StaticKVCache)
        fast = None
        if not torch.is_grad_enabled() and not (self.training and self.drop.p > 0.0):
            fast = self.decoder.incremental_step(derive=False) if static else state.incremental_step
            fast = fast or self.decoder.incremental_step()
        if fast is None:
            if static:
                raise ValueError(
                    "a static state is decoded by the fast path only: no gradients, no dropout in effect "
                    "and full attention"
                )
            h, new_state = self._hidden(tokens[:, None], state, None)
            return StepOutput(self._project(h[:, 0]), new_state)
        caches, next_position, keep_mask, _ = state
        following = next_position + 1
        x = direct_calls.embedding(self.wte, tokens)  # (B, D)
        if self.wpe is not None:
            if not static:  # S is data in a static cache
                self.check_reach(caches[0].length + 1, following)
            x = x + direct_calls.embedding(self.wpe, next_position)
        elif self.sinusoidal is not None:
            x = x * math.sqrt(self.config.d_model) + self.sinusoidal.encoding(next_position).to(x.dtype)
        if static:
            keep_mask = keep_mask.index_fill(1, caches[0].length, True)  # (B, C): slot S now holds a real token
        elif keep_mask is not None:
            keep_mask = torch.cat([keep_mask, keep_mask.new_ones(keep_mask.shape[0], 1)], dim=1)  # (B, S + 1)
        out = fast(x.unsqueeze(1), caches=caches, keep_mask=keep_mask)
        h = out.output[:, 0]  # (B, D)
        return StepOutput(
            self._step_logits(h, fast), GPTState(out.caches, following, keep_mask, None if static else fast)
        )

    def _step_logits(self, h: Tensor, fast: IncrementalStep) -> Tensor:
        """A step's logits (B, V) from h (B, D): at one row from the transposed head that the run's derived weights
        keep (``direct_calls.stacked_product``), at a few rows by ``direct_calls.affine``."""
        logits = None
        if fast.derived is not None and h.shape[0] == 1:
            if self.lm_head is not None:
                logits = direct_calls.stacked_linear((self.lm_head,), h, fast.derived)
            else:
                logits = direct_calls.stacked_product(h, (self.wte.weight,), (), fast.derived)
        if logits is not None:
            return logits
        if self.lm_head is not None:
            return direct_calls.linear(self.lm_head, h, few=direct_calls.few_rows(h))
        return direct_calls.affine(h, self.wte.weight) if direct_calls.few_rows(h) else self._project(h)

    def reorder_state(self, state: GPTState, index: Tensor, *, in_place: bool = False) -> GPTState:
        """The state of rows ``index`` (B',), in that order; the caches keep their spare capacity
        (``KVCache.select_rows``, ``StaticKVCache.select_rows``), so the next step still appends in place.

        in_place: give ``state`` up (beam search, which never reads a state again once reordered): each
        ``KVCache`` then permutes its rows within its own buffer, over the steps where they differ only
        (``KVCache.select_rows(index, in_place=True)``), and ``state``'s caches change with it; what the layers'
        reorders share is worked out once (``KVCache.select_rows_of``). Static caches are always copied. Taking the
        keyword declares ``seqlab.decoding.interface.InPlaceReorderModel``: the generation engine's beam search
        passes True."""
        if isinstance(state.caches[0], StaticKVCache):
            caches = [cache.select_rows(index) for cache in state.caches]
        else:
            caches = KVCache.select_rows_of(state.caches, index, in_place=in_place)
        next_position, keep_mask = select_rows(state.next_position, index), select_rows(state.keep_mask, index)
        return GPTState(caches, next_position, keep_mask, state.incremental_step)

    @classmethod
    def from_hf(cls, directory: str | Path) -> GPT:
        """Load a Hugging Face GPT-2 folder (config.json + model.safetensors from
        ``GPT2LMHeadModel.save_pretrained``); float32 parameters, eval mode.

        Raises:
            CheckpointError: (one line) for a missing file, an unsupported config field, or a missing,
                unexpected or mis-shaped tensor (named).
        """
        directory = Path(directory)
        model = cls(GPTConfig(**convert_hf.read_gpt2_config(directory)))
        state = convert_hf.read_gpt2_weights(directory, model.state_dict(), model.config.num_layers)
        model.load_state_dict(state)
        model.eval()
        return model

    def save_hf(self, directory: str | Path) -> None:
        """Write a Hugging Face GPT-2 folder (config.json + model.safetensors) that
        ``transformers.GPT2LMHeadModel.from_pretrained`` loads with the same logits.

        Raises: ConfigError for a config GPT-2 cannot express (sinusoidal or rotary positions, no biases, activation
            "relu").
        """
        convert_hf.write_gpt2(Path(directory), self.config, self.state_dict())


def gpt(
    *,
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_heads: int,
    num_layers: int,
    d_ff: int | None = None,
    dropout: float = 0.0,
    positional: Literal["learned", "sinusoidal", "rotary"] = "learned",
    activation: Literal["gelu_tanh", "gelu", "relu"] = "gelu_tanh",
    tie_embeddings: bool = True,
) -> GPT:
    """Component builder: a pre-LN GPT of any shape (the presets below only fill in numbers)."""
    config = GPTConfig(
        vocab_size=vocab_size,
        context_length=context_length,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=d_ff,
        dropout=dropout,
        positional=positional,
        activation=activation,
        tie_embeddings=tie_embeddings,
    )
    return GPT(config)


def gpt2_small(*, vocab_size: int = 50257, dropout: float = 0.1) -> GPT:
    """GPT-2 small (124M parameters with V = 50257): 12 layers, 12 heads, D = 768, 1024 positions."""
    return gpt(vocab_size=vocab_size, context_length=1024, d_model=768, num_heads=12, num_layers=12, dropout=dropout)


def gpt_char_small(*, vocab_size: int = 65, dropout: float = 0.0) -> GPT:
    """nanoGPT's CPU "shakespeare_char" shape: 4 layers, 4 heads, D = 128, context 64 (no dropout there)."""
    return gpt(vocab_size=vocab_size, context_length=64, d_model=128, num_heads=4, num_layers=4, dropout=dropout)
