"""LoRA fine-tuning (train.lora_rank): at step 0 an adapted GPT, BERT classifier and T5 compute exactly what the
pretrained model computes; the pretrained body is frozen and the optimizer holds the adapters and the new head
only; the settings and targets that do not apply are refused in one line."""

import copy
import re

import pytest
import torch
from torch import nn

from seqlab.errors import ConfigError
from seqlab.models import GPT, T5, BertConfig, BertForMeanPooledClassification
from seqlab.models.language_model.gpt import GPTConfig
from seqlab.models.t5 import T5Config
from seqlab.nn.lora import lora_layers
from seqlab.training.lora import adapt_pretrained
from seqlab.training.optim import build_optimizer
from seqlab.training.train_config import TrainConfig

LORA = TrainConfig(lora_rank=2, lora_alpha=4.0, lora_targets="q_proj,v_proj,linear1")


def _randomized(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def _gpt() -> tuple[nn.Module, tuple]:
    model = GPT(GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2))
    return _randomized(model), (torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]),)


def _bert() -> tuple[nn.Module, tuple]:
    config = BertConfig(vocab_size=11, d_model=8, num_heads=2, num_layers=2, d_ff=16, pooler=False, num_labels=3)
    return _randomized(BertForMeanPooledClassification(config)), (torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]),)


def _t5() -> tuple[nn.Module, tuple]:
    config = T5Config(
        vocab_size=11, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_decoder_layers=1, num_heads=2, pad_id=0, eos_id=1
    )
    inputs = (torch.tensor([[3, 4, 5, 1], [6, 7, 1, 0]]), torch.tensor([4, 3]), torch.tensor([[0, 8, 9], [0, 2, 3]]))
    return _randomized(T5(config)), inputs


def _body(model: nn.Module, head: str = "classifier") -> list[str]:
    """Every parameter but the head's: what model.init_from would have loaded."""
    return [name for name, _ in model.named_parameters() if not name.startswith(head)]


@pytest.mark.parametrize("build", [_gpt, _bert, _t5])
def test_at_step_zero_the_adapted_model_equals_the_pretrained_model_exactly(build):
    model, inputs = build()
    base = copy.deepcopy(model)
    lines = []
    adapted = adapt_pretrained(model, LORA, _body(model), log=lines.append)
    assert adapted and all(name.rpartition(".")[2] in ("q_proj", "v_proj", "linear1") for name in adapted)
    assert list(lora_layers(model)) == adapted
    with torch.no_grad():
        assert torch.equal(model(*inputs).logits, base(*inputs).logits)


def test_only_the_adapters_and_the_new_head_train_and_the_optimizer_holds_only_those():
    model, (ids,) = _bert()
    lines = []
    adapted = adapt_pretrained(model, LORA, _body(model), log=lines.append)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    expected = {f"{layer}.lora_{m}" for layer in adapted for m in "AB"} | {"classifier.weight", "classifier.bias"}
    assert trainable == expected
    optimizer = build_optimizer(model, LORA)
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for name, p in model.named_parameters() if name in expected}
    model.train()
    nn.functional.cross_entropy(model(ids).logits, torch.tensor([0, 2])).backward()
    assert {name for name, p in model.named_parameters() if p.grad is not None} == expected
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    assert lines == [
        f"train.lora_rank=2: adapters on 6 Linear layers (q_proj, v_proj, linear1); {count:,} of {total:,} "
        "parameters train"
    ]


def test_a_qualified_target_adapts_that_layer_only():
    model, _ = _gpt()
    config = TrainConfig(lora_rank=2, lora_targets="decoder.layers.1.self_attn.q_proj")
    assert adapt_pretrained(model, config, _body(model), log=print) == ["decoder.layers.1.self_attn.q_proj"]


def test_without_lora_rank_nothing_changes():
    model, _ = _gpt()
    assert adapt_pretrained(model, TrainConfig(), _body(model), log=print) == []
    assert lora_layers(model) == {} and all(p.requires_grad for p in model.parameters())


def test_lora_without_a_pretrained_body_or_a_matching_target_is_one_line():
    model, _ = _bert()
    message = "train.lora_rank: no pretrained body to adapt; set model.init_from (or an arch with one)"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        adapt_pretrained(model, LORA, [], log=print)
    message = (
        "train.lora_targets: 'query' names no Linear layer of the pretrained body; its Linear layers are "
        "k_proj, linear1, linear2, out_proj, q_proj, v_proj"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        adapt_pretrained(model, TrainConfig(lora_rank=2, lora_targets="q_proj,query"), _body(model), log=print)
    message = (  # the head is not pretrained: adapting it would freeze a random weight
        "train.lora_targets: 'classifier' names no Linear layer of the pretrained body; its Linear layers are "
        "k_proj, linear1, linear2, out_proj, q_proj, v_proj"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        adapt_pretrained(model, TrainConfig(lora_rank=2, lora_targets="classifier"), _body(model), log=print)
    assert lora_layers(model) == {}  # refused before anything changed


def test_a_rank_above_the_adapted_layers_sizes_is_refused_before_allocating():
    model, _ = _gpt()
    message = "train.lora_rank (9) must be <= 8, the smallest size of the adapted layers"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        adapt_pretrained(model, TrainConfig(lora_rank=9), _body(model), log=print)
    assert lora_layers(model) == {} and all(p.requires_grad for p in model.parameters())


def test_the_body_must_have_a_linear_layer():
    model = nn.Sequential(nn.Embedding(5, 3), nn.LSTM(3, 3))
    message = "train.lora_rank: the pretrained body has no Linear layer to adapt"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        adapt_pretrained(model, LORA, [name for name, _ in model.named_parameters()], log=print)


def test_an_optimizer_for_lora_refuses_a_model_without_adapters():
    model, _ = _gpt()
    message = (
        "lora_rank (2): the model has no LoRA adapters; it applies where a recipe fine-tunes a pretrained body "
        "(seqlab.training.lora)"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build_optimizer(model, LORA)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lora_alpha": 16.0}, "lora_alpha (16.0) applies to LoRA fine-tuning only; set lora_rank as well"),
        ({"lora_targets": "q_proj"}, "lora_targets ('q_proj') applies to LoRA fine-tuning only; set lora_rank as well"),
        ({"lora_rank": 0}, "lora_rank (0) must be an integer >= 1"),
        ({"lora_rank": 4, "lora_alpha": -1.0}, "lora_alpha (-1.0) must be a finite number > 0"),
        ({"lora_rank": 4, "lora_dropout": 1.5}, "lora_dropout (1.5) must be in [0, 1)"),
        ({"lora_rank": 4, "lora_targets": " , "}, "lora_targets (' , ') must name Linear layers, e.g. 'q_proj,v_proj'"),
        (
            {"lora_rank": 4, "body_lr_scale": 0.1},
            "body_lr_scale (0.1) has nothing to scale: lora_rank freezes the pretrained body",
        ),
    ],
)
def test_bad_lora_settings_are_refused_naming_the_value(settings, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        TrainConfig(**settings)
