"""A tiny trained run of every registered recipe, for the fault tests that need one (``evaluate`` on bad data).

``TINY_RUNS[name](folder)`` writes a small valid data set into ``folder`` and returns the ``--set`` assignments
of a one-step run of recipe ``name`` on it; ``EVALUATE_DATA`` turns a data file into the ``--data`` argument where
a recipe's evaluate takes another form. A recipe registered without an entry here fails the fault tests with a
message saying so, so no recipe goes untested.
"""

import random
from collections.abc import Callable
from pathlib import Path

WORDS = {
    "cat": "K AE1 T",
    "bat": "B AE1 T",
    "hat": "HH AE1 T",
    "dog": "D AO1 G",
    "go": "G OW1",
    "low": "L OW1",
    "toad": "T OW1 D",
    "hello": "HH AH0 L OW1",
    "data": "D EY1 T AH0",
    "about": "AH0 B AW1 T",
}
NAMES = {"it": ("Anna", "Mario", "Luca", "Giulia", "Marco", "Paola"), "de": ("Hans", "Fritz", "Klaus", "Greta", "Ute")}
SENTENCE = "the lord said unto moses and aaron in the land of egypt this month shall be unto you the beginning"
ONE_STEP = ["train.max_steps=1", "train.batch_size=4"]


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _pronunciations(folder: Path) -> list[str]:
    path = _write(folder, "words.dict", "".join(f"{w.upper()}  {p}\n" for w, p in WORDS.items()))
    return [f"data.{split}_path={path}" for split in ("train", "valid", "test")]


def _corpus(folder: Path) -> Path:
    rng = random.Random(0)
    words = SENTENCE.split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) for _ in range(80)]
    return _write(folder, "corpus.txt", "\n".join(lines) + "\n")


def _labelled(folder: Path) -> list[str]:
    text = "".join(f"{name}\t{label}\n" for label, names in NAMES.items() for name in names)
    path = _write(folder, "names.tsv", text)
    return [f"data.train_path={path}", f"data.test_path={path}", "data.valid_fraction=0.2"]


def g2p(folder: Path) -> list[str]:
    tiny = ["model.hidden_size=4", "model.embedding_size=4", "model.encoder_layers=1", "decode.num_beams=1"]
    return [*_pronunciations(folder), *tiny, *ONE_STEP]


def t5_g2p(folder: Path) -> list[str]:
    tiny = ["model.d_model=8", "model.d_kv=4", "model.d_ff=8", "model.num_layers=1", "model.num_decoder_layers=1"]
    return [*_pronunciations(folder), *tiny, "model.num_heads=2", "decode.num_beams=1", *ONE_STEP]


def tagger(folder: Path) -> list[str]:
    tiny = ["model.hidden_size=4", "model.embedding_size=4", "model.num_layers=1"]
    return [*_pronunciations(folder), *tiny, *ONE_STEP]


def lm(folder: Path) -> list[str]:
    tiny = ["model.d_model=8", "model.num_heads=2", "model.num_layers=1", "model.context_length=8"]
    return [f"data.train_path={_corpus(folder)}", *tiny, "data.batches_per_epoch=1", *ONE_STEP]


def bert_mlm(folder: Path) -> list[str]:
    tiny = ["model.num_layers=1", "model.d_model=8", "model.num_heads=2", "model.d_ff=8", "data.context_length=16"]
    steps = ["data.batches_per_epoch=1", "data.vocab_size=60", *ONE_STEP]
    return [f"data.train_path={_corpus(folder)}", *tiny, *steps]


def classify(folder: Path) -> list[str]:
    return [*_labelled(folder), "model.hidden_size=4", "model.embedding_size=4", *ONE_STEP]


def vec2seq(folder: Path) -> list[str]:
    tiny = ["model.hidden_size=4", "model.embedding_size=4", "model.class_embedding_size=2", "checker.max_steps=1"]
    sample = ["sample.samples_per_class=2", "sample.checker_hidden_size=4", "sample.checker_embedding_size=4"]
    return [*_labelled(folder), *tiny, *sample, *ONE_STEP]


def translate(folder: Path) -> list[str]:
    rng = random.Random(0)
    words = SENTENCE.split()
    src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 5))) for _ in range(40)]
    tgt = [" ".join(reversed(line.split())) for line in src]
    paths = [_write(folder, name, "\n".join(lines) + "\n") for name, lines in (("src.txt", src), ("tgt.txt", tgt))]
    tiny = ["model.arch=rnn", "model.embedding_size=4", "model.hidden_size=4", "model.encoder_layers=1"]
    settings = ["data.bpe_size=260", "data.valid_fraction=0.1", "data.test_fraction=0.1", "decode.num_beams=1"]
    return [f"data.src={paths[0]}", f"data.tgt={paths[1]}", *tiny, *settings, *ONE_STEP]


def forecast(folder: Path) -> list[str]:
    path = _write(folder, "series.txt", "".join(f"{i % 7}, {i % 5}\n" for i in range(120)))
    return [f"data.path={path}", "model.hidden_size=4", "eval.arima=false", *ONE_STEP]


def kuramoto_sivashinsky(folder: Path) -> list[str]:
    rows = [" ".join(f"{((i * 7 + j * 3) % 11) / 5 - 1:.3f}" for j in range(8)) for i in range(120)]
    path = _write(folder, "field.txt", "\n".join(rows) + "\n")
    sizes = ["data.grid=8", "data.input_length=4", "data.horizon=2", "model.hidden_size=4"]
    return [f"data.path={path}", *sizes, "eval.lyapunov_exponent=0.05", "eval.vpt_steps=10", *ONE_STEP]


def fields(folder: Path) -> list[str]:
    rows = [" ".join(f"{((i * 7 + j * 3) % 11) / 5 - 1:.3f}" for j in range(64)) for i in range(60)]
    path = _write(folder, "fields.txt", "\n".join(rows) + "\n")
    sizes = ["data.grid=8", "data.input_length=3", "data.horizon=2"]
    sizes += ["model.patch_size=4", "model.d_model=8", "model.num_heads=2", "model.d_ff=8", "model.num_layers=1"]
    return [f"data.path={path}", *sizes, "eval.max_lead=3", "eval.plot_leads=1", *ONE_STEP]


def chirps(folder: Path) -> list[str]:
    rng = random.Random(0)
    lines = [f"{rng.gauss(0, 1):.4f} {0.5 * ((i % 9) - 4):.4f}" for i in range(6 * 64)]
    path = _write(folder, "pairs.txt", "\n".join(lines) + "\n")
    sizes = ["data.samples=64", "data.cut_time_min=0.1", "data.cut_time_max=0.2", "data.valid_signals=2"]
    sizes += ["model.frame_size=8", "model.hidden_size=4"]
    return [f"data.path={path}", *sizes, "eval.snrs=10", "eval.test_signals=2", *ONE_STEP]


def protein(folder: Path) -> list[str]:
    rng = random.Random(0)
    records = [f">p{i}\n{''.join(rng.choice('ACDEFGHIKLMNPQRSTVWY') for _ in range(30))}\n" for i in range(20)]
    path = _write(folder, "proteins.fasta", "".join(records))
    tiny = ["model.d_model=8", "model.num_heads=2", "model.num_layers=1", "model.context_length=16"]
    return [f"data.train_path={path}", *tiny, "data.batches_per_epoch=1", "sample.count=1", *ONE_STEP]


def smiles(folder: Path) -> list[str]:
    molecules = ["CCO", "c1ccccc1", "CC(=O)O", "CCN", "CCCC", "C1CCCCC1", "CC(C)O", "OCCO", "CCOC", "NCCN"] * 3
    path = _write(folder, "molecules.smi", "\n".join(molecules) + "\n")
    tiny = ["model.d_model=8", "model.num_heads=2", "model.num_layers=1", "model.context_length=16"]
    return [f"data.train_path={path}", *tiny, "data.batches_per_epoch=1", "sample.count=1", *ONE_STEP]


def vowels(folder: Path) -> list[str]:
    rng = random.Random(0)
    header = "@problemName toy\n@timeStamps false\n@missing false\n@univariate false\n@dimensions 2\n"
    header += "@equalLength false\n@classLabel true a b\n@data\n"
    rows = []
    for label in ("a", "b") * 6:
        length = rng.randint(4, 8)
        channels = [",".join(f"{rng.gauss(0, 1):.3f}" for _ in range(length)) for _ in range(2)]
        rows.append(":".join([*channels, label]))
    path = _write(folder, "toy.ts", header + "\n".join(rows) + "\n")
    tiny = ["model.hidden_size=4", "train.time_budget=none"]
    return [f"data.train_path={path}", f"data.test_path={path}", *tiny, *ONE_STEP]


TINY_RUNS: dict[str, Callable[[Path], list[str]]] = {
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
EVALUATE_DATA: dict[str, Callable[[Path], str]] = {"translate": lambda path: f"{path},{path}"}
