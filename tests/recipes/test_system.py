"""The System protocol's typed requests: one validation for every caller, and the refusal of options a run lacks."""

import dataclasses
from pathlib import Path

import pytest

from seqlab.errors import ConfigError
from seqlab.recipes import load_system
from seqlab.recipes.system import (
    MAX_BEAMS,
    GenerationRequest,
    NBestSource,
    SystemOptions,
    nbest_within_beam,
    refuse_options,
)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temperature": 0.0}, "temperature (0.0) must be a finite number > 0"),
        ({"temperature": float("inf")}, "temperature (inf) must be a finite number > 0"),
        ({"temperature": float("nan")}, "temperature (nan) must be a finite number > 0"),
        ({"top_p": 1.5}, "top_p (1.5) must be in (0, 1]"),
        ({"top_p": 0.0}, "top_p (0.0) must be in (0, 1]"),
        ({"top_k": 0}, "top_k (0) must be >= 1"),
        ({"max_new_tokens": 10**6}, "max_new_tokens (1000000) must be <= 100,000"),
        ({"top_k": 10**7}, "top_k (10000000) must be <= 1,000,000"),
        ({"num_beams": MAX_BEAMS + 1}, "num_beams (1001) must be <= 1,000"),
        ({"num_return_sequences": 0}, "num_return_sequences (0) must be >= 1"),
        ({"num_beams": True}, "num_beams (True) must be an integer"),
        ({"seed": -1}, "seed (-1) must be in [0, 2**63)"),
        ({"stop": ""}, "stop is empty; give the string that ends a sequence"),
    ],
)
def test_a_bad_generation_setting_is_refused_naming_it(fields, message):
    with pytest.raises(ConfigError) as caught:
        GenerationRequest(prompt="The", **fields)
    assert str(caught.value) == message


def test_sampling_is_on_when_a_sampling_setting_is_given_and_otherwise_left_to_the_run():
    assert GenerationRequest(prompt="a").sampling is None
    assert GenerationRequest(prompt="a", top_k=5).sampling is True
    assert GenerationRequest(prompt="a", top_p=0.9, do_sample=False).sampling is False
    assert GenerationRequest(prompt="a").overrides() == {}
    request = GenerationRequest(prompt="a", max_new_tokens=7, temperature=0.5, num_beams=2, seed=3)
    assert request.overrides() == {"max_new_tokens": 7, "temperature": 0.5, "num_beams": 2, "do_sample": True}


def test_options_name_what_was_given_and_check_counts_and_weights():
    options = SystemOptions(num_beams=3, ensemble=(Path("a"),))
    assert options.given() == ["num_beams", "ensemble"]
    assert SystemOptions().given() == []
    with pytest.raises(ConfigError, match=r"^nbest \(0\) must be >= 1$"):
        SystemOptions(nbest=0)
    with pytest.raises(ConfigError, match=r"^rescore_weight \(1.5\) must be in \[0, 1\]$"):
        SystemOptions(rescore_weight=1.5)


class Tagger:
    OPTIONS = frozenset({"num_beams"})


def test_options_a_system_does_not_take_are_refused_by_their_flags():
    refuse_options(Tagger, SystemOptions(num_beams=2), {}, "tagger")
    flags = {"ensemble": "--ensemble", "nbest": "--nbest"}
    with pytest.raises(ConfigError) as caught:
        refuse_options(Tagger, SystemOptions(nbest=1, ensemble=(Path("b"),)), flags, "tagger")
    assert str(caught.value) == "--nbest --ensemble: the tagger recipe takes no such option"


def test_nbest_is_at_most_the_beam():
    assert nbest_within_beam(SystemOptions(), 1) == 1
    assert nbest_within_beam(SystemOptions(nbest=3), 3) == 3
    with pytest.raises(ConfigError, match=r"^nbest \(2\) cannot exceed the beam width num_beams \(1\)$"):
        nbest_within_beam(SystemOptions(nbest=2), 1)


def test_requests_and_options_are_frozen_values():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GenerationRequest(prompt="a").prompt = "b"  # type: ignore[misc]
    assert GenerationRequest(prompt="a", seed=1) == GenerationRequest(prompt="a", seed=1)


def test_load_system_takes_a_string_as_a_path():
    run = Path(__file__).parents[1] / "fixtures" / "checkpoints" / "g2p_v0_1"
    assert load_system(str(run)).predict(["cat"]) == load_system(run).predict(["cat"])


def test_with_search_equals_loading_the_run_with_those_options():
    """``NBestSource.with_search`` on a loaded g2p run predicts what the run loaded with the same options does; an
    nbest not given is cut to the beam; a bad count is refused as ``SystemOptions`` refuses it."""
    run = Path(__file__).parents[1] / "fixtures" / "checkpoints" / "g2p_v0_1"
    served = load_system(run, SystemOptions(num_beams=5, nbest=5))
    assert isinstance(served, NBestSource)
    words = ["cat", "withdraw"]
    for given, loaded in [
        ({"num_beams": 3, "nbest": 2}, {"num_beams": 3, "nbest": 2}),
        ({"nbest": 1}, {"num_beams": 5, "nbest": 1}),
        ({"num_beams": 2}, {"num_beams": 2, "nbest": 2}),
        ({}, {"num_beams": 5, "nbest": 5}),
    ]:
        assert served.with_search(**given).predict(words) == load_system(run, SystemOptions(**loaded)).predict(words)
    assert served.with_search(num_beams=2).model is served.model  # the weights are shared, not loaded again
    with pytest.raises(ConfigError, match=r"^nbest \(3\) cannot exceed the beam width num_beams \(2\)$"):
        served.with_search(num_beams=2, nbest=3)
    with pytest.raises(ConfigError, match=r"^num_beams \(0\) must be >= 1$"):
        served.with_search(num_beams=0)
