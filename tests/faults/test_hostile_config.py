"""Every float field of every recipe's config, of every architecture of a choice section, refuses NaN and infinities,
from --set and from a TOML file."""

import dataclasses
import typing

import pytest

from seqlab.config import apply_overrides, architectures
from seqlab.errors import ConfigError
from seqlab.recipes import RECIPES


def float_fields(*, tuples: bool = False):
    """(recipe, {"section.arch": arch} or {}, "section.key") for every float field of every section class (with
    ``tuples``, every field holding a tuple of floats instead)."""
    for name, recipe in sorted(RECIPES.items()):
        config = recipe.Config()
        section_hints = typing.get_type_hints(type(config))
        for section in dataclasses.fields(config):
            choices = architectures(section_hints[section.name]) or {"": type(getattr(config, section.name))}
            for arch, cls in choices.items():
                hints = typing.get_type_hints(cls)
                for f in dataclasses.fields(cls):
                    is_tuple = typing.get_origin(hints[f.name]) is tuple
                    if is_tuple == tuples and float in (typing.get_args(hints[f.name]) or (hints[f.name],)):
                        chosen = {f"{section.name}.arch": arch} if arch else {}
                        yield name, chosen, f"{section.name}.{f.name}"


FLOAT_FIELDS = list(float_fields())
FLOAT_TUPLE_FIELDS = list(float_fields(tuples=True))


def test_the_recipes_have_float_fields():
    keys = {key for name, _, key in FLOAT_FIELDS if name == "g2p"}
    assert {"train.lr", "train.teacher_forcing", "decode.length_penalty", "model.label_smoothing"} <= keys
    assert {"lstm", "gpt"} <= {arch.get("model.arch") for name, arch, _ in FLOAT_FIELDS if name == "lm"}


@pytest.mark.parametrize(("recipe", "arch", "key"), FLOAT_FIELDS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), float("inf")])
def test_non_finite_values_are_refused(recipe, arch, key, value):
    with pytest.raises(ConfigError, match=r"\((nan|inf|-inf)\)"):
        apply_overrides(RECIPES[recipe].Config(), {**arch, key: value})


def test_the_recipes_have_float_tuple_fields():
    assert ("lm", {}, "train.betas") in FLOAT_TUPLE_FIELDS


@pytest.mark.parametrize(("recipe", "arch", "key"), FLOAT_TUPLE_FIELDS)
@pytest.mark.parametrize("value", ["nan,0.5", "0.5,inf", [0.5, float("-inf")], (float("nan"), 0.5)])
def test_non_finite_values_in_a_tuple_are_refused(recipe, arch, key, value):
    with pytest.raises(ConfigError, match=r"\(\((nan|inf|-inf), |, (nan|inf|-inf)\)\)"):
        apply_overrides(RECIPES[recipe].Config(), {**arch, key: value})
