"""Recipe ``vec2seq``: one-to-many generation conditioned on a class, a personal name from its language of origin.

Task: given a class (``french``), generate a sequence of that class (``Marcelline``), character by character, as
in the PyTorch tutorial "Generating names with a character-level RNN". Data: the names by language
of origin (``seqlab.data.names``, nameCreator: 9 languages, 14,100 names) split 80/10/10 per class, the ``[data]``
section the classify recipe reads too (``seqlab.recipes.common.labelled_text``), or the user's own
``TEXT<TAB>LABEL`` files. Model: ``seqlab.models.ConditionedRNNGenerator``,
a learned class embedding that sets the initial state and is fed at every step (``model.condition``), GRU by
default (``model.cell``: rnn | gru | gru_textbook | lstm), trained by teacher forcing. Samples come from
``seqlab.decoding.generate`` (ancestral sampling with temperature / top-k, section ``sample``).

Sections in ``config.py``, the trained run (``Vec2SeqSystem``: predict, evaluate, generate) in ``system.py``, the
training parts and the test's class check in ``training.py``.

Metrics: the test names' negative log-likelihood given their class (nats per character, the end token counted);
the class check: a BiLSTM classifier (``seqlab.recipes.common.class_checker``) trained on the real training names
labels ``sample.samples_per_class`` samples of every class, and its class-balanced accuracy on them is reported
beside its balanced accuracy on the real test names (what a perfect generator would reach) and chance
(100 / classes); novelty (% of samples that are not training names) and uniqueness (% distinct samples).
"""

from seqlab.recipes.vec2seq.config import Config
from seqlab.recipes.vec2seq.system import ClassSamples, Vec2SeqSystem
from seqlab.recipes.vec2seq.training import prepare

NAME = "vec2seq"
DESCRIPTION = "a name generated from its language of origin: class-conditioned char GRU, class check of samples (%)"
System = Vec2SeqSystem

__all__ = ["DESCRIPTION", "NAME", "ClassSamples", "Config", "System", "prepare"]
