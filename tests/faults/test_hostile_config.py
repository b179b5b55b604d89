"""Every float field of every recipe's config refuses NaN and infinities, from --set and from a TOML file."""

import dataclasses
import typing

import pytest

from seqlab.config import apply_overrides
from seqlab.errors import ConfigError
from seqlab.recipes import RECIPES


def float_fields():
    for name, recipe in sorted(RECIPES.items()):
        config = recipe.Config()
        for section in dataclasses.fields(config):
            value = getattr(config, section.name)
            hints = typing.get_type_hints(type(value))
            for f in dataclasses.fields(value):
                if float in (typing.get_args(hints[f.name]) or (hints[f.name],)):
                    yield name, f"{section.name}.{f.name}"


FLOAT_FIELDS = list(float_fields())


def test_the_recipes_have_float_fields():
    assert {"train.lr", "decode.length_penalty"} <= {key for name, key in FLOAT_FIELDS if name == "g2p"}


@pytest.mark.parametrize(("recipe", "key"), FLOAT_FIELDS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), float("inf")])
def test_non_finite_values_are_refused(recipe, key, value):
    with pytest.raises(ConfigError, match=r"\((nan|inf|-inf)\)"):
        apply_overrides(RECIPES[recipe].Config(), {key: value})
