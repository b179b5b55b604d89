"""The commands that use a trained run go through the System protocol alone: options a run's System does not take,
analyses it does not offer and renamed flags, each checked on the run directories in tests/fixtures (no training)."""

from pathlib import Path

from cli_helpers import assert_error, run_cli

from seqlab.recipes.common import text_generation

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
CLASSIFY, G2P, GPT = FIXTURES / "classify_9a192c4", FIXTURES / "g2p_v0_1", FIXTURES / "lm_gpt_9a192c4"


def test_an_option_the_runs_system_does_not_take_is_refused_by_its_flag(tmp_path):
    assert_error(
        run_cli("predict", CLASSIFY, "Ivanov", "--ensemble", G2P),
        "--ensemble: the classify recipe takes no such option",
    )
    assert_error(
        run_cli("predict", CLASSIFY, "Ivanov", "--num-beams", "2", "--nbest", "2"),
        "--num-beams --nbest: the classify recipe takes no such option",
    )
    errors = tmp_path / "wrong.tsv"
    assert_error(
        run_cli("evaluate", GPT, "--data", FIXTURES / "corpus.txt", "--errors", errors),
        "--errors: the lm recipe takes no such option",
    )
    assert not errors.exists()


def test_an_analysis_the_runs_system_does_not_offer_is_refused_naming_those_that_do(tmp_path):
    out = tmp_path / "maps"
    result = run_cli("analyze", "attention", CLASSIFY, "--input", "Ivanov", "--out", out)
    assert_error(
        result, f"{CLASSIFY}: a classify run; drawing attention maps needs a run of g2p, lm, protein, translate"
    )
    assert not out.exists()


def test_generate_refuses_a_run_that_does_not_generate():
    message = f"{G2P}: the g2p recipe does not generate; runs of lm, protein, smiles, vec2seq do"
    assert_error(run_cli("generate", G2P, "--prompt", "cat"), message)


def test_the_old_flag_names_work_with_a_warning_and_not_beside_the_new_ones():
    old = run_cli("predict", G2P, "cat", "--beam-size", "2", "--nbest", "2")
    assert old.code == 0 and old.out == run_cli("predict", G2P, "cat", "--num-beams", "2", "--nbest", "2").out
    assert old.err == "seqlab: warning: --beam-size is renamed --num-beams; the old name goes in the next release\n"
    both = run_cli("predict", G2P, "cat", "--beam-size", "2", "--num-beams", "2")
    assert_error(both, "--beam-size is the old name of --num-beams; give --num-beams only")
    assert_error(run_cli("predict", G2P, "cat", "--beam-size", "0"), "--beam-size (0) must be >= 1")
    samples = ["generate", GPT, "--prompt", "The", "--max-new-tokens", "3", "--seed", "1"]
    old = run_cli(*samples, "--temperature", "2", "--num-samples", "2")
    assert old.out == run_cli(*samples, "--temperature", "2", "--num-return-sequences", "2").out
    assert old.out.count("--- sample ") == 2
    assert_error(run_cli(*samples, "--num-samples", "0"), "--num-samples (0) must be >= 1")


def test_generate_interrupted_keeps_what_it_printed_ends_its_line_and_exits_130(monkeypatch):
    five = run_cli("generate", GPT, "--prompt", "the", "--max-new-tokens", "5")
    assert five.code == 0 and five.out.endswith("\n")
    push = text_generation._TextStream.push

    def interrupted_after_five(stream, tokens):
        push(stream, tokens)
        if len(stream.new_ids) == 5:
            raise KeyboardInterrupt  # as Ctrl-C would, mid-generation

    monkeypatch.setattr(text_generation._TextStream, "push", interrupted_after_five)
    result = run_cli("generate", GPT, "--prompt", "the", "--max-new-tokens", "1000")
    assert (result.code, result.out, result.err) == (130, five.out, "seqlab: interrupted\n")


def test_generate_bounds_max_new_tokens_in_one_line():
    result = run_cli("generate", GPT, "--prompt", "the", "--max-new-tokens", "1000000")
    assert_error(result, "--max-new-tokens (1000000) must be <= 100,000")


def test_generate_compile_refuses_a_model_that_is_not_a_gpt_and_the_onnxruntime_backend():
    lstm = FIXTURES / "lm_lstm_word_9a192c4"
    message = f"{lstm}: compile applies to GPT language models, not to a RNNLanguageModel"
    assert_error(run_cli("generate", lstm, "--prompt", "the", "--compile"), message)
    message = "compile runs torch's steps: it cannot be combined with backend onnxruntime"
    assert_error(run_cli("generate", GPT, "--prompt", "the", "--compile", "--backend", "onnxruntime"), message)
