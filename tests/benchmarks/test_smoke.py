"""The benchmark scripts run end to end at the smallest shapes and print their tables (never timed here)."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "checkpoints"


def flags(values: dict[str, object]) -> list[str]:
    return [item for flag, value in values.items() for item in (flag, str(value))]


SMOKE = {
    "gru_textbook.py": (
        flags({"--scale": 0.1, "--repeats": 2, "--warmup": 0, "--threads": 1}),
        ["model     cell", "lm        gru_textbook", "tagger    gru ", "vs gru"],
    ),
    "recurrent.py": (
        ["--shapes", "2,3,2,4,1", "2,2,2,4,2", *flags({"--repeats": 2, "--warmup": 0, "--threads": 1})],
        ["shape (B,T,E,H,L)", "tokens/s IQR", "ratio IQR"],
    ),
    "language_model.py": (
        [
            *flags(
                {"--layers": 1, "--d-model": 8, "--heads": 2, "--context": 8, "--batch": 2, "--new-tokens": 4}
                | {"--vocab": 16, "--beams": 2, "--rnn-size": 4, "--rnn-vocab": 16, "--rnn-batch": 2, "--bptt": 3}
                | {"--repeats": 1, "--threads": 1}
            ),
            "--products",
        ],
        [
            "row      model",
            "train    seqlab GPT",
            "greedy   products alone",
            "beam     products alone",
            "greedy   transformers GPT-2",
            "beam     seqlab GPT",
            "rnn      seqlab RNN LM",
            "rnn      torch.nn LSTM LM",
            "same greedy tokens: yes",
            "same beam K=2 tokens: yes",
        ],
    ),
    "bert.py": (
        flags({"--batch": 2, "--length": 8, "--repeats": 1, "--threads": 1}),
        ["seqlab Bert", "transformers BertModel", "sentences/s IQR", "of the sentence embeddings"],
    ),
    "g2p_alignment_priors.py": (
        flags({"--batch": 2, "--steps": 1, "--words": 2, "--repeats": 1, "--threads": 1}),
        ["row                    train s/step  ratio decode s/word  ratio", "no prior", "1.00", "ALiBi bias 1.0"],
    ),
    "g2p_training.py": (
        [
            *flags({"--batches": 1, "--repeats": 1, "--threads": 1, "--set": "train.batch_size=2"}),
            *("--tables", "models,precision"),
            *("--row", "tiny=model.arch=transformer,model.d_model=16,model.d_ff=16,model.num_heads=2"),
            *("--row", "bf16=train.precision=bf16,train.batch_size=3"),
        ],
        [
            "row                  parameters  batch precision  ms/step",
            "Table 'models': ratio = row time / rnn time",
            "rnn                     834,730      2      fp32",
            "transformer_small       238,464      2      fp32",
            "Table 'precision': ratio = row time / default time",
            "default_bf16            834,730      2      bf16",
            "preset_bf16           3,965,482      2      bf16",  # --set comes after the preset's batch_size
            "Table 'rows': ratio = row time / default time",
            "tiny                      7,456      2      fp32",
            "bf16                    834,730      3      bf16",  # a row's own keys come after --set
            "1.00x",
        ],
    ),
    "sliding_window.py": (
        flags({"--tokens": 300, "--repeats": 1, "--threads": 1}),
        ["path                    seconds / default", "default", "all logits", "one window at a time", "largest loss"],
    ),
    "attention.py": (
        flags(
            {"--max-T": 8, "--batch": 1, "--heads": 1, "--head-dim": 2, "--window": 2, "--decode-batch": 2}
            | {"--new-tokens": 2, "--repeats": 1, "--warmup": 0, "--threads": 1}
        ),
        ["T path", "vs no cache", "same tokens on every path: yes"],
    ),
    "state_space.py": (
        flags(
            {"--lengths": "4,8", "--batch": 2, "--d-model": 4, "--state-size": 4, "--prompt": 4, "--new-tokens": 2}
            | {"--repeats": 1, "--warmup": 0, "--threads": 1}
        ),
        ["Table 1: S4DBlock training step", "recurrent scan", "Table 2", "parallel over prefix"],
    ),
    "serve.py": (
        flags(
            {"--g2p": ROOT / "tests/fixtures/checkpoints/g2p_v0_1"}
            | {"--lm": ROOT / "tests/fixtures/checkpoints/lm_gpt_9a192c4"}
            | {"--words": "cat,dog", "--requests": 8, "--new-tokens": 4, "--repeats": 1, "--max-batch-size": 4}
        ),
        [
            "Table 1: seqlab serve, g2p predict",
            f"{'off':<10}{1:>8}",  # the rows of batching off and on
            f"{'on':<10}{32:>8}",
            "gpt generate",
            "POST /v1/generate (SSE)",
            "same tokens on both sides: yes",
        ],
    ),
    "quantize.py": (
        flags(
            {"--g2p": FIXTURES / "g2p_v0_1", "--g2p-test": FIXTURES / "train.dict", "--words": 10}
            | {"--lm": FIXTURES / "lm_gpt_9a192c4", "--lm-test": FIXTURES / "corpus.txt", "--lm-chars": 300}
            | {"--new-tokens": 4, "--repeats": 1, "--threads": 1}
        ),
        ["g2p   model.safetensors (MB)", "g2p   PER (%, 10 test words)", "lm    perplexity (300 chars)"],
    ),
    "tcn_generation.py": (
        flags({"--levels": 2, "--hidden": 8, "--vocab": 16, "--new-tokens": 4, "--repeats": 1}),
        ["receptive field R = 13", "cached", "recompute", "same greedy tokens: yes"],
    ),
}


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_and_prints_its_table(script):
    if script == "quantize.py":
        pytest.importorskip("torchao", reason="the [quantize] extra (torchao) is not installed")
    arguments, expected = SMOKE[script]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang guard only: at load 12 a script of ~15 s of CPU took 105 s
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Failed to load" not in result.stderr  # torchao's import lines (imported by transformers) are quieted
    for text in expected:
        assert text in result.stdout, f"{text!r} missing from:\n{result.stdout}"
    if script == "bert.py":  # the same weights give the same embeddings
        assert float(result.stdout.rsplit(": ", 1)[1]) <= 1e-5
    if script == "recurrent.py":
        rows = [line for line in result.stdout.splitlines() if line.startswith(("2,3,2,4,1 ", "2,2,2,4,2 "))]
        # 2 shapes x 3 cases x (4 families x 3 rows + 2 reference-only variants)
        assert len(rows) == 2 * 3 * 14
        assert {line.split()[-1] for line in rows if " torch.nn " in line} == {"1.00-1.00"}


def test_recurrent_benchmark_refuses_a_bad_shape():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "recurrent.py"), "--shapes", "2,3,2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "expected B,T,E,H,L (five integers), got '2,3,2'" in result.stderr


def test_nanogpt_side_by_side_runs_and_prints_its_table(tmp_path):
    nanogpt_dir = os.environ.get("SEQLAB_NANOGPT_DIR")
    if not nanogpt_dir:
        pytest.skip("set SEQLAB_NANOGPT_DIR to a nanoGPT checkout to run benchmarks/nanogpt.py (never vendored)")
    words = ["in", "the", "beginning", "god", "created", "the", "heaven", "and", "the", "earth"]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(9)) for i in range(120)) + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    arguments = ["--nanogpt-dir", nanogpt_dir, "--text", str(text), "--iters", "2", "--keep", str(tmp_path / "runs")]
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "nanogpt.py"), *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for expected in ["iters side     valid loss  wall (s)", "     2 nanoGPT", "     2 seqlab", "wall seqlab / nanoGPT"]:
        assert expected in result.stdout, f"{expected!r} missing from:\n{result.stdout}"
    # The dataset is nanoGPT's format: uint16 ids of the train and valid text, and its meta.pkl.
    assert {p.name for p in (tmp_path / "runs" / "data").iterdir()} == {"train.bin", "val.bin", "meta.pkl"}


def test_the_nanogpt_seed_wrapper_runs_train_py_unchanged_with_its_seed_shifted(tmp_path):
    """A stand-in train.py that seeds torch with nanoGPT's 1337 ends up seeded with --nanogpt-seed's value, and
    sees its own name and arguments in sys.argv, as when run directly."""
    spec = importlib.util.spec_from_file_location("nanogpt_benchmark", ROOT / "benchmarks" / "nanogpt.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    (tmp_path / "train.py").write_text(
        "import sys, torch\ntorch.manual_seed(1337)\nprint(torch.initial_seed(), sys.argv)\n"
    )
    command = [sys.executable, "-c", benchmark.SEED_WRAPPER, "7", "train.py", "config/x.py", "--max_iters=2"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout == "7 ['train.py', 'config/x.py', '--max_iters=2']\n"


def test_the_nanogpt_sides_run_together_are_each_timed_to_their_own_end(tmp_path):
    """Side by side, a side that ends first is not charged for waiting on the other (listed first here): the wall
    times were once read one wait after another, so the quicker side got the slower one's time."""
    spec = importlib.util.spec_from_file_location("nanogpt_benchmark", ROOT / "benchmarks" / "nanogpt.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    commands = [(["sleep", "3"], tmp_path, tmp_path / "slow.log"), (["true"], tmp_path, tmp_path / "quick.log")]
    slow, quick = benchmark.run_sides(commands, threads=1, together=True)
    assert slow >= 3 and quick < slow - 2


def length_test_run(tmp_path: Path) -> Path:
    """The fixture LSTM run, its data every split of a dictionary of its own words joined into 3-18 letters."""
    pieces = [line.split(None, 1) for line in (FIXTURES / "train.dict").read_text().splitlines()]
    lines = []
    for joined in (1, 2, 3, 4, 5, 6):  # 3, 6, 9, 12, 15, 18 letters
        for start in range(0, 12, 3):
            chosen = [pieces[(start + 5 * k) % len(pieces)] for k in range(joined)]
            lines.append("".join(w for w, _ in chosen) + "  " + " ".join(p.strip() for _, p in chosen))
    dictionary = tmp_path / "words.dict"
    dictionary.write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "g2p_v0_1", run)
    recipe = json.loads((run / "recipe.json").read_text())
    recipe["config"]["data"] |= {f"{split}_path": str(dictionary) for split in ("train", "valid", "test")}
    (run / "recipe.json").write_text(json.dumps(recipe))
    (run / "metrics.jsonl").write_text('{"event": "step", "step": 1, "tokens": 120}\n{"step": 1, "valid_loss": 1.25}\n')
    return run


def test_g2p_length_scripts_print_the_same_teacher_forced_nll(tmp_path):
    """g2p_length_buckets.py takes its NLLs from g2p_decomposition.py's ``teacher_forced``: over the same words (a
    sample as large as each bucket), the buckets both have show the same nats per phoneme."""
    run = length_test_run(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    outputs = {}
    for script, size in (("g2p_length_buckets.py", "--short-words"), ("g2p_decomposition.py", "--per-bucket")):
        result = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / script), str(run), size, "100"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,  # a hang guard only
            check=False,
        )
        assert result.returncode == 0, result.stderr
        outputs[script] = result.stdout.splitlines()
    header, row = outputs["g2p_length_buckets.py"]
    assert "nll 1_4    nll 5_7   nll 8_10  nll 11_up  nll 15_up growth dropped 11+/15+" in header
    values = row.split()  # run, tokens, valid, WER, 5 bucket WERs, 5 bucket nlls, growth, dropped
    assert values[:3] == ["run", "120", "1.250"]
    nll = dict(zip(("1_4", "5_7", "8_10", "11_up", "15_up"), values[9:14], strict=True))
    decomposition = {line.split()[1]: line.split()[2] for line in outputs["g2p_decomposition.py"][1:]}
    assert set(decomposition) == {"5-7", "8-10", "11-14", "15+"}
    assert [decomposition["5-7"], decomposition["8-10"], decomposition["15+"]] == [
        nll["5_7"],
        nll["8_10"],
        nll["15_up"],
    ]
