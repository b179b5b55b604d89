"""The translate recipe: reading parallel files, and a tiny Transformer learning a made-up language to BLEU > 90.

The made-up language maps each of 8 English words to a nonce word through a fixed lexicon and reverses the word
order; a model that reaches BLEU > 90 on those pairs has the whole pipeline right (BPE, id shift, batching,
teacher forcing, decoding, detokenisation, sacrebleu).
"""

import dataclasses
import json
import random
from pathlib import Path

import pytest
import sacrebleu
import torch
from cli_helpers import assert_error, run_cli

from seqlab.config import apply_overrides
from seqlab.data.batching import collate_seq2seq
from seqlab.data.tokenizers import BPETokenizer
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.recipes import load_system, translate
from seqlab.recipes.base import run_training
from seqlab.recipes.system import AttentionSource, NBestSource, SystemOptions
from seqlab.training.train_config import Seq2SeqTrainConfig

LEXICON = {
    "the": "ka",
    "cat": "mipo",
    "dog": "rulo",
    "sees": "tenu",
    "big": "sav",
    "small": "lin",
    "a": "o",
    "bird": "fesh",
}


def toy_pairs(count: int) -> tuple[list[str], list[str]]:
    rng = random.Random(0)
    words = sorted(LEXICON)
    src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 4))) for _ in range(count)]
    return src, [" ".join(LEXICON[w] for w in reversed(s.split())) for s in src]


def write_pair(folder: Path, src: list[str], tgt: list[str]) -> tuple[Path, Path]:
    (folder / "src.txt").write_text("".join(f"{line}\n" for line in src))
    (folder / "tgt.txt").write_text("".join(f"{line}\n" for line in tgt))
    return folder / "src.txt", folder / "tgt.txt"


def tiny_config(src: Path, tgt: Path, **data) -> translate.Config:
    return translate.Config(
        data=translate.DataConfig(
            src=str(src),
            tgt=str(tgt),
            valid_src=str(src),
            valid_tgt=str(tgt),
            test_src=str(src),
            test_tgt=str(tgt),
            bpe_size=300,
            **data,
        ),
        model=translate.TransformerModelConfig(
            d_model=32,
            num_heads=2,
            d_ff=64,
            encoder_layers=1,
            decoder_layers=1,
            dropout=0.0,
            label_smoothing=0.0,
        ),
        train=Seq2SeqTrainConfig(lr=3e-3, batch_size=32, max_epochs=40, patience=None, seed=0),
        decode=translate.DecodeConfig(num_beams=3, max_length=24),
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toy")
    src, tgt = write_pair(folder, *toy_pairs(120))
    out = folder / "run"
    lines = []
    report = run_training(translate, tiny_config(src, tgt), out, progress=False, log=lines.append)
    return out, report, lines, (src, tgt)


def test_a_tiny_transformer_learns_the_toy_language(trained):
    _, report, _, _ = trained
    assert report.results["bleu"] > 90 and report.results["greedy_bleu"] > 90
    assert report.results["chrf"] > 90


def test_scores_are_sacrebleus_on_the_detokenised_translations(trained):
    out, report, _, (src, tgt) = trained
    sources, references = src.read_text().splitlines(), tgt.read_text().splitlines()
    system = load_system(out)
    hypotheses = [p.text for p in system.predict(sources)]
    assert report.results["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert system.evaluate(f"{src},{tgt}")["bleu"] == pytest.approx(report.results["bleu"])
    assert system.score(translate.Parallel(sources, references)).signature.startswith("BLEU nrefs:1|case:mixed")
    greedy = translate.System.load(out, SystemOptions(num_beams=1)).predict(sources)
    assert [p.lines() for p in greedy] == [[text] for text in system.translate(sources, num_beams=1)]
    assert report.results["greedy_bleu"] == pytest.approx(
        sacrebleu.corpus_bleu([p.text for p in greedy], [references]).score
    )


def test_a_served_request_sets_the_beam_width_and_gets_what_a_run_loaded_with_it_predicts(trained):
    out, _, _, (src, _) = trained
    sources = src.read_text().splitlines()[:6]
    system = load_system(out)
    assert isinstance(system, NBestSource) and system.with_search() is system
    for num_beams in (1, 2):
        loaded = translate.System.load(out, SystemOptions(num_beams=num_beams)).predict(sources)
        assert system.with_search(num_beams=num_beams, nbest=1).predict(sources) == loaded
        assert system.with_search(num_beams=num_beams, nbest=1).num_beams == num_beams
    assert system.num_beams == 3  # the run's own, unchanged
    with pytest.raises(ConfigError, match=r"^nbest \(2\) must be 1: this model gives one translation per input$"):
        system.with_search(nbest=2)
    with pytest.raises(ConfigError, match=r"^num_beams \(0\) must be >= 1$"):
        system.with_search(num_beams=0)
    fastapi = pytest.importorskip("fastapi.testclient", reason="the [serve] extra is not installed")
    from seqlab.serving import create_app, load_models

    client = fastapi.TestClient(create_app(load_models([out], nbest=1)))
    answer = client.post("/v1/predict", json={"model": out.name, "inputs": sources[:2], "num_beams": 1}).json()
    greedy = translate.System.load(out, SystemOptions(num_beams=1)).predict(sources[:2])
    assert [p["lines"] for p in answer["predictions"]] == [p.lines() for p in greedy]


def test_the_command_line_predicts_evaluates_and_refuses_what_translate_does_not_take(trained):
    out, report, _, (src, tgt) = trained
    first = src.read_text().splitlines()[0]
    result = run_cli("predict", out, first, "--num-beams", 1)
    assert result.code == 0 and result.out == f"{translate.System.load(out).translate([first], num_beams=1)[0]}\n"
    result = run_cli("evaluate", out, "--data", f"{src},{tgt}", "--json")
    assert json.loads(result.out)["bleu"] == pytest.approx(report.results["bleu"])
    assert_error(run_cli("predict", out, first, "--nbest", 2), "--nbest: the translate recipe takes no such option")
    assert_error(
        run_cli("evaluate", out, "--data", str(src)), f"--data {src}: give SRC_FILE,TGT_FILE (two line-aligned files)"
    )


def test_attention_maps_follow_the_sentence_and_its_translation(trained):
    system = translate.System.load(trained[0])
    assert isinstance(system, AttentionSource)
    labelled = system.attention_maps("the cat sees a dog")
    output = system.decode(["the cat sees a dog"], num_beams=1)[0]
    assert labelled.output == [system.target.decode([i - 3]).replace(" ", "\u2423") for i in output]
    assert labelled.caption == f"'the cat sees a dog' -> {system.translate(['the cat sees a dog'], num_beams=1)[0]!r}"
    source = system.source_ids("the cat sees a dog")
    cross = [m for m in labelled.maps if m.kind == "cross"]
    assert len(cross) == 2  # one decoder layer, two heads
    for m in cross:
        assert m.weights.shape == (len(output) + 1, len(source))
        torch.testing.assert_close(m.weights.sum(-1), torch.ones(len(output) + 1))
    queries, keys = labelled.labels["decoder", "cross"]
    assert (len(queries), len(keys)) == (len(output) + 1, len(source))


def test_seqlab_analyze_attention_draws_every_stack_of_the_transformer(trained, tmp_path):
    out = tmp_path / "maps"
    result = run_cli("analyze", "attention", trained[0], "--input", "the cat sees a dog", "--out", out)
    assert result.code == 0, result.err
    pictures = sorted(p.name for p in out.glob("*.png"))
    assert pictures == ["attention_decoder_cross.png", "attention_decoder_self.png", "attention_encoder_self.png"]


def test_the_validation_loss_is_the_token_mean_over_batches(trained):
    """``TranslateTraining.validate`` alone: over batches of 2 and 1 pairs it equals the token mean of the
    cross-entropy computed over all target tokens at once."""
    system = translate.System.load(trained[0])
    pairs = system.encode(translate.Parallel(["the cat", "a big dog sees", "bird"], ["mipo ka", "x", "fesh o"]))
    parts = translate.TranslateTraining(system, pairs, pairs, translate.Parallel([], []), valid_batch_size=2)
    batch = collate_seq2seq(pairs)
    system.model.eval()
    with torch.no_grad():
        logits = system.model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=0)
    assert parts.validate(system.model)["valid_loss"] == pytest.approx(expected.item(), rel=1e-6)


def test_separate_bpe_vocabularies_train_and_reload(tmp_path):
    src, tgt = write_pair(tmp_path, *toy_pairs(20))
    config = tiny_config(src, tgt, shared_bpe=False)
    config = translate.Config(
        data=config.data, model=config.model, decode=config.decode, train=Seq2SeqTrainConfig(max_steps=2, patience=None)
    )
    run_training(translate, config, tmp_path / "run", progress=False, log=lambda line: None)
    system = translate.System.load(tmp_path / "run")
    assert system.source != system.target


def test_a_tokenizer_of_another_size_than_the_weights_is_refused(trained, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for path in trained[0].iterdir():
        if path.is_file():
            (run / path.name).write_bytes(path.read_bytes())
    BPETokenizer.train(["a b"], vocab_size=257).save(run / "target_tokenizer.json")
    expected = translate.System.load(trained[0]).model.config.tgt_vocab_size
    with pytest.raises(CheckpointError) as caught:
        translate.System.load(run)
    assert str(caught.value) == (
        f"{run / 'target_tokenizer.json'}: 260 symbols, but the model's weights have {expected}; not this model's file"
    )


def test_a_small_rnn_trains_and_reloads_as_its_arch(tmp_path):
    src, tgt = write_pair(tmp_path, *toy_pairs(20))
    model = translate.RNNModelConfig(embedding_size=8, hidden_size=8, encoder_layers=1, decoder_layers=1)
    config = dataclasses.replace(
        tiny_config(src, tgt), model=model, train=Seq2SeqTrainConfig(max_steps=2, patience=None)
    )
    run_training(translate, config, tmp_path / "run", progress=False, log=lambda line: None)
    system = translate.System.load(tmp_path / "run")
    assert type(system.model).__name__ == "RNNSeq2Seq" and system.config.model == config.model
    labelled = system.attention_maps("the cat")
    assert [(m.module, m.kind) for m in labelled.maps] == [("decoder.attention", "cross")]


def test_a_key_of_the_other_arch_is_refused_in_one_line():
    with pytest.raises(ConfigError) as caught:
        apply_overrides(translate.Config(), {"model.arch": "rnn", "model.num_heads": "2"})
    assert str(caught.value) == (
        "--set model.num_heads: does not apply to model.arch=rnn (a key of model.arch=transformer)"
    )
    assert_error(
        run_cli("train", "translate", "--set", "model.hidden_size=8"),
        "--set model.hidden_size: does not apply to model.arch=transformer (a key of model.arch=rnn)",
    )


def test_an_old_recipe_json_with_both_archs_fields_and_beam_size_loads(trained, tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    for path in trained[0].iterdir():
        if path.is_file():
            (run / path.name).write_bytes(path.read_bytes())
    saved = json.loads((run / "recipe.json").read_text())
    saved["config"]["model"] |= {"embedding_size": 128, "hidden_size": 256, "cell": "lstm"}
    saved["config"]["decode"]["beam_size"] = saved["config"]["decode"].pop("num_beams")
    (run / "recipe.json").write_text(json.dumps(saved))
    system = translate.System.load(run)
    assert system.config == translate.System.load(trained[0]).config


@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [
        ("a\nb\n", "x\n", "has 2 lines but"),
        ("", "", "empty file"),
        ("a\n\nb\n", "x\ny\nz\n", ":2: blank line"),
    ],
)
def test_bad_parallel_files_are_one_line_errors(tmp_path, src, tgt, message):
    (tmp_path / "s").write_text(src)
    (tmp_path / "t").write_text(tgt)
    with pytest.raises(DataError, match=message):
        translate.read_parallel(str(tmp_path / "s"), str(tmp_path / "t"))


def test_missing_data_says_what_to_pass(tmp_path):
    with pytest.raises(DataError, match=r"data\.src=FILE data\.tgt=FILE"):
        run_training(translate, translate.Config(), tmp_path / "run", progress=False, log=lambda line: None)
    assert not (tmp_path / "run").exists()


def test_the_split_is_deterministic_and_disjoint(tmp_path):
    src, tgt = write_pair(tmp_path, *toy_pairs(40))
    config = translate.DataConfig(src=str(src), tgt=str(tgt), valid_fraction=0.1, test_fraction=0.2)
    first, again = translate.load_splits(config), translate.load_splits(config)
    assert first == again
    assert [len(part.src) for part in first] == [28, 4, 8]
    assert sorted(line for part in first for line in part.src) == sorted(src.read_text().splitlines())


def test_token_batches_hold_at_most_batch_size_target_tokens(trained):
    """``train.batch_type=token``: the training batches hold every pair once, each at most batch_size target tokens
    (BPE tokens + EOS)."""
    loaded = translate.System.load(trained[0])
    config = dataclasses.replace(loaded.config, train=dataclasses.replace(loaded.config.train, batch_type="token"))
    system = translate.System(loaded.model, loaded.source, loaded.target, config)
    pairs = system.encode(translate.Parallel(*toy_pairs(30)))
    parts = translate.TranslateTraining(system, pairs, pairs, translate.Parallel([], []))
    batches = list(parts.train_batches(1, torch.Generator().manual_seed(0), 16))
    assert sorted(i for batch in batches for i in batch.indices.tolist()) == list(range(len(pairs)))
    assert max(int(batch.tgt_lengths.sum()) for batch in batches) <= 16
    assert len(batches) < len(pairs) / 2  # several pairs a batch
