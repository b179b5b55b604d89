"""Language models: p(x_{t+1} | x_<=t), trained by maximum likelihood and decoded one token at a time."""

from seqlab.models.language_model.gpt import GPT, GPTConfig, GPTState, gpt, gpt2_small, gpt_char_small

__all__ = ["GPT", "GPTConfig", "GPTState", "gpt", "gpt2_small", "gpt_char_small"]
