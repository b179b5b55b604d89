"""g2p n-best rescoring (``--rescore``, ``--rescore-weight``) and right-to-left runs (``model.target_order``), on
the 0.1.0 fixture runs (an LSTM and a Transformer trained on ``train.dict``, with the same vocabularies)."""

import json
import math
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.data.batching import collate_seq2seq
from seqlab.data.pronunciations import read_entries
from seqlab.decoding.beam_search import beam_search
from seqlab.recipes import g2p

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
RNN, TRANSFORMER, DICTIONARY = FIXTURES / "g2p_v0_1", FIXTURES / "g2p_transformer_v0_1", FIXTURES / "train.dict"
WORDS = ("cat", "dog", "pin", "tap", "spot")


def _predict(*argv):
    result = run_cli("predict", *argv)
    assert result.code == 0, result.err
    return result.out.splitlines()


def _evaluate(*argv):
    result = run_cli("evaluate", *argv, "--data", DICTIONARY, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def _log_prob(system, word, phonemes):
    """log p(phonemes + EOS | word) by stepping the model one phoneme at a time (independent of the rescorer)."""
    model = system.model.eval()
    ids = system.letters.encode(list(word))
    target = system.phonemes.encode(list(phonemes))
    if system.config.model.target_order == "right_to_left":
        target = target[::-1]
    state = model.encode(torch.tensor([ids]), torch.tensor([len(ids)]))
    total, previous = 0.0, system.phonemes.bos_id
    with torch.no_grad():
        for token in [*target, system.phonemes.eos_id]:
            out = model.step(torch.tensor([previous]), state)
            total += torch.log_softmax(out.logits.double(), dim=-1)[0, token].item()
            state, previous = out.state, token
    return total


def test_a_weight_of_zero_returns_the_left_to_right_best_exactly():
    assert _evaluate(RNN, "--rescore", TRANSFORMER, "--rescore-weight", "0") == _evaluate(RNN)
    alone = _predict(RNN, *WORDS, "--nbest", "3")
    assert _predict(RNN, *WORDS, "--nbest", "3", "--rescore", TRANSFORMER, "--rescore-weight", "0") == alone


@pytest.mark.parametrize("weight", [0.5, 1.0])
def test_rescoring_picks_the_best_weighted_sum_of_the_beam(weight):
    """The best after rescoring is, among the run's 5-best, the argmax of (1 - w) log p_run + w log p_rescorer,
    both computed here step by step."""
    run, rescorer = g2p.G2PSystem.load(RNN), g2p.G2PSystem.load(TRANSFORMER)
    expected = []
    for word, hyps in zip(WORDS, run.transcribe(WORDS, source="t", nbest=5), strict=True):
        combined = [(1 - weight) * lp + weight * _log_prob(rescorer, word, phonemes) for phonemes, lp in hyps]
        expected.append(f"{word}  {' '.join(hyps[combined.index(max(combined))][0])}")
    assert _predict(RNN, *WORDS, "--rescore", TRANSFORMER, "--rescore-weight", str(weight)) == expected


def test_several_rescoring_runs_score_as_one_ensemble():
    """With two rescoring runs, the best is the argmax of (1 - w) log p_run + w log p_ensemble over the 5-best,
    p_ensemble(y) = prod_t of the runs' mean probability of y_t, computed here step by step."""
    run = g2p.G2PSystem.load(RNN)
    rescorers = [g2p.G2PSystem.load(TRANSFORMER), run]
    expected = []
    for word, hyps in zip(WORDS, run.transcribe(WORDS, source="t", nbest=5), strict=True):
        combined = [0.5 * lp + 0.5 * _ensemble_log_prob(rescorers, word, phonemes) for phonemes, lp in hyps]
        expected.append(f"{word}  {' '.join(hyps[combined.index(max(combined))][0])}")
    assert _predict(RNN, *WORDS, "--rescore", TRANSFORMER, RNN) == expected


def _ensemble_log_prob(systems, word, phonemes):
    """log prod_t mean_m p_m(phoneme_t | ...) over the left-to-right ``systems``, stepped one phoneme at a time."""
    ids = systems[0].letters.encode(list(word))
    models = [system.model.eval() for system in systems]
    states = [m.encode(torch.tensor([ids]), torch.tensor([len(ids)])) for m in models]
    total, previous = 0.0, systems[0].phonemes.bos_id
    with torch.no_grad():
        for token in [*systems[0].phonemes.encode(list(phonemes)), systems[0].phonemes.eos_id]:
            outs = [m.step(torch.tensor([previous]), st) for m, st in zip(models, states, strict=True)]
            total += math.log(sum(torch.softmax(o.logits.double(), dim=-1)[0, token].item() for o in outs) / 2)
            states, previous = [o.state for o in outs], token
    return total


def test_a_right_to_left_run_learns_reversed_pronunciations_and_rescores(tmp_path):
    out = tmp_path / "rtl"
    files = [f"data.{split}_path={DICTIONARY}" for split in ("train", "valid", "test")]
    tiny = ["model.embedding_size=4", "model.hidden_size=4", "train.max_steps=2", "decode.num_beams=3"]
    settings = [*files, *tiny, "model.target_order=right_to_left"]
    result = run_cli("train", "g2p", "--no-progress", "--out", out, "--set", *settings)
    assert result.code == 0, result.err
    system = g2p.G2PSystem.load(out)
    assert system.config.model.target_order == "right_to_left"
    entries = read_entries(str(DICTIONARY), system.config.data)
    reversed_pairs = g2p.encode_pairs(system, entries, source="t")
    assert [ids[::-1] for _, ids in reversed_pairs] == [system.phonemes.encode(e.phonemes) for e in entries]
    # its own predictions read left to right: the model's beam output, reversed
    ids = [system.letters.encode(list(w)) for w in WORDS]
    batch = collate_seq2seq([(x, []) for x in ids])
    bos = torch.full((len(WORDS),), system.phonemes.bos_id)
    with torch.no_grad():
        state = system.model.eval().encode(batch.src, batch.src_lengths)
        out_ = beam_search(
            system.model, state, bos, eos_id=system.phonemes.eos_id, max_length=32, num_beams=3, length_penalty=0.0
        )
    expected = [
        f"{w}  {' '.join(system.phonemes.decode(t[0])[::-1])}" for w, t in zip(WORDS, out_.tokens.tolist(), strict=True)
    ]
    assert _predict(out, *WORDS) == expected
    assert _evaluate(RNN, "--rescore", out, "--rescore-weight", "0") == _evaluate(RNN)
    assert 0 <= _evaluate(RNN, "--rescore", out)["wer"] <= 100
    message = f"--ensemble {out}: reads pronunciations in another order than {RNN}"
    assert_error(run_cli("predict", RNN, "cat", "--ensemble", out), message)  # a mixture would mix directions
    message = f"--rescore {RNN}: reads pronunciations in another order than {out}"
    assert_error(run_cli("predict", RNN, "cat", "--rescore", out, RNN), message)


def test_bad_rescoring_options_are_refused_in_one_line():
    message = "--rescore-weight needs --rescore, the run whose scores it weighs"
    assert_error(run_cli("predict", RNN, "cat", "--rescore-weight", "0.5"), message)
    assert_error(
        run_cli("evaluate", RNN, "--data", DICTIONARY, "--rescore", TRANSFORMER, "--rescore-weight", "1.5"),
        "--rescore-weight (1.5) must be in [0, 1]",
    )
