"""The recipe protocol, the registry and the train skeleton's section check (``seqlab.recipes.base``)."""

import dataclasses
import inspect
import re
import types

import pytest

from seqlab.config import check_sections
from seqlab.errors import ConfigError
from seqlab.recipes import (
    RECIPES,
    bert_mlm,
    chirps,
    classify,
    fields,
    forecast,
    g2p,
    get_recipe,
    kuramoto_sivashinsky,
    lm,
    protein,
    register_recipe,
    smiles,
    t5_g2p,
    tagger,
    translate,
    vec2seq,
    vowels,
)
from seqlab.recipes.base import RECIPE_MEMBERS, Recipe, run_training
from seqlab.recipes.system import SystemOptions
from seqlab.training.train_config import TrainConfig


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_system_declares_only_options_that_exist(name):
    """The CLI refuses options a System does not list in OPTIONS; every name listed must be a SystemOptions field."""
    system = RECIPES[name].System
    assert system.OPTIONS.issubset(f.name for f in dataclasses.fields(SystemOptions))
    assert "options" in inspect.signature(system.load).parameters


def test_recipe_members_name_the_whole_protocol():
    methods = [name for name, value in vars(Recipe).items() if callable(value) and not name.startswith("_")]
    assert set(RECIPE_MEMBERS) == {*Recipe.__annotations__, *methods}


def test_the_registry_holds_the_shipped_recipes_by_name():
    shipped = {
        "bert-mlm": bert_mlm,
        "chirps": chirps,
        "classify": classify,
        "fields": fields,
        "forecast": forecast,
        "g2p": g2p,
        "kuramoto-sivashinsky": kuramoto_sivashinsky,
        "lm": lm,
        "protein": protein,
        "smiles": smiles,
        "t5-g2p": t5_g2p,
        "tagger": tagger,
        "translate": translate,
        "vec2seq": vec2seq,
        "vowels": vowels,
    }
    assert shipped == RECIPES
    assert get_recipe("vowels") is vowels
    available = (
        "bert-mlm, chirps, classify, fields, forecast, g2p, kuramoto-sivashinsky, lm, protein, smiles, t5-g2p, "
        "tagger, translate, vec2seq, vowels"
    )
    with pytest.raises(ConfigError, match=rf"^unknown recipe 'gpt'; available: {available}$"):
        get_recipe("gpt")


def test_register_refuses_a_taken_name_and_an_incomplete_recipe():
    with pytest.raises(TypeError, match=r"^recipe name 'g2p' is taken by "):
        register_recipe(g2p)
    partial = types.SimpleNamespace(NAME="half", DESCRIPTION="", Config=object, train=print)
    with pytest.raises(TypeError, match=r"is not a recipe: it lacks System, prepare$"):
        register_recipe(partial)
    assert "half" not in RECIPES


@pytest.mark.parametrize(
    ("recipe", "config", "message"),
    [
        (
            translate,
            translate.Config(train=TrainConfig()),
            "[train] must be a seqlab.training.train_config.Seq2SeqTrainConfig, "
            "not a seqlab.training.train_config.TrainConfig",
        ),
        (
            g2p,
            g2p.Config(model=translate.TransformerModelConfig()),
            "[model] must be a seqlab.recipes.g2p.config.RNNConfig or seqlab.recipes.g2p.config.TransformerConfig, "
            "not a seqlab.recipes.translate.config.TransformerModelConfig",
        ),
        (
            g2p,
            t5_g2p.Config(),
            "the config must be a seqlab.recipes.g2p.config.Config, not a seqlab.recipes.t5_g2p.config.Config",
        ),
    ],
)
def test_a_config_built_in_python_with_a_wrong_section_class_is_one_line_before_anything_is_written(
    tmp_path, recipe, config, message
):
    """Only Python can build these (files and --set are converted to the annotated classes); without the check the
    recipe reads a key the section lacks part-way through training, an AttributeError traceback."""
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        run_training(recipe, config, tmp_path / "run", log=lambda line: None)
    assert not (tmp_path / "run").exists()


def test_every_recipe_default_config_passes_the_section_check():
    for name in sorted(RECIPES):
        recipe = get_recipe(name)
        check_sections(recipe.Config(), recipe.Config)


@pytest.mark.parametrize(
    ("section", "changes", "message"),
    [
        (g2p.RNNConfig, {"arch": "transformer"}, "arch ('transformer') must be one of 'rnn'"),
        (g2p.TransformerConfig, {"arch": "lstm"}, "arch ('lstm') must be one of 'transformer'"),
        (g2p.TransformerConfig, {"d_model": 10, "num_heads": 4}, "d_model (10) must be divisible by num_heads (4)"),
        (g2p.TransformerConfig, {"d_model": 6, "num_heads": 2}, "rotary positions need an even head_dim, got 3"),
        (
            g2p.TransformerConfig,
            {"attention_kind": "local"},
            "window (None) must be set exactly when attention_kind is 'local'",
        ),
        (g2p.TransformerConfig, {"window": 0, "attention_kind": "local"}, "window (0) must be None or an integer >= 1"),
        (g2p.RNNConfig, {"cell": "tcn"}, "cell ('tcn') must be one of 'rnn', 'gru', 'gru_textbook', 'lstm'"),
        (g2p.RNNConfig, {"encoder_layers": 0}, "encoder_layers (0) must be an integer >= 1 and <= 1024"),
    ],
)
def test_the_g2p_model_sections_check_their_own_fields(section, changes, message):
    """Checked on the section itself (no dummy model config), each arch's class its own fields."""
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        section(**changes)


def test_the_g2p_model_sections_build_their_own_model_config():
    rnn = g2p.RNNConfig(hidden_size=8, encoder_layers=3).model_config(src_vocab_size=5, tgt_vocab_size=7)
    assert (rnn.hidden_size, rnn.encoder_layers, rnn.src_vocab_size, rnn.tgt_vocab_size) == (8, 3, 5, 7)
    transformer = g2p.TransformerConfig(d_model=8, num_heads=2, dropout=0.2).model_config(
        src_vocab_size=5, tgt_vocab_size=7
    )
    assert (transformer.d_model, transformer.num_heads, transformer.dropout) == (8, 2, 0.2)
    assert not hasattr(transformer, "hidden_size") and not hasattr(rnn, "d_model")
