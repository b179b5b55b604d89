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
# # A character GPT in a few minutes
#
# The default corpus (the King James Bible, which installs with seqlab), a character tokenizer, a small GPT and a
# plain training loop on next-character prediction, $-\sum_t \log p(x_t \mid x_{<t})$. A notebook-sized run: 100
# steps take under a minute on two CPU cores; `seqlab train lm` does the same at full length, with validation,
# checkpoints and the learning-rate schedule.

# %%
import math

import torch
import torch.nn.functional as F

from seqlab.data.text import load_default_corpus
from seqlab.data.tokenizers import CharTokenizer
from seqlab.decoding import generate
from seqlab.models import GPT, GPTConfig

torch.manual_seed(0)
text = load_default_corpus()[:200_000]
tokenizer = CharTokenizer.train(text)
data = torch.tensor(tokenizer.encode(text))
context = 64
model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, context_length=context, d_model=64, num_heads=4, num_layers=2))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
print(f"{tokenizer.vocab_size} characters, {sum(p.numel() for p in model.parameters()):,} parameters")


def batch(size=16):
    starts = torch.randint(0, len(data) - context - 1, (size,))
    window = torch.stack([data[s : s + context + 1] for s in starts])
    return window[:, :-1], window[:, 1:]  # inputs and next characters, (B, T) each


# %% [markdown]
# Before training every character is equally likely: the loss is $\ln V$.

# %%
inputs, targets = batch()
with torch.no_grad():
    first = F.cross_entropy(model(inputs).logits.flatten(0, 1), targets.flatten()).item()
print(f"loss {first:.2f} nats, ln V = {math.log(tokenizer.vocab_size):.2f}")
assert abs(first - math.log(tokenizer.vocab_size)) < 0.5

for step in range(100):
    inputs, targets = batch()
    loss = F.cross_entropy(model(inputs).logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(step, round(loss.item(), 3))
assert loss.item() < first - 0.8  # it has learned the characters' frequencies and more

# %% [markdown]
# Sampling continues a prompt through the package's one generation engine (temperature, top-k, top-p, beams).

# %%
prompt = torch.tensor([tokenizer.encode("And God said")])
out = generate(
    model.eval(), prompt, max_new_tokens=80, do_sample=True, top_k=10, generator=torch.Generator().manual_seed(0)
)
print(tokenizer.decode(out.tokens[0].tolist()))

# %% [markdown]
# Exercise: train 1,000 steps and compare the loss with `seqlab train lm --set train.max_steps=1000`. What does the
# recipe do that this loop does not?
