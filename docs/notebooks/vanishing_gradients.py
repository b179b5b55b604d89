# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Vanishing gradients
#
# $\partial h_T / \partial h_k = \prod_{t=k+1}^{T} \mathrm{diag}(f'(a_t)) W_{hh}$ (Bengio et al. 1994; Pascanu et al.
# 2013). Its norm against $T - k$ for an Elman RNN, a GRU and an LSTM, measured with `seqlab.analysis.gradient_flow`.

# %%
import matplotlib.pyplot as plt
import torch

from seqlab.analysis import gradient_flow
from seqlab.nn import GRUCell, LSTMCell, RNNCell

torch.manual_seed(0)
x = torch.randn(60, 8)  # (T, E): one sequence of 60 steps
flows = {type(cell).__name__: gradient_flow(cell, x) for cell in (RNNCell(8, 32), GRUCell(8, 32), LSTMCell(8, 32))}

figure, axis = plt.subplots(figsize=(5, 3))
for name, flow in flows.items():
    axis.semilogy(flow.jacobian_norm.tolist(), label=name)
axis.set_xlabel("T - k (steps)")
axis.set_ylabel("||dh_T / dh_k||")
axis.legend()
figure.tight_layout()

# %% [markdown]
# A linear RNN with no input is $h_t = W h_{t-1}$, so the Jacobian is exactly $W^{T-k}$: check one entry by hand.

# %%
W = torch.tensor([[0.9, 0.2], [0.0, 0.5]])


def unroll(h):
    for _ in range(10):
        h = W @ h
    return h


jacobian = torch.autograd.functional.jacobian(unroll, torch.ones(2))
assert torch.allclose(jacobian, torch.linalg.matrix_power(W, 10))
print("||W^10|| =", torch.linalg.matrix_norm(jacobian, ord=2).item(), "; 0.9^10 =", 0.9**10)

# %% [markdown]
# Exercise: scale the RNN cell's `weight_hh` by 3 and measure again. When does the norm grow instead of shrink?
