"""seqlab: sequence models from the equations, proven against PyTorch, as fast as its fused kernels.

Shape legend (used by every docstring and reshape comment in the package):

    B  batch size                    T  target / time steps
    S  source steps                  E  embedding (input feature) size
    H  hidden size                   D  d_model
    N  attention heads               Dh head dimension (D // N)
    V  vocabulary size               L  layers
    K  beams / hypotheses per input  C  directions (1 or 2)

The state-space layers (``seqlab.nn.state_space``) keep Gu et al.'s N for the state size per channel (N/2 complex
modes), not the heads.

Masks are boolean and True where a position is real / may be attended (the SDPA convention): ``keep_mask``, and
``memory_keep_mask`` for the memory of cross-attention.

Recurrent state tensors have their batch dimension at -2 everywhere: (B, H) for a cell, (L*C, B, H) for a layer
(P instead of H under an LSTM projection), so code that selects or reorders sequences of a state uses dim=-2.

Glossary: one name per concept, in the package, in config keys (``--set section.key=...``) and, with dashes, on
the command line. Old spellings keep working for one release with a warning.

    num_beams             K, beam width (1 = greedy search)        was beam_size, --beam-size
    nbest                 hypotheses returned per input (<= K)
    num_return_sequences  sequences generated per prompt            was --num-samples
    max_new_tokens        tokens generated after the prompt
    temperature, top_k, top_p   sampling: logits / T, the k most likely, the smallest set of mass >= p
    context_length        most positions a model reads at once      was max_positions, max_length (recipe keys)
    num_labels            classes of a classifier's head
    hidden_size, num_layers, bidirectional, dropout   torch.nn's names for recurrent layers
    d_model, num_heads, d_ff, norm_first              Transformer sizes (Vaswani et al. 2017), pre-LN switch
    keep_mask             True where a position is real / may be attended
    bptt_len              steps per truncated-BPTT window
    teacher_forcing       probability of feeding the gold previous token (scheduled sampling)
    arch                  a model section's architecture; each arch has its own keys (``seqlab recipes NAME``)
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``seqlab.pronounce``: ``seqlab.recipes.pronouncer.pronounce``, imported on first use so that ``import
    seqlab`` stays light."""
    if name == "pronounce":
        from seqlab.recipes.pronouncer import pronounce

        return pronounce
    raise AttributeError(f"module 'seqlab' has no attribute {name!r}")
