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
# # Attention by hand
#
# One decoder query, five encoder states, two of them padding. We write the scores, the softmax and the context
# vector out, and check them against `seqlab.nn`'s attention modules.

# %%
import matplotlib.pyplot as plt
import torch

from seqlab.nn import AdditiveAttention, BilinearAttention, DotProductAttention

torch.manual_seed(0)
H = 4
query = torch.randn(1, 1, H)  # (B, T, H): one decoder step
keys = torch.randn(1, 5, H)  # (B, S, H): five encoder states
keep = torch.tensor([[True, True, True, False, False]])  # the last two are padding

# %% [markdown]
# Scaled dot product (Vaswani et al. 2017, eq. 1): $e_s = q^\top k_s / \sqrt{d}$, masked positions get $-\infty$.

# %%
scores = (query @ keys.transpose(1, 2)) / H**0.5  # (B, T, S)
scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
weights = scores.softmax(-1)
context = weights @ keys  # (B, T, H): the values are the keys here
out = DotProductAttention(scaled=True)(query, keys, keep_mask=keep)
assert torch.allclose(out.weights, weights) and torch.allclose(out.output, context)
print("weights:", [round(w, 3) for w in weights.squeeze().tolist()])

# %% [markdown]
# Additive (Bahdanau et al. 2015, eq. 6): $e_s = v^\top \tanh(W_q q + W_k k_s)$; bilinear (Luong et al. 2015, eq. 8):
# $e_s = q^\top W k_s$. Their weights are zero on the padding too.

# %%
additive, bilinear = AdditiveAttention(H, H, 8), BilinearAttention(H, H)
maps = {}
for name, attention in (("scaled dot", out), ("additive", additive(query, keys, keep_mask=keep))):
    maps[name] = attention.weights.squeeze(0)
maps["bilinear"] = bilinear(query, keys, keep_mask=keep).weights.squeeze(0)
for w in maps.values():
    assert w[0, 3:].eq(0).all() and torch.isclose(w.sum(), torch.tensor(1.0))

figure, axes = plt.subplots(1, 3, figsize=(9, 1.6))
for axis, (name, w) in zip(axes, maps.items(), strict=True):
    axis.imshow(w.detach(), vmin=0, vmax=1, cmap="viridis")
    axis.set_title(name)
    axis.set_yticks([])
    axis.set_xlabel("source position s")
figure.tight_layout()

# %% [markdown]
# Exercise: scale the query by 10. Which of the three maps becomes nearly one-hot, and why does the scaled dot
# product need its $1/\sqrt{d}$?
