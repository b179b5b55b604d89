"""seqlab: sequence models from the equations, proven against PyTorch, as fast as its fused kernels.

Shape legend (used by every docstring and reshape comment in the package):

    B  batch size                    T  target / time steps
    S  source steps                  E  embedding (input feature) size
    H  hidden size                   D  d_model
    N  attention heads               Dh head dimension (D // N)
    V  vocabulary size               L  layers
    K  beams / hypotheses per input  C  directions (1 or 2)

Masks are boolean and True where a position is real / may be attended (the SDPA convention): ``keep_mask``, and
``memory_keep_mask`` for the memory of cross-attention.

Recurrent state tensors have their batch dimension at -2 everywhere: (B, H) for a cell, (L*C, B, H) for a layer
(P instead of H under an LSTM projection), so code that selects or reorders sequences of a state uses dim=-2.
"""

__version__ = "0.1.0"
