import copy
import re

import pytest
import torch
from torch import nn

from seqlab.errors import ConfigError
from seqlab.nn.positional import LearnedPositionalEncoding
from seqlab.nn.recurrent import LSTM
from seqlab.training.objectives import LossOutput
from seqlab.training.optim import build_optimizer, parameter_groups
from seqlab.training.trainer import TrainConfig, Trainer


class Mixed(nn.Module):
    """Every kind of parameter the decay rule must sort: matrices, biases, norm gains, embeddings."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(7, 4)
        self.positions = LearnedPositionalEncoding(5, 4)
        self.lstm = LSTM(4, 3)
        self.torch_lstm = nn.LSTM(3, 3, batch_first=True)
        self.norm = nn.LayerNorm(3)
        self.hidden = nn.Linear(3, 4)
        self.output = nn.Linear(4, 7)
        self.output.weight = self.embedding.weight  # tied: still an embedding
        self.frozen = nn.Linear(2, 2)
        self.frozen.requires_grad_(False)


def names_of(model, params):
    ids = {id(p) for p in params}
    return sorted(name for name, p in model.named_parameters() if id(p) in ids)


def test_decay_goes_to_weight_matrices_only_not_biases_norms_or_embeddings():
    model = Mixed()
    decay, no_decay = parameter_groups(model, 0.1)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    lstm_matrices = [n for n, p in model.lstm.named_parameters() if p.dim() >= 2]
    assert lstm_matrices  # the seqlab LSTM has weight_ih / weight_hh matrices to decay
    expected = sorted(
        ["hidden.weight", "torch_lstm.weight_ih_l0", "torch_lstm.weight_hh_l0"] + [f"lstm.{n}" for n in lstm_matrices]
    )
    assert names_of(model, decay["params"]) == expected
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert set(names_of(model, no_decay["params"])) == trainable - set(expected)
    assert {"embedding.weight", "positions.weight", "norm.weight", "norm.bias", "hidden.bias"} <= set(
        names_of(model, no_decay["params"])
    )
    assert not {"frozen.weight", "frozen.bias"} & set(names_of(model, decay["params"] + no_decay["params"]))


def test_a_model_with_nothing_to_decay_gets_one_group():
    (group,) = parameter_groups(nn.LayerNorm(3), 0.1)
    assert group["weight_decay"] == 0.0 and len(group["params"]) == 2


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({"optimizer": "adam"}, torch.optim.Adam),
        ({"optimizer": "adamw"}, torch.optim.AdamW),
        ({"optimizer": "sgd"}, torch.optim.SGD),
        ({"optimizer": "sgd", "momentum": 0.9, "nesterov": True}, torch.optim.SGD),
    ],
)
def test_the_optimizer_choice_reaches_torch(kwargs, kind):
    config = TrainConfig(lr=0.03, weight_decay=0.2, **kwargs)
    optimizer = build_optimizer(Mixed(), config)
    assert type(optimizer) is kind
    assert [group["weight_decay"] for group in optimizer.param_groups] == [0.2, 0.0]
    assert {group["lr"] for group in optimizer.param_groups} == {0.03}
    if kind is torch.optim.SGD:
        momentum, nesterov = kwargs.get("momentum", 0.0), kwargs.get("nesterov", False)
        assert {(g["momentum"], g["nesterov"]) for g in optimizer.param_groups} == {(momentum, nesterov)}


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adamw_decay_is_decoupled_and_adam_decay_is_l2_in_the_gradient(optimizer):
    """With a zero loss gradient, one step moves only decayed parameters: AdamW scales them by exactly
    (1 - lr * wd) (Loshchilov & Hutter, 2019, Algorithm 2, line 12); Adam sees the gradient wd * p, whose first
    normalised step is lr * p / (|p| + eps) ~ lr * sign(p) (Kingma & Ba, 2015, Algorithm 1)."""
    model = Mixed()
    before = copy.deepcopy(model)
    lr, wd = 0.01, 0.5
    config = TrainConfig(
        optimizer=optimizer, lr=lr, weight_decay=wd, max_steps=1, clip_norm=None, batch_size=1, device="cpu"
    )

    def zero_loss(model, batch):
        return LossOutput(sum(p.sum() for p in model.parameters() if p.requires_grad) * 0.0, 1)

    Trainer(
        model,
        config,
        loss_fn=zero_loss,
        train_batches=lambda epoch, generator, batch_size: [None],
        validate=lambda model: {"valid_loss": 0.0},
        progress=False,
        log=None,
    ).fit()
    decay, _ = parameter_groups(model, wd)
    decayed = set(names_of(model, decay["params"]))
    old = dict(before.named_parameters())
    for name, p in model.named_parameters():
        p0 = old[name].detach()
        if name not in decayed:
            torch.testing.assert_close(p.detach(), p0, rtol=0, atol=0)
        elif optimizer == "adamw":
            torch.testing.assert_close(p.detach(), p0 * (1 - lr * wd))
        else:
            g = wd * p0
            torch.testing.assert_close(p.detach(), p0 - lr * g / (g.abs() + 1e-8))


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_the_fused_kernel_takes_the_steps_of_torchs_loop_over_parameters(optimizer):
    """build_optimizer picks torch's fused Adam / AdamW on a CPU (torch >= 2.4): five steps with decay move every
    parameter as the reference implementation, torch's loop over single tensors (foreach=False), does."""
    if torch.__version__ < "2.4":
        pytest.skip("torch < 2.4 has no fused CPU kernel")
    model, reference = Mixed(), Mixed()
    config = TrainConfig(optimizer=optimizer, lr=0.01, weight_decay=0.1, betas=(0.9, 0.99), batch_size=1)
    fused = build_optimizer(model, config)
    assert fused.defaults["fused"] is True
    kind = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
    loop = kind(parameter_groups(reference, 0.1), lr=0.01, betas=(0.9, 0.99), foreach=False)
    generator = torch.Generator().manual_seed(1)
    weights = [torch.randn(p.shape, generator=generator) for p in model.parameters()]
    for _ in range(5):
        for net, opt in ((model, fused), (reference, loop)):
            opt.zero_grad()
            sum((p * w + p**3).sum() for p, w in zip(net.parameters(), weights, strict=True)).backward()
            opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=name)


def test_pretrained_parameters_get_their_own_groups_at_the_scaled_learning_rate():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    config = TrainConfig(lr=0.01, body_lr_scale=0.1, weight_decay=0.5)
    optimizer = build_optimizer(model, config, pretrained=["0.weight", "0.bias"])
    groups = [(g["lr"], g["weight_decay"], [id(p) for p in g["params"]]) for g in optimizer.param_groups]
    assert groups == [
        (0.01, 0.5, [id(model[1].weight)]),
        (0.01, 0.0, [id(model[1].bias)]),
        (pytest.approx(0.001), 0.5, [id(model[0].weight)]),
        (pytest.approx(0.001), 0.0, [id(model[0].bias)]),
    ]


def test_freeze_fixes_the_named_modules_and_leaves_them_out_of_the_optimizer():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(2, 2))
    optimizer = build_optimizer(model, TrainConfig(freeze="0, 2.bias"))
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True, True, False]
    assert [id(p) for g in optimizer.param_groups for p in g["params"]] == [
        id(model[1].weight),
        id(model[2].weight),
        id(model[1].bias),
    ]


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_betas_reach_adam_and_adamw(optimizer):
    config = TrainConfig(optimizer=optimizer, betas=(0.8, 0.95))
    assert {g["betas"] for g in build_optimizer(Mixed(), config).param_groups} == {(0.8, 0.95)}
    assert {g["betas"] for g in build_optimizer(Mixed(), TrainConfig(optimizer=optimizer)).param_groups} == {
        (0.9, 0.999)  # torch's default, kept
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"betas": (0.9, 1.0)}, "betas ((0.9, 1.0)) must be two numbers in [0, 1) (beta_1, beta_2), e.g. 0.9,0.999"),
        ({"betas": (-0.1, 0.9)}, "betas ((-0.1, 0.9)) must be two numbers in [0, 1) (beta_1, beta_2), e.g. 0.9,0.999"),
        ({"betas": (0.9,)}, "betas ((0.9,)) must be two numbers in [0, 1) (beta_1, beta_2), e.g. 0.9,0.999"),
        (
            {"betas": (0.9, float("nan"))},
            "betas ((0.9, nan)) must be two numbers in [0, 1) (beta_1, beta_2), e.g. 0.9,0.999",
        ),
        (
            {"optimizer": "sgd", "betas": (0.8, 0.9)},
            "betas ((0.8, 0.9)) are used by optimizers 'adam' and 'adamw' only, not 'sgd'",
        ),
    ],
)
def test_bad_betas_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        TrainConfig(**kwargs)
