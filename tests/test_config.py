"""Typed configuration: TOML files, ``section.key=value`` overrides, type conversion and validation messages."""

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import pytest

from seqlab.config import apply_overrides, describe, flatten, load_toml, parse_assignments
from seqlab.errors import ConfigError
from seqlab.recipes import chirps, g2p

Mode = Literal["fast", "slow"]


@dataclass(frozen=True)
class Net:
    size: int = 4
    rate: float = 0.5
    name: str = "net"
    path: str | None = None
    steps: int | None = 10
    budget: float | None = None
    shuffle: bool = False
    mode: Mode = "fast"
    maybe_mode: Mode | None = None

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size ({self.size}) must be >= 1")


@dataclass(frozen=True)
class Window:
    low: int = 0
    high: int = 1

    def __post_init__(self) -> None:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be less than high ({self.high})")


@dataclass(frozen=True)
class Setup:
    net: Net = field(default_factory=Net)
    window: Window = field(default_factory=Window)


NET_KEYS = "size, rate, name, path, steps, budget, shuffle, mode, maybe_mode"


# --- apply_overrides: conversion -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("size", "7", 7),
        ("size", " 12", 12),
        ("rate", "0.25", 0.25),
        ("rate", "1e-3", 1e-3),
        ("rate", "3", 3.0),
        ("name", "conv", "conv"),
        ("name", "42", "42"),
        ("path", "words.dict", "words.dict"),
        ("path", "none", None),
        ("path", "None", None),
        ("path", "null", None),
        ("steps", "5", 5),
        ("steps", "NONE", None),
        ("budget", "2.5", 2.5),
        ("budget", "none", None),
        ("mode", "slow", "slow"),
        ("maybe_mode", "slow", "slow"),
        ("maybe_mode", "none", None),
    ],
)
def test_strings_convert_to_the_declared_type(key, raw, expected):
    net = apply_overrides(Setup(), {f"net.{key}": raw}).net
    value = getattr(net, key)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("raw", ["true", "True", "TRUE", "1", "yes", "on"])
def test_true_spellings(raw):
    assert apply_overrides(Setup(), {"net.shuffle": raw}).net.shuffle is True


@pytest.mark.parametrize("raw", ["false", "False", "0", "no", "off", "OFF"])
def test_false_spellings(raw):
    config = apply_overrides(Setup(net=Net(shuffle=True)), {"net.shuffle": raw})
    assert config.net.shuffle is False


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("size", 7, 7),
        ("size", 3.0, 3),
        ("rate", 2, 2.0),
        ("rate", 0.125, 0.125),
        ("shuffle", True, True),
        ("name", "conv", "conv"),
        ("steps", None, None),
        ("mode", "slow", "slow"),
    ],
)
def test_toml_values_convert_to_the_declared_type(key, raw, expected):
    value = getattr(apply_overrides(Setup(), {f"net.{key}": raw}, source="cfg.toml").net, key)
    assert value == expected
    assert type(value) is type(expected)


def test_overrides_return_a_new_config_and_keep_everything_else():
    original = Setup()
    changed = apply_overrides(original, {"net.size": "9", "net.mode": "slow"})
    assert original == Setup()  # frozen input untouched
    assert changed == Setup(net=Net(size=9, mode="slow"))
    assert changed.window is original.window


def test_no_overrides_is_the_same_config():
    assert apply_overrides(Setup(), {}) == Setup()


def test_keys_of_one_section_are_validated_together():
    # Each of low=5 or high=10 alone would fail Window's check against the other's default.
    config = apply_overrides(Setup(), {"window.high": "10", "window.low": "5"})
    assert config.window == Window(low=5, high=10)


def test_real_recipe_config_accepts_the_documented_overrides():
    overrides = {
        "data.train_path": "train.dict",
        "train.max_steps": "100",
        "train.time_budget": "30",
        "model.hidden_size": "64",
        "model.cell": "gru",
        "data.keep_stress": "true",
        "train.patience": "none",
    }
    config = apply_overrides(g2p.Config(), overrides)
    defaults = g2p.Config()
    assert config.data == dataclasses.replace(defaults.data, train_path="train.dict", keep_stress=True)
    assert config.model == dataclasses.replace(defaults.model, hidden_size=64, cell="gru")
    assert config.train == dataclasses.replace(defaults.train, max_steps=100, time_budget=30.0, patience=None)
    assert config.decode == defaults.decode


# --- apply_overrides: errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"optim.lr": "1"}, "--set optim.lr: unknown key; sections are net, window"),
        ({"size": "1"}, "--set size: unknown key; sections are net, window"),
        ({"net.": "1"}, "--set net.: unknown key; sections are net, window"),
        ({"net.width": "1"}, f"--set net.width: unknown key in [net]; valid keys are {NET_KEYS}"),
        ({"net.size.x": "1"}, f"--set net.size.x: unknown key in [net]; valid keys are {NET_KEYS}"),
        ({"net.size": "abc"}, "--set net.size: expected int, got 'abc'"),
        ({"net.size": "2.5"}, "--set net.size: expected int, got '2.5'"),
        ({"net.size": ""}, "--set net.size: expected int, got ''"),
        ({"net.size": 2.5}, "--set net.size: expected int, got 2.5"),
        ({"net.size": True}, "--set net.size: expected int, got True"),
        ({"net.size": float("inf")}, "--set net.size: expected int, got inf"),
        ({"net.name": ["a.txt"]}, "--set net.name: expected a string, got ['a.txt']"),
        ({"net.name": 5}, "--set net.name: expected a string, got 5"),
        ({"net.rate": "fast"}, "--set net.rate: expected float, got 'fast'"),
        ({"net.rate": False}, "--set net.rate: expected float, got False"),
        ({"net.steps": "many"}, "--set net.steps: expected int, got 'many'"),
        ({"net.shuffle": "maybe"}, "--set net.shuffle: expected true or false, got 'maybe'"),
        ({"net.shuffle": 2}, "--set net.shuffle: expected true or false, got 2"),
        ({"net.size": "none"}, "--set net.size: a value is required (this key cannot be none)"),
        ({"net.name": None}, "--set net.name: a value is required (this key cannot be none)"),
        ({"net.mode": "medium"}, "--set net.mode: 'medium' is not one of fast, slow"),
        ({"net.maybe_mode": "Fast"}, "--set net.maybe_mode: 'Fast' is not one of fast, slow"),
        ({"net.size": "0"}, "--set: [net] size (0) must be >= 1"),
        ({"window.low": "3"}, "--set: [window] low (3) must be less than high (1)"),
    ],
)
def test_bad_overrides_raise_config_error_naming_key_and_value(overrides, message):
    with pytest.raises(ConfigError) as caught:
        apply_overrides(Setup(), overrides)
    assert str(caught.value) == message


def test_messages_name_the_source():
    with pytest.raises(ConfigError) as caught:
        apply_overrides(Setup(), {"net.size": "x"}, source="my.toml")
    assert str(caught.value) == "my.toml net.size: expected int, got 'x'"
    with pytest.raises(ConfigError) as caught:
        apply_overrides(Setup(), {"net.size": -1}, source="my.toml")
    assert str(caught.value) == "my.toml: [net] size (-1) must be >= 1"


def test_validation_errors_of_the_training_section_surface_as_config_error():
    # TrainConfig raises ConfigError itself; it is reported like a ValueError from any other section.
    with pytest.raises(ConfigError) as caught:
        apply_overrides(g2p.Config(), {"train.batch_size": "0"})
    assert str(caught.value) == "--set: [train] batch_size (0) must be an integer >= 1 and <= 1048576"
    with pytest.raises(ConfigError) as caught:
        apply_overrides(g2p.Config(), {"train.time_budget": "-5"})
    assert str(caught.value) == "--set: [train] time_budget (-5.0) must be None or a finite number > 0"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("train.lr", "1e30", "lr (1e+30) must be a finite number > 0 and <= 10.0"),
        ("train.max_steps", 10**30, "max_steps (10**30) must be None or an integer >= 1 and <= 1000000000"),
        ("train.max_epochs", 10**30, "max_epochs (10**30) must be an integer >= 1 and <= 1000000000"),
        ("train.warmup_steps", 10**30, "warmup_steps (10**30) must be an integer >= 0 and <= 1000000000"),
    ],
)
def test_training_settings_past_a_sane_bound_are_refused_naming_the_key(key, value, message):
    with pytest.raises(ConfigError) as caught:
        apply_overrides(g2p.Config(), {key: value}, source="run.toml")
    assert str(caught.value) == "run.toml: [train] " + message.replace("10**30", str(10**30))


def test_config_error_is_a_value_error():
    # Library callers may catch ValueError; the CLI catches SeqlabError.
    with pytest.raises(ValueError, match=r"^--set net\.size: expected int, got 'x'$"):
        apply_overrides(Setup(), {"net.size": "x"})


# --- parse_assignments ----------------------------------------------------------------------------------


def test_parse_assignments_splits_at_the_first_equals_sign_and_strips():
    parsed = parse_assignments(["net.size=3", " net.name = a b ", "net.path=x=y", "net.steps="])
    assert parsed == {"net.size": "3", "net.name": "a b", "net.path": "x=y", "net.steps": ""}


def test_parse_assignments_refuses_a_key_given_twice():
    with pytest.raises(ConfigError, match=r"^--set net.size: given twice \('3' and '4'\); give it once$"):
        parse_assignments(["net.size=3", "net.name=a", " net.size = 4"])


@pytest.mark.parametrize("path", ["fifo", "/dev/zero", "/proc/self/mem"])
def test_load_toml_refuses_non_regular_and_unreadable_files_in_one_line(tmp_path, path):
    if path == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)  # opening it would block forever
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: (is not a regular file|cannot read)"):
        load_toml(path)


def test_parse_assignments_of_nothing_is_empty():
    assert parse_assignments([]) == {}


@pytest.mark.parametrize("item", ["net.size", "=3", "  =3", ""])
def test_parse_assignments_rejects_items_without_a_key(item):
    with pytest.raises(ConfigError) as caught:
        parse_assignments(["net.size=1", item])
    assert str(caught.value) == f"--set {item!r}: expected section.key=value"


# --- flatten and describe -------------------------------------------------------------------------------


def test_flatten_turns_tables_into_dotted_keys():
    nested = {"net": {"size": 3, "path": "a.dict", "tags": [1, 2]}, "window": {"low": 0}, "top": True}
    assert flatten(nested) == {"net.size": 3, "net.path": "a.dict", "net.tags": [1, 2], "window.low": 0, "top": True}


def test_flatten_goes_any_depth_and_drops_empty_tables():
    assert flatten({"a": {"b": {"c": 1}, "d": {}}}) == {"a.b.c": 1}
    assert flatten({}) == {}


def test_describe_lists_every_key_in_declaration_order():
    rows = describe(Setup(window=Window(high=9)))
    assert [(key, value) for key, value, _ in rows] == [
        ("net.size", 4),
        ("net.rate", 0.5),
        ("net.name", "net"),
        ("net.path", None),
        ("net.steps", 10),
        ("net.budget", None),
        ("net.shuffle", False),
        ("net.mode", "fast"),
        ("net.maybe_mode", None),
        ("window.low", 0),
        ("window.high", 9),
    ]
    assert {applies for _, _, applies in rows} == {""}


# --- load_toml ------------------------------------------------------------------------------------------


def test_load_toml_reads_tables_and_round_trips_through_apply_overrides(tmp_path):
    path = tmp_path / "setup.toml"
    path.write_text('[net]\nsize = 8\nrate = 1\nmode = "slow"\nshuffle = true\n\n[window]\nlow = 2\nhigh = 5\n')
    loaded = load_toml(path)
    assert loaded == {"net": {"size": 8, "rate": 1, "mode": "slow", "shuffle": True}, "window": {"low": 2, "high": 5}}
    config = apply_overrides(Setup(), flatten(loaded), source=str(path))
    assert config == Setup(net=Net(size=8, rate=1.0, mode="slow", shuffle=True), window=Window(low=2, high=5))


def test_load_toml_accepts_a_string_path(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text("[net]\nsize = 2\n")
    assert load_toml(str(path)) == {"net": {"size": 2}}


def test_load_toml_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        load_toml(path)
    assert str(caught.value) == f"{path}: no such config file"


def test_load_toml_directory(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_toml(tmp_path)
    assert str(caught.value) == f"{tmp_path}: is a directory, not a config file"


@pytest.mark.parametrize(
    "content",
    [b"[net\nsize = 1\n", b"size = = 1\n", b"[net]\nsize = 1\nsize = 2\n", b"\xff\xfe[\x00n\x00", b"\x00\x01\x02"],
)
def test_load_toml_invalid_content_is_one_line_naming_the_file(tmp_path, content):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_toml(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not valid TOML (")
    assert message.endswith(")")
    assert "\n" not in message


# --- choice sections: model.arch selects its own config class ------------------------------------------------------


@dataclass(frozen=True)
class Recurrent:
    arch: Literal["rnn"] = "rnn"
    hidden_size: int = 8
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.arch != "rnn":
            raise ValueError(f"arch ({self.arch!r}) must be 'rnn'")


@dataclass(frozen=True)
class Attention:
    arch: Literal["transformer"] = "transformer"
    num_heads: int = 2
    dropout: float = 0.0


@dataclass(frozen=True)
class Choice:
    model: Recurrent | Attention = field(default_factory=Recurrent)
    window: Window = field(default_factory=Window)


def test_arch_selects_its_class_with_its_own_defaults():
    config = apply_overrides(Choice(), {"model.arch": "transformer", "model.num_heads": "4"})
    assert config.model == Attention(num_heads=4)
    assert apply_overrides(Choice(model=Attention()), {"model.arch": "rnn"}).model == Recurrent()


def test_a_key_of_another_arch_is_refused_naming_both():
    with pytest.raises(ConfigError) as caught:
        apply_overrides(Choice(), {"model.num_heads": "8"})
    assert (
        str(caught.value) == "--set model.num_heads: does not apply to model.arch=rnn (a key of model.arch=transformer)"
    )
    with pytest.raises(ConfigError) as caught:
        apply_overrides(Choice(), {"model.arch": "transformer", "model.hidden_size": "8"}, source="a.toml")
    assert (
        str(caught.value)
        == "a.toml model.hidden_size: does not apply to model.arch=transformer (a key of model.arch=rnn)"
    )


def test_an_unknown_arch_and_an_unknown_key_are_refused():
    with pytest.raises(ConfigError, match=r"^--set model.arch: 'mamba' is not one of rnn, transformer$"):
        apply_overrides(Choice(), {"model.arch": "mamba"})
    with pytest.raises(ConfigError, match=r"unknown key in \[model\]; valid keys are arch, hidden_size, dropout$"):
        apply_overrides(Choice(), {"model.heads": "8"})


def test_switching_arch_keeps_shared_values_and_refuses_values_it_would_drop():
    # A TOML file set the dropout, then --set switches the arch: the shared field keeps the file's value.
    from_file = apply_overrides(Choice(), {"model.dropout": 0.3}, source="a.toml")
    assert apply_overrides(from_file, {"model.arch": "transformer"}).model == Attention(dropout=0.3)
    sized = apply_overrides(Choice(), {"model.hidden_size": 16}, source="a.toml")
    with pytest.raises(ConfigError) as caught:
        apply_overrides(sized, {"model.arch": "transformer"})
    assert str(caught.value) == "--set model.arch=transformer: model.hidden_size (set to 16) does not apply to it"


@dataclass(frozen=True)
class Wide:
    arch: Literal["wide"] = "wide"
    SECTION_DEFAULTS: ClassVar = {"window": {"low": 2, "high": 5}}


@dataclass(frozen=True)
class Chosen:
    model: Recurrent | Wide = field(default_factory=Recurrent)
    window: Window = field(default_factory=Window)


def test_an_arch_sets_its_defaults_of_other_sections_unless_given_and_its_leaving_restores_the_recipes():
    wide = apply_overrides(Chosen(), {"model.arch": "wide"})
    assert wide.window == Window(low=2, high=5)
    assert apply_overrides(wide, {"model.arch": "rnn"}) == Chosen()
    assert apply_overrides(Chosen(), {"window.high": "3", "model.arch": "wide"}).window == Window(low=2, high=3)
    earlier = apply_overrides(Chosen(), {"window.high": 3}, source="a.toml")
    assert apply_overrides(earlier, {"model.arch": "wide"}).window == Window(low=2, high=3)
    assert apply_overrides(wide, {"window.high": 7}).window == Window(low=2, high=7)
    earlier = apply_overrides(Chosen(), {"window.high": 2}, source="a.toml")  # low 2 would be refused beside it
    assert apply_overrides(earlier, {"model.arch": "wide"}).window == Window(low=0, high=2)


def test_describe_gives_a_row_per_value_of_a_key_whose_default_depends_on_the_arch():
    rows = describe(Chosen())  # Wide sets window.low 2 and window.high 5; Recurrent keeps Window's 0 and 1
    assert rows[-4:] == [
        ("window.low", 0, "model.arch=rnn"),
        ("window.low", 2, "model.arch=wide"),
        ("window.high", 1, "model.arch=rnn"),
        ("window.high", 5, "model.arch=wide"),
    ]
    rows = describe(apply_overrides(Chosen(), {"model.arch": "wide"}))  # the chosen arch's value first
    assert rows[-4:] == [
        ("window.low", 2, "model.arch=wide"),
        ("window.low", 0, "model.arch=rnn"),
        ("window.high", 5, "model.arch=wide"),
        ("window.high", 1, "model.arch=rnn"),
    ]


def test_describe_lists_the_other_archs_keys_with_their_arch():
    rows = describe(Choice())  # dropout, a key of both, defaults to 0.1 in Recurrent and 0.0 in Attention
    assert rows[:2] == [("model.arch", "rnn", ""), ("model.hidden_size", 8, "arch=rnn")]
    assert rows[2:4] == [("model.dropout", 0.1, "arch=rnn"), ("model.dropout", 0.0, "arch=transformer")]
    assert rows[4:] == [("model.num_heads", 2, "arch=transformer"), ("window.low", 0, ""), ("window.high", 1, "")]


@dataclass(frozen=True)
class Decode:
    num_beams: int = 5


@dataclass(frozen=True)
class Decoding:
    decode: Decode = field(default_factory=Decode)


def test_an_old_key_name_sets_the_new_one_with_a_warning():
    with pytest.warns(FutureWarning, match=r"^--set decode.beam_size is renamed num_beams; the old name goes"):
        assert apply_overrides(Decoding(), {"decode.beam_size": "2"}).decode == Decode(num_beams=2)


@dataclass(frozen=True)
class Scorer:
    attention: Literal["additive", "none"] = "additive"  # "none" is a choice (g2p's fixed context), not None
    fallback: Literal["dot", "none"] | None = None


@dataclass(frozen=True)
class WithScorer:
    scorer: Scorer = field(default_factory=Scorer)


@pytest.mark.parametrize("key", ["attention", "fallback"])
def test_a_choice_spelled_none_is_that_choice_not_none(key):
    assert getattr(apply_overrides(WithScorer(), {f"scorer.{key}": "none"}).scorer, key) == "none"


def test_the_g2p_fixed_context_model_is_reachable_from_the_command_line():
    from seqlab.recipes.g2p import Config

    assert apply_overrides(Config(), {"model.attention": "none"}).model.attention == "none"


def test_a_tuple_key_takes_comma_separated_values_or_a_toml_list():
    config = apply_overrides(g2p.Config(), {"train.betas": "0.8, 0.95"})
    assert config.train.betas == (0.8, 0.95)
    assert apply_overrides(g2p.Config(), {"train.betas": [0.7, 0.9]}, source="my.toml").train.betas == (0.7, 0.9)
    with pytest.raises(ConfigError) as caught:
        apply_overrides(g2p.Config(), {"train.betas": "0.9"})
    assert str(caught.value) == "--set train.betas: expected 2 comma-separated values, got '0.9'"
    with pytest.raises(ConfigError) as caught:
        apply_overrides(g2p.Config(), {"train.betas": "0.9,x"})
    assert str(caught.value) == "--set train.betas: expected float, got 'x'"
    with pytest.raises(ConfigError) as caught:
        apply_overrides(g2p.Config(), {"train.betas": "0.9,1"})
    assert str(caught.value) == (
        "--set: [train] betas ((0.9, 1.0)) must be two numbers in [0, 1) (beta_1, beta_2), e.g. 0.9,0.999"
    )


def test_a_variadic_tuple_key_takes_any_number_of_comma_separated_values_or_a_toml_list():
    config = apply_overrides(chirps.Config(), {"eval.snrs": "5, 10,40"})
    assert config.eval.snrs == (5.0, 10.0, 40.0)
    assert apply_overrides(chirps.Config(), {"eval.snrs": [7]}, source="my.toml").eval.snrs == (7.0,)
    with pytest.raises(ConfigError) as caught:
        apply_overrides(chirps.Config(), {"eval.snrs": []}, source="my.toml")
    assert str(caught.value) == "my.toml eval.snrs: expected comma-separated values, got []"
    assert chirps.EvalConfig(snrs="5 20").snrs == (5.0, 20.0)  # a run saved when snrs was one string
