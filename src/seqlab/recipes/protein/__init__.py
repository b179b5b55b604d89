"""Recipe ``protein``: a language model over amino-acid sequences, causal (GPT) or masked (BERT), against the
unigram baseline.

Data: the 2,100 proteins of a bacterial proteome that the ``pyhmmer`` wheel ships (``seqlab.data.proteins``), or
the user's FASTA file (``data.train_path``), residues one token each; split 90/5/5 at random by protein
(``seqlab.recipes.common.item_stream``).

``model.objective=causal`` (default): a GPT over the stream of proteins, each ended by a separator, as protein
language models such as ProtGPT2 (Ferruz et al., Nat. Commun. 2022) but over single residues; the test stream's
loss in nats per token and its perplexity (per residue, each protein's end token counted as one more token), beside
the add-one unigram model of the training tokens on the same tokens. The report shows three proteins sampled from
``M`` (the start codon's methionine).

``model.objective=masked``: a BERT (``seqlab.models.BertForMaskedLM``) trained by masked language modelling as in
ESM-1b (Rives et al., PNAS 2021), with BERT's 80/10/10 masking of ``data.mask_prob`` of the residues
(``seqlab.recipes.common.masked_lm`` does the batching and scoring, as for ``bert-mlm``): a sequence is ``[CLS]``
+ ``model.context_length - 2`` consecutive residues of the stream of proteins, which are separated by ``[SEP]``
(never masked), + ``[SEP]``.
Metrics at the masked residues: loss (nats per residue), its perplexity and the accuracy (%), beside the unigram
model of the training residues at the same positions (its accuracy: predicting the most frequent residue
everywhere). ``predict`` fills each ``_`` of a sequence with the most likely residue.

Modules: ``config`` (the sections), ``system`` (a trained run: evaluate, predict, generate), ``training``
(``prepare`` and its parts).
"""

from seqlab.recipes.protein.config import DESCRIPTION, NAME, Config
from seqlab.recipes.protein.system import FilledProtein, ProteinSystem
from seqlab.recipes.protein.training import prepare

System = ProteinSystem

__all__ = ["DESCRIPTION", "NAME", "Config", "FilledProtein", "ProteinSystem", "System", "prepare"]
