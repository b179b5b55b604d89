"""The shared config checks: what they accept, and the exact one-line message for what they refuse."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqlab.errors import ConfigError
from seqlab.validation import (
    check_bool,
    check_choice,
    check_int,
    check_probability,
    check_real,
    check_special_ids,
    check_token_id,
)


def test_check_int_accepts_in_range_and_optional_none():
    check_int("n", 3, minimum=1, maximum=3)
    check_int("n", None, optional=True)
    check_int("n", -5, minimum=None)


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (0, {}, "n (0) must be an integer >= 1"),
        (True, {}, "n (True) must be an integer >= 1"),
        (2.0, {}, "n (2.0) must be an integer >= 1"),
        (None, {}, "n (None) must be an integer >= 1"),
        (5, {"minimum": 0, "maximum": 4}, "n (5) must be an integer >= 0 and <= 4"),
        ("x", {"optional": True}, "n ('x') must be None or an integer >= 1"),
    ],
)
def test_check_int_messages(value, kwargs, message):
    with pytest.raises(ConfigError) as e:
        check_int("n", value, **kwargs)
    assert str(e.value) == message


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, True, "1e-3"])
def test_check_real_refuses_non_finite_and_non_numbers(bad):
    with pytest.raises(ConfigError, match=r"^lr \(.*\) must be a finite number > 0$"):
        check_real("lr", bad, greater_than=0)


def test_check_real_bounds():
    check_real("x", 0.0, at_least=0.0, below=1.0)
    check_real("x", None, optional=True)
    with pytest.raises(ConfigError, match=r"^x \(1\.0\) must be a finite number >= 0\.0 and < 1\.0$"):
        check_real("x", 1.0, at_least=0.0, below=1.0)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_check_probability_is_exactly_the_half_open_unit_interval(p):
    if 0.0 <= p < 1.0:
        check_probability("dropout", p)
    else:
        with pytest.raises(ConfigError, match=r"^dropout \(.*\) must be in \[0, 1\)$"):
            check_probability("dropout", p)


def test_bool_choice_and_token_id():
    check_bool("b", False)
    with pytest.raises(ConfigError, match=r"^b \(1\) must be true or false$"):
        check_bool("b", 1)
    with pytest.raises(ConfigError, match=r"^cell \('cnn'\) must be one of 'rnn', 'gru'$"):
        check_choice("cell", "cnn", ("rnn", "gru"))
    check_token_id("eos_id", 2, 3)
    with pytest.raises(ConfigError, match=r"^eos_id \(3\) must be in \[0, 3\)$"):
        check_token_id("eos_id", 3, 3)


def test_check_special_ids_pad_must_fit_both_vocabularies():
    check_special_ids(src_vocab_size=3, tgt_vocab_size=5, pad_id=0, bos_id=4, eos_id=3)
    with pytest.raises(ConfigError, match=r"^pad_id \(3\) must be in \[0, 3\)$"):
        check_special_ids(src_vocab_size=3, tgt_vocab_size=5, pad_id=3, bos_id=1, eos_id=2)
    with pytest.raises(ConfigError, match=r"^eos_id \(5\) must be in \[0, 5\)$"):
        check_special_ids(src_vocab_size=9, tgt_vocab_size=5, pad_id=0, bos_id=1, eos_id=5)
