"""BERT with its pre-training and fine-tuning heads (Devlin et al., 2019, sec. 3.1 and fig. 4).

    MLM:       p(x_t | x_masked) = softmax(LN(GELU(W_t h_t + b_t)) W_tok^T + b_V)   (decoder tied to W_tok)
    NSP:       p(IsNext | A, B) = softmax(W_nsp pooled + b_nsp)                      (2 classes: IsNext, NotNext)
    sequence:  p(y | x) = softmax(W_c Drop(pooled) + b_c)                            (pooled [CLS])
    mean:      p(y | x) = softmax(W_c Drop(mean_{t real} h_t) + b_c)                 (mean over real tokens)
    token:     p(y_t | x) = softmax(W_c Drop(h_t) + b_c)                             (every token)

Each model holds its body as ``bert`` (a ``Bert``), so parameter names match Hugging Face's task models
(``bert.encoder...``) after ``convert_hf.py``'s mapping, and a fine-tuned model starts from a pre-trained body by
``model.bert.load_state_dict(body.state_dict())``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.bert import convert_hf
from seqlab.models.bert.model import ACTIVATIONS, Bert, BertConfig, BertOutput
from seqlab.models.classifier import ClassifierOutput
from seqlab.models.pretrained import PretrainedMixin

_ACTIVATION = dict(zip(ACTIVATIONS, (F.gelu, partial(F.gelu, approximate="tanh"), F.relu), strict=True))


class MaskedLMHead(nn.Module):
    """The MLM head: a dense layer, the activation, a layer norm, then the decoder tied to the word embeddings
    (Devlin et al., 2019; Hugging Face's ``BertLMPredictionHead``).

    Args:
        config: the body's ``BertConfig``.
    Inputs: h (..., D); word_embeddings: the body's W_tok (V, D), passed in so the tie holds one parameter.
    Outputs: logits (..., V).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.activation = config.activation
        self.dense = nn.Linear(config.d_model, config.d_model)  # W_t, b_t
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # b_V

    def forward(self, h: Tensor, word_embeddings: Tensor) -> Tensor:
        h = self.norm(_ACTIVATION[self.activation](self.dense(h)))
        return F.linear(h, word_embeddings, self.bias)  # (..., V)


class MaskedLMOutput(NamedTuple):
    """logits (B, T, V) of the token at every position (or (M, V), see ``BertForMaskedLM``); hidden: the body's
    ``BertOutput``."""

    logits: Tensor
    hidden: BertOutput


class PreTrainingOutput(NamedTuple):
    """mlm_logits (B, T, V); nsp_logits (B, 2), class 0 = IsNext, 1 = NotNext (Hugging Face's order)."""

    mlm_logits: Tensor
    nsp_logits: Tensor


class BertTaskModel(PretrainedMixin, nn.Module):
    """A BERT body and a head, built from one ``BertConfig``; ``from_hf`` / ``save_hf`` as ``Bert``'s."""

    config_class: ClassVar[type] = BertConfig
    hf_architecture: ClassVar[str]

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Bert(config)

    def _init_head(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear) and not any(module is m for m in self.bert.modules()):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    @classmethod
    def from_hf(cls, directory: str | Path) -> BertTaskModel:
        """Load a Hugging Face folder with this head (module docstring); float32 parameters, eval mode.

        Raises: CheckpointError (one line) as ``Bert.from_hf``, naming the head's tensor if the folder lacks it.
        """
        return convert_hf.load_hf(cls, Path(directory))

    def save_hf(self, directory: str | Path) -> None:
        """Write a Hugging Face folder of ``hf_architecture`` (config.json + model.safetensors)."""
        convert_hf.save_hf(self, Path(directory))


class BertForMaskedLM(BertTaskModel):
    """BERT with the MLM head (Hugging Face's ``BertForMaskedLM``).

    Inputs: as ``Bert``, and select: (B, T) bool, the positions to project to V (the selected tokens of MLM
        training, 15% of the cost of every position), or None for all.
    Outputs: ``MaskedLMOutput(logits (B, T, V), or (M, V) at the M selected positions in row-major order, hidden)``.
    """

    model_type: ClassVar[str] = "bert_mlm"
    hf_architecture: ClassVar[str] = "BertForMaskedLM"

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.mlm_head = MaskedLMHead(config)
        self._init_head()

    def forward(
        self,
        input_ids: Tensor,
        *,
        keep_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        select: Tensor | None = None,
    ) -> MaskedLMOutput:
        hidden = self.bert(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids)
        h = hidden.last_hidden_state if select is None else hidden.last_hidden_state[select]  # (B, T, D) | (M, D)
        return MaskedLMOutput(self.mlm_head(h, self.bert.word_embeddings.weight), hidden)


class BertForPreTraining(BertTaskModel):
    """BERT with the MLM and NSP heads (Hugging Face's ``BertForPreTraining``); needs ``config.pooler``.

    Inputs: as ``Bert``. Outputs: ``PreTrainingOutput(mlm_logits (B, T, V), nsp_logits (B, 2))``.
    Raises: ValueError at construction if ``config.pooler`` is False.
    """

    model_type: ClassVar[str] = "bert_pretraining"
    hf_architecture: ClassVar[str] = "BertForPreTraining"

    def __init__(self, config: BertConfig) -> None:
        if not config.pooler:
            raise ValueError("BertForPreTraining's NSP head reads the pooled [CLS]: config.pooler must be True")
        super().__init__(config)
        self.mlm_head = MaskedLMHead(config)
        self.nsp_head = nn.Linear(config.d_model, 2)  # W_nsp, b_nsp
        self._init_head()

    def forward(self, input_ids: Tensor, *, keep_mask: Tensor | None = None, token_type_ids: Tensor | None = None):
        hidden = self.bert(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids)
        mlm_logits = self.mlm_head(hidden.last_hidden_state, self.bert.word_embeddings.weight)
        return PreTrainingOutput(mlm_logits, self.nsp_head(hidden.pooled))


class BertForSequenceClassification(BertTaskModel):
    """BERT with a linear classifier over the pooled [CLS] (Devlin et al., 2019, fig. 4a-b); needs a pooler.

    Inputs: as ``Bert``. Outputs: ``ClassifierOutput(logits (B, C))``.
    Raises: ValueError at construction if ``config.pooler`` is False.
    """

    model_type: ClassVar[str] = "bert_sequence_classification"
    hf_architecture: ClassVar[str] = "BertForSequenceClassification"

    def __init__(self, config: BertConfig) -> None:
        if not config.pooler:
            raise ValueError("sequence classification reads the pooled [CLS]: config.pooler must be True")
        super().__init__(config)
        self.drop = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)  # W_c, b_c
        self._init_head()

    def forward(self, input_ids: Tensor, *, keep_mask: Tensor | None = None, token_type_ids: Tensor | None = None):
        pooled = self.bert(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids).pooled
        return ClassifierOutput(self.classifier(self.drop(pooled)))


class BertForMeanPooledClassification(BertTaskModel):
    """BERT with a linear classifier over the mean of the last hidden states at the real tokens ([CLS] and [SEP]
    included, pads not), the pooling sentence-transformers models such as all-MiniLM-L6-v2 were trained with
    (Reimers & Gurevych, 2019, sec. 3, MEAN strategy), without the L2 normalisation. It has no pooler (set
    ``config.pooler`` False) and no Hugging Face counterpart (``save_hf`` writes a ``BertModel`` folder of its
    body, with the classifier's tensors, which transformers ignores).

    Inputs: as ``Bert``. Outputs: ``ClassifierOutput(logits (B, C))``.
    """

    model_type: ClassVar[str] = "bert_mean_pooled_classification"

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.drop = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)  # W_c, b_c
        self._init_head()

    def forward(self, input_ids: Tensor, *, keep_mask: Tensor | None = None, token_type_ids: Tensor | None = None):
        h = self.bert(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids).last_hidden_state  # (B, T, D)
        if keep_mask is None:
            mean = h.mean(dim=1)
        else:
            weights = keep_mask.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
            mean = (h * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # (B, D)
        return ClassifierOutput(self.classifier(self.drop(mean)))


class BertForTokenClassification(BertTaskModel):
    """BERT with a linear classifier over every token's last hidden state (Devlin et al., 2019, fig. 4d).

    Inputs: as ``Bert``. Outputs: ``ClassifierOutput(logits (B, T, C))``; pads get logits too.
    """

    model_type: ClassVar[str] = "bert_token_classification"
    hf_architecture: ClassVar[str] = "BertForTokenClassification"

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.drop = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)  # W_c, b_c
        self._init_head()

    def forward(self, input_ids: Tensor, *, keep_mask: Tensor | None = None, token_type_ids: Tensor | None = None):
        h = self.bert(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids).last_hidden_state
        return ClassifierOutput(self.classifier(self.drop(h)))
