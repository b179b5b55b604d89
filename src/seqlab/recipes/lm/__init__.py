"""Recipe ``lm``: a language model (GPT or a recurrent LM) over characters, words or BPE pieces of a plain text.

Task: p(x_{t+1} | x_<=t) by maximum likelihood (Bengio et al., 2003; Mikolov et al., 2010; Radford et al., 2018).
Data: the default corpus (the King James Bible, ``seqlab.data.text``) or the user's UTF-8 files, split into
contiguous train / valid / test pieces. Metrics: whole-file loss of the test split in nats per token, its
perplexity exp(loss), and bits per character (total nats / (characters of the split * ln 2), for any tokenizer).

Training, one "epoch" (validated at its end) being ``data.batches_per_epoch`` optimizer micro-batches, 500 for a
GPT and 250 for the other archs unless set (``config.STREAM_SECTION_DEFAULTS``):
- ``gpt``: random blocks of ``model.context_length`` tokens of the train split (nanoGPT's ``get_batch``).
- ``ssm``: the same random blocks, read by S4D state-space blocks in their parallel (convolution) form.
- ``lstm`` | ``gru`` | ``gru_textbook`` | ``rnn`` | ``tcn``: truncated BPTT over ``train.batch_size`` parallel streams
  of the train split's paragraphs (``seqlab.data.streams``), ``data.bptt_len`` steps per window, the state carried
  (detached) from window to window and across epochs, zeroed at each paragraph; an epoch continues where the previous
  one stopped. That is truncated BPTT(k1, k2) with k1 = ``data.bptt_len`` and k2 = ``data.bptt_k2`` (each window's
  loss backpropagated through its k1 steps and the k2 - k1 before it; k2 = k1 unless set). A TCN's state is its
  convolutions' last inputs, so each prediction reads its receptive field (``model.kernel_size``,
  ``model.num_levels``; printed on the log line) across window boundaries.
Validation: mean loss over ``data.valid_tokens`` tokens of the valid split: for a GPT or an SSM, in
``data.valid_tokens // model.context_length`` blocks spread evenly over the whole split (a sample of all of it: at
2,000 steps of nanoGPT's shape, 8,192 spread tokens score within 0.004 nats of the whole split, the first 16,384
0.07 below it); for the streamed archs, the split's first ``data.valid_tokens`` tokens. Test: the whole test split,
by a sliding window of stride context_length // 2 (GPT) or one stream with its state carried (recurrent, TCN,
SSM).

The model section is a choice (``model.arch``): ``gpt`` (``GPTModelConfig``), a recurrent ``lstm`` | ``gru`` |
``gru_textbook`` (the notes' GRU) | ``rnn`` (``RecurrentModelConfig``), a convolutional ``tcn`` (``TCNModelConfig``)
or a state-space ``ssm`` (``SSMModelConfig``); another arch's key is refused. ``model.preset`` of an LSTM
(zaremba_small | zaremba_medium | zaremba_large, Zaremba et al., 2014) fills, when ``prepare`` runs, every field still
at its default: the RNN sizes, dropout and init range, data.bptt_len, and train optimizer sgd, lr 1, clip_norm,
batch_size 20, the paper's epochs and its per-epoch decay (``train.schedule=epoch_decay``: epoch e trains at
``ZarembaTraining.lr_at(e)``); an epoch here is ``data.batches_per_epoch`` windows, not a pass over the corpus as in
the paper (set it to the windows of one pass for the paper's schedule); ``recipe.json`` holds the filled config. The
default training anneals a cosine down to lr / 10 (``train.min_lr_ratio``, nanoGPT's floor) that ends when
``train.time_budget`` runs out (or at ``train.max_steps``, whichever comes first; ``seqlab.training.schedules``).

Modules: ``config`` (the sections and presets), ``system`` (a trained run: evaluate, predict, generate, attention
maps), ``training`` (``prepare`` and its parts).
"""

from seqlab.recipes.lm.config import Config
from seqlab.recipes.lm.system import Continuation, LanguageModelSystem
from seqlab.recipes.lm.training import prepare

NAME = "lm"
DESCRIPTION = (
    "language model (GPT, LSTM, GRU, RNN, TCN, SSM) on char/word/BPE tokens; perplexity and bits/char of a text"
)
System = LanguageModelSystem

__all__ = ["DESCRIPTION", "NAME", "Config", "Continuation", "LanguageModelSystem", "System", "prepare"]
