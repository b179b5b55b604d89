"""The translate recipe: reading parallel files, and a tiny Transformer learning a made-up language to BLEU > 90.

The made-up language maps each of 8 English words to a nonce word through a fixed lexicon and reverses the word
order; a model that reaches BLEU > 90 on those pairs has the whole pipeline right (BPE, id shift, batching,
teacher forcing, decoding, detokenisation, sacrebleu).
"""

import random
from pathlib import Path

import pytest
import sacrebleu

from seqlab.errors import DataError
from seqlab.recipes import translate
from seqlab.training.trainer import TrainConfig

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
        model=translate.ModelConfig(
            arch="transformer",
            d_model=32,
            num_heads=2,
            d_ff=64,
            encoder_layers=1,
            decoder_layers=1,
            dropout=0.0,
            label_smoothing=0.0,
        ),
        train=TrainConfig(lr=3e-3, batch_size=32, max_epochs=40, patience=None, seed=0),
        decode=translate.DecodeConfig(beam_size=3, max_length=24),
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toy")
    src, tgt = write_pair(folder, *toy_pairs(120))
    out = folder / "run"
    lines = []
    report = translate.train(tiny_config(src, tgt), out, progress=False, log=lines.append)
    return out, report, lines, (src, tgt)


def test_a_tiny_transformer_learns_the_toy_language(trained):
    _, report, lines, _ = trained
    assert report.results["bleu"] > 90 and report.results["greedy_bleu"] > 90
    assert report.results["chrf"] > 90
    assert any(line.startswith("sacrebleu: BLEU nrefs:1|case:mixed") for line in lines)


def test_scores_are_sacrebleus_on_the_detokenised_translations(trained):
    out, report, _, (src, tgt) = trained
    sources, references = src.read_text().splitlines(), tgt.read_text().splitlines()
    hypotheses = translate.predict(out, sources)
    assert report.results["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert translate.evaluate(out, f"{src},{tgt}")["bleu"] == pytest.approx(report.results["bleu"])
    greedy = translate.predict(out, sources, beam_size=1)
    assert report.results["greedy_bleu"] == pytest.approx(sacrebleu.corpus_bleu(greedy, [references]).score)


def test_separate_bpe_vocabularies_train_and_reload(tmp_path):
    src, tgt = write_pair(tmp_path, *toy_pairs(20))
    config = tiny_config(src, tgt, shared_bpe=False)
    config = translate.Config(
        data=config.data, model=config.model, decode=config.decode, train=TrainConfig(max_steps=2, patience=None)
    )
    translate.train(config, tmp_path / "run", progress=False, log=lambda line: None)
    system = translate.Translator.load(tmp_path / "run")
    assert system.source != system.target


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
        translate.train(translate.Config(), tmp_path / "run", progress=False, log=lambda line: None)
    assert not (tmp_path / "run").exists()


def test_the_split_is_deterministic_and_disjoint(tmp_path):
    src, tgt = write_pair(tmp_path, *toy_pairs(40))
    config = translate.DataConfig(src=str(src), tgt=str(tgt), valid_fraction=0.1, test_fraction=0.2)
    first, again = translate.load_splits(config), translate.load_splits(config)
    assert first == again
    assert [len(part.src) for part in first] == [28, 4, 8]
    assert sorted(line for part in first for line in part.src) == sorted(src.read_text().splitlines())
