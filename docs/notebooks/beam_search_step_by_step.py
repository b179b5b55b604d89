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
# # Beam search, step by step
#
# A decoder that is a fixed table: the next-token distribution depends only on the previous token (a Markov chain),
# so every number below can be checked by hand. Greedy search takes the most probable token at each step; beam search
# keeps the K most probable prefixes. With this table greedy is not optimal, and a beam of 2 finds the better sequence.

# %%
import torch

from seqlab.decoding import beam_search, greedy_search
from seqlab.models import StepOutput

BOS, EOS, A, B = 0, 1, 2, 3
names = {BOS: "<s>", EOS: "</s>", A: "a", B: "b"}
table = torch.tensor(
    [  # p(next | previous); rows: previous token BOS, EOS, a, b
        [0.0, 0.0, 0.6, 0.4],  # after <s>: a is likelier than b
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.5, 0.25, 0.25],  # after a: nothing is very likely
        [0.0, 0.9, 0.05, 0.05],  # after b: the end, almost surely
    ]
)


class MarkovDecoder:
    """A StepModel: the state is unused, the logits are the log of the table's row."""

    def step(self, tokens, state):
        return StepOutput(table[tokens].log(), state)

    def reorder_state(self, state, index):
        return state


# %% [markdown]
# By hand: greedy takes `a` (0.6), then `</s>` (0.5): p = 0.30. The sequence `b </s>` has p = 0.4 x 0.9 = 0.36.

# %%
start = torch.tensor([BOS])
greedy = greedy_search(MarkovDecoder(), None, start, eos_id=EOS, max_length=4)
beam = beam_search(MarkovDecoder(), None, start, eos_id=EOS, max_length=4, beam_size=2, length_penalty=0.0)


def show(output):
    return [
        " ".join(names[t] for t in row[: int(n)].tolist())
        for row, n in zip(output.tokens[0], output.lengths[0], strict=True)
    ]


print("greedy:", show(greedy), greedy.log_probs.exp().tolist())
print("beam 2:", show(beam), beam.log_probs.exp().tolist())
assert show(greedy) == ["a </s>"] and torch.isclose(greedy.log_probs.exp(), torch.tensor(0.30)).all()
assert show(beam)[0] == "b </s>" and torch.isclose(beam.log_probs.exp()[0, 0], torch.tensor(0.36))

# %% [markdown]
# A beam of one is greedy search, whatever the table:

# %%
one = beam_search(MarkovDecoder(), None, start, eos_id=EOS, max_length=4, beam_size=1, length_penalty=0.0)
assert torch.equal(one.tokens, greedy.tokens)

# %% [markdown]
# Exercise: change the row after `a` so that greedy search becomes optimal again. What is the smallest change?
