"""Truncated BPTT(k1, k2) in the lm recipe: ``data.bptt_len`` = k1, ``data.bptt_k2`` = k2 (``RecurrentTraining``).

With k2 = k1 every window's loss and gradient are those of the former loop (detach the state every k1 steps); with
k2 > k1 the gradient equals a brute-force reference: the model run over the k2 steps ending with the window from the
state that one long forward reaches there, detached, with the loss on the window's k1 outputs only (float64). The
state carried across windows is the state of one long forward. Bad values are refused in one line (exit 2).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from cli_helpers import assert_error, run_cli

from seqlab.config import apply_overrides, parse_assignments
from seqlab.errors import ConfigError
from seqlab.recipes import lm
from seqlab.recipes.lm.training import MODELS, RecurrentTraining
from seqlab.training.tbptt import detach_state

V, B, N = 7, 2, 24  # vocabulary, streams, tokens per stream: 23 input steps
ARCHS = ["lstm", "gru", "gru_textbook", "rnn", "tcn"]  # tcn: its state is its convolutions' last inputs


def tiny_model(arch: str) -> torch.nn.Module:
    """The recipe's model of ``arch`` at a tiny size, in float64."""
    config = apply_overrides(
        lm.Config(),
        parse_assignments([f"model.arch={arch}", "model.embedding_size=3", "model.hidden_size=4"]),
    )
    torch.manual_seed(0)
    return MODELS[arch](config.model.model_config(vocab_size=V)).double()


def recipe_parts(k1: int, k2: int | None) -> RecurrentTraining:
    """The recipe's training parts over one document of B * N tokens (so no reset after the first step)."""
    document = torch.randint(0, V, (B * N,), generator=torch.Generator().manual_seed(1))
    return RecurrentTraining([document], torch.arange(V), bptt_len=k1, batches_per_epoch=-(-(N - 1) // k1), bptt_k2=k2)


def windows_of(parts: RecurrentTraining) -> list:
    return list(parts.train_batches(1, torch.Generator(), B))


def parameters(model):
    return [p for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k2", [None, 4])
def test_k2_equal_to_bptt_len_gives_the_former_loop_loss_and_gradients_exactly(arch, k2):
    parts = recipe_parts(4, k2)
    strategy = parts.strategy()
    model = tiny_model(arch)
    former = copy.deepcopy(model)
    state = None
    for window in windows_of(parts):
        got = strategy.loss(model, window, parts.loss)
        got_grads = torch.autograd.grad(got.loss, parameters(model))
        logits, state = former(window.inputs, state)  # the former loop: run the window, detach, go on
        want = F.cross_entropy(logits.flatten(0, 1), window.targets.flatten())
        want_grads = torch.autograd.grad(want, parameters(former))
        state = detach_state(state)
        assert torch.equal(got.loss, want)
        assert all(torch.equal(g, w) for g, w in zip(got_grads, want_grads, strict=True))
        with torch.no_grad():  # one SGD step on both, so later windows start from trained weights
            for p, q, g in zip(parameters(model), parameters(former), got_grads, strict=True):
                p -= 0.5 * g
                q -= 0.5 * g


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("k1", "k2"), [(3, 7), (2, 5), (4, 23)])
def test_k2_above_k1_gives_the_gradient_of_the_last_k2_steps_from_a_detached_state(arch, k1, k2):
    parts = recipe_parts(k1, k2)
    strategy = parts.strategy()
    model = tiny_model(arch)
    windows = windows_of(parts)
    inputs = torch.cat([w.inputs for w in windows], dim=1)  # (B, N - 1), the whole stream
    for window in windows:
        got = strategy.loss(model, window, parts.loss)
        got_grads = torch.autograd.grad(got.loss, parameters(model))
        end = window.start + window.inputs.shape[1]
        # The earliest step the window's loss may reach: end - k2, and the same k2 - k1 steps of context before
        # the shorter last window.
        first = max(0, window.start - (k2 - k1))
        with torch.no_grad():
            state = model(inputs[:, :first]).state if first > 0 else None  # one long forward up to there
        logits, _ = model(inputs[:, first:end], state)
        outputs = logits[:, window.start - first :]  # the window's k1 outputs only
        want = F.cross_entropy(outputs.flatten(0, 1), window.targets.flatten())
        want_grads = torch.autograd.grad(want, parameters(model))
        torch.testing.assert_close(got.loss, want)
        torch.testing.assert_close(got_grads, want_grads)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("k1", "k2"), [(5, 5), (3, 8)])
def test_the_state_carried_across_windows_is_that_of_one_long_forward(arch, k1, k2):
    parts = recipe_parts(k1, k2)
    strategy = parts.strategy()
    model = tiny_model(arch)
    windows = windows_of(parts)
    for window in windows:
        strategy.loss(model, window, parts.loss)
    with torch.no_grad():
        want = model(torch.cat([w.inputs for w in windows], dim=1)).state
    torch.testing.assert_close(strategy.state, want)
    assert (strategy.k1, strategy.k2) == (k1, k2)


def test_bptt_k2_defaults_to_bptt_len_and_is_saved_with_the_config():
    config = apply_overrides(lm.Config(), parse_assignments(["model.arch=gru", "data.bptt_k2=70"]))
    assert (config.data.bptt_len, config.data.bptt_k2, lm.Config().data.bptt_k2) == (35, 70, None)
    assert recipe_parts(6, None).strategy().k2 == 6


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["model.arch=lstm", "data.bptt_k2=20"],
            "--set: [data] bptt_k2 (20) must be >= bptt_len (35): k2 of truncated BPTT counts the window's own k1 "
            "steps",
        ),
        (
            ["model.arch=lstm", "data.bptt_k2=0"],
            "--set: [data] bptt_k2 (0) must be None or an integer >= 1 and <= 65536",
        ),
        (
            ["model.arch=rnn", "data.bptt_k2=-3"],
            "--set: [data] bptt_k2 (-3) must be None or an integer >= 1 and <= 65536",
        ),
        (["model.arch=lstm", "data.bptt_len=0"], "--set: [data] bptt_len (0) must be an integer >= 1"),
        (["model.arch=lstm", "data.bptt_len=-5"], "--set: [data] bptt_len (-5) must be an integer >= 1"),
        (
            ["data.bptt_k2=70"],
            "data.bptt_k2: does not apply to model.arch=gpt, trained on random blocks (a key of truncated BPTT: "
            "model.arch=lstm | gru | gru_textbook | rnn | tcn)",
        ),
    ],
)
def test_bad_k1_or_k2_is_refused_in_one_line_with_exit_2(settings, message, tmp_path):
    with pytest.raises(ConfigError) as error:
        apply_overrides(lm.Config(), parse_assignments(settings))
    assert str(error.value) == message
    assert_error(run_cli("train", "lm", "--out", tmp_path / "run", "--set", *settings), message)
    assert not (tmp_path / "run").exists()
