"""``model.arch=transformer`` picks the Transformer's own training defaults (issue 25.1): dropout 0, Adam at lr 1e-3
with beta_2 0.98, where the RNN keeps dropout 0.1, lr 2e-3 and beta_2 0.999; ``Config(model=TransformerConfig())``
built in Python gets the same. Values the user gives win, in the same overrides or earlier ones, or as a train
section given in Python; saved runs load with what they saved (and a run saved before the Transformer had its own
dropout default, with the shared 0.1 it trained with)."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from seqlab.config import apply_overrides
from seqlab.errors import ConfigError
from seqlab.recipes import g2p
from seqlab.recipes.g2p.config import DEFAULT_TRAIN
from seqlab.recipes.saved_run import load_recipe_config, save_recipe_file

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
TRANSFORMER_TRAIN = dataclasses.replace(g2p.Config().train, lr=1e-3, betas=(0.9, 0.98))


def test_choosing_the_transformer_sets_its_training_defaults_and_choosing_the_rnn_restores_the_recipes():
    transformer = apply_overrides(g2p.Config(), {"model.arch": "transformer"})
    assert transformer.train == TRANSFORMER_TRAIN
    assert transformer.model == g2p.TransformerConfig()
    assert transformer.model.dropout == 0.0 and g2p.RNNConfig().dropout == 0.1
    assert apply_overrides(transformer, {"model.arch": "rnn"}) == g2p.Config()


@pytest.mark.parametrize("order", ["arch first", "arch last"])
def test_a_training_value_given_with_the_arch_wins_over_the_archs_default(order):
    given = {"train.lr": "3e-3", "train.batch_size": "32"}
    overrides = (
        {"model.arch": "transformer", **given} if order == "arch first" else {**given, "model.arch": "transformer"}
    )
    config = apply_overrides(g2p.Config(), overrides)
    assert config.train == dataclasses.replace(TRANSFORMER_TRAIN, lr=3e-3, batch_size=32)


def test_a_training_value_given_earlier_wins_and_one_left_at_the_rnns_default_follows_the_arch():
    from_file = apply_overrides(g2p.Config(), {"train.lr": 3e-3, "model.dropout": 0.2}, source="a.toml")
    config = apply_overrides(from_file, {"model.arch": "transformer"})
    assert (config.train.lr, config.train.betas, config.model.dropout) == (3e-3, (0.9, 0.98), 0.2)


def test_the_transformers_training_defaults_survive_a_save_and_load(tmp_path):
    config = apply_overrides(g2p.Config(), {"model.arch": "transformer", "model.d_model": "64"})
    save_recipe_file(tmp_path, "g2p", config)
    assert load_recipe_config(tmp_path, g2p.Config) == config


def test_an_old_transformer_run_loads_with_the_settings_it_trained_with(tmp_path):
    old = load_recipe_config(FIXTURES / "g2p_transformer_v0_1", g2p.Config)
    assert (old.train.lr, old.train.betas, old.model.dropout) == (0.01, (0.9, 0.999), 0.0)
    # A run saved without its dropout trained with the shared default, 0.1; it loads with that, not today's 0.
    shutil.copytree(FIXTURES / "g2p_transformer_v0_1", tmp_path / "run")
    recipe = tmp_path / "run" / "recipe.json"
    saved = json.loads(recipe.read_text())
    del saved["config"]["model"]["dropout"]
    recipe.write_text(json.dumps(saved))
    assert load_recipe_config(tmp_path / "run", g2p.Config).model.dropout == 0.1


def test_an_arch_default_the_section_refuses_beside_the_keys_given_is_left_at_the_recipes():
    # Adam's betas mean nothing to SGD: the Transformer's (0.9, 0.98) would be refused, so betas stay unset.
    for overrides in ({"train.optimizer": "sgd", "model.arch": "transformer"}, {"model.arch": "transformer"}):
        config = apply_overrides(g2p.Config(), {**overrides, "train.optimizer": "sgd"})
        assert (config.train.optimizer, config.train.lr, config.train.betas) == ("sgd", 1e-3, (0.9, 0.999))
    earlier = apply_overrides(g2p.Config(), {"train.optimizer": "sgd"}, source="a.toml")
    assert apply_overrides(earlier, {"model.arch": "transformer"}).train.betas == (0.9, 0.999)


def test_a_bad_value_given_with_the_arch_names_itself():
    with pytest.raises(ConfigError, match=r"^--set: \[model\] dropout \(1\.5\) must be in \[0, 1\)$"):
        apply_overrides(g2p.Config(), {"model.arch": "transformer", "model.dropout": "1.5"})


@pytest.mark.parametrize("model", [{}, {"d_model": 64, "dropout": 0.1}])
def test_a_config_built_in_python_gets_the_same_training_defaults_as_the_command_line(model):
    built = g2p.Config(model=g2p.TransformerConfig(**model))
    assert built == apply_overrides(
        g2p.Config(), {"model.arch": "transformer", **{f"model.{k}": v for k, v in model.items()}}
    )
    assert built.train == TRANSFORMER_TRAIN
    assert g2p.Config(model=g2p.RNNConfig()) == g2p.Config() and g2p.Config().train is DEFAULT_TRAIN


def test_a_train_section_given_in_python_is_kept_even_at_the_rnns_values():
    rnn_values = dataclasses.replace(DEFAULT_TRAIN)  # equal to the RNN's defaults, but the caller's
    assert g2p.Config(model=g2p.TransformerConfig(), train=rnn_values).train.lr == 2e-3
    given = dataclasses.replace(DEFAULT_TRAIN, batch_size=32)
    assert g2p.Config(model=g2p.TransformerConfig(), train=given).train == given


def test_replacing_the_model_of_a_config_whose_train_section_was_not_given_switches_the_defaults_both_ways():
    transformer = dataclasses.replace(g2p.Config(), model=g2p.TransformerConfig())
    assert transformer.train == TRANSFORMER_TRAIN
    assert dataclasses.replace(transformer, model=g2p.RNNConfig()) == g2p.Config()
    assert g2p.Config(model=g2p.TransformerConfig(), train=DEFAULT_TRAIN).train == TRANSFORMER_TRAIN  # by identity
    given = dataclasses.replace(g2p.Config(), train=dataclasses.replace(DEFAULT_TRAIN, lr=3e-3))
    assert dataclasses.replace(given, model=g2p.TransformerConfig()).train.lr == 3e-3
