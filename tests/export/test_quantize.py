"""Dynamic int8 quantization: a quantized Linear equals the equations computed by hand, the GPT fast path equals its
module path on a quantized model, a quantized run is smaller and round-trips through save and ``load_system``, every
recipe's run is taken by ``evaluate`` / ``predict`` once quantized, and bad requests get their one-line errors."""

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_error, run_cli
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from torch.testing import assert_close

from seqlab.cli.quantize import quantize_run
from seqlab.decoding import generate
from seqlab.errors import CheckpointError, ConfigError
from seqlab.export.quantize import quantizable_linears, quantize_model
from seqlab.models import load_pretrained
from seqlab.models.language_model.gpt import GPT, gpt
from seqlab.models.pretrained import CONFIG_FILE, WEIGHTS_FILE
from seqlab.models.quantized import quantization_of
from seqlab.recipes import load_system

pytest.importorskip("torchao", reason="the [quantize] extra (torchao) is not installed")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
DATA = {"g2p": "train.dict", "lm": "corpus.txt", "classify": "names.tsv"}
TOLERANCES = {"loss": 0.05, "per": 5.0, "wer": 10.0, "accuracy": 5.0}  # nats/token; percentage points
RUNS = ["g2p_v0_1", "g2p_transformer_v0_1", "lm_gpt_9a192c4", "lm_lstm_word_9a192c4", "classify_9a192c4"]


def _int8_by_hand(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """y = s_x s_W (q_x q_W^T) + b, each row of x and of W quantized symmetrically on its own: s = max|row| / 127.5
    (the int8 range [-128, 127] has 255 / 2 steps each side), q = round(row * (1 / s)) (the row's maximum times
    1 / s lands just inside 127.5, where row / s would be the tie 127.5 that rounds to even), in float32 as torchao
    quantizes; the products in float64."""

    def rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = t.abs().amax(dim=-1, keepdim=True) / 127.5
        return torch.clamp(torch.round(t * (1.0 / scale)), -128, 127).double(), scale.double()

    q_x, s_x = rows(x)
    q_w, s_w = rows(weight)
    return (q_x @ q_w.T) * s_x * s_w.T + bias.double()


def test_a_quantized_linear_computes_the_int8_equations():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(24, 16), nn.Tanh(), nn.Linear(16, 8)).eval()
    weight, bias = model[0].weight.detach().clone(), model[0].bias.detach().clone()
    x = torch.randn(5, 24)
    assert quantize_model(model) == ["0", "2"]
    y = model[0](x)
    # The integer product is exact; only the float32 rescaling of the kernel differs from float64.
    assert_close(y.double(), _int8_by_hand(x, weight, bias), rtol=1e-5, atol=1e-5)
    assert_close(y, x @ weight.T + bias, rtol=0, atol=0.05)  # and near the float layer: int8 keeps ~2 digits
    assert not torch.equal(y, x @ weight.T + bias)


def test_tied_and_non_linear_layers_are_left_float():
    model = nn.ModuleDict({"embedding": nn.Embedding(10, 8), "output": nn.Linear(8, 10), "head": nn.Linear(8, 3)})
    model["output"].weight = model["embedding"].weight  # tied: the embedding reads the same matrix
    assert quantizable_linears(model) == ["head"]
    with pytest.raises(ConfigError, match=r"^the model has no Linear layer to quantize$"):
        quantize_model(nn.Sequential(nn.Embedding(10, 8), nn.LSTM(8, 8)))
    quantize_model(model)
    with pytest.raises(ConfigError, match=r"^the model is already quantized \(dynamic-int8, 1 Linear layers\)$"):
        quantize_model(model)
    with pytest.raises(ConfigError, match=r"^unknown quantization method 'int4'; choose from dynamic-int8$"):
        quantize_model(nn.Linear(2, 2), method="int4")


# The GPT decoding fast path (IncrementalStep, through seqlab.nn.direct_calls) on a quantized model against the
# module path (GPT.forward with the KV cache, every module called).

PROMPT = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
NEW_TOKENS = 6


def _gpt() -> GPT:
    torch.manual_seed(0)
    model = gpt(vocab_size=11, context_length=16, d_model=16, num_heads=2, num_layers=2, tie_embeddings=False)
    with torch.no_grad():  # larger than GPT-2's init, so every weight moves the logits visibly
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


class _Recording:
    """A step model that forwards to a GPT and keeps the logits it returns and whether each step ran the fast path."""

    def __init__(self, model: GPT) -> None:
        self.model, self.logits, self.fast = model, [], []
        self.context_length = model.context_length

    def prefill(self, input_ids, keep_mask=None):
        out = self.model.prefill(input_ids, keep_mask)
        self.logits.append(out.logits)
        return out

    def step(self, tokens, state):
        self.fast.append(state.incremental_step is not None)
        out = self.model.step(tokens, state)
        self.logits.append(out.logits)
        return out

    def reorder_state(self, state, index):
        return self.model.reorder_state(state, index)


@torch.no_grad()
def _module_path_greedy(model: GPT, prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out, tokens, logits = model(prompt), prompt, []
    for i in range(NEW_TOKENS):
        logits.append(out.logits[:, -1])
        following = logits[-1].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, following], dim=1)
        if i + 1 < NEW_TOKENS:
            out = model(following, out.state)
    return tokens, torch.stack(logits, dim=1)


@pytest.mark.parametrize("prompt", [PROMPT[:1], PROMPT], ids=["one row", "two rows"])
def test_gpt_fast_path_on_a_quantized_model_equals_its_module_path(prompt):
    """Also at one row, where plain weights would run from transposed copies: int8 weights run as themselves."""
    model = _gpt()
    float_logits = _module_path_greedy(model, prompt)[1]
    assert len(quantize_model(model)) == 2 * 6 + 1  # q, k, v, out, linear1, linear2 per layer, and lm_head
    recording = _Recording(model)
    tokens = generate(recording, prompt, max_new_tokens=NEW_TOKENS).tokens
    assert recording.fast == [True] * (NEW_TOKENS - 1)
    expected_tokens, expected_logits = _module_path_greedy(model, prompt)
    assert torch.equal(tokens, expected_tokens)
    assert_close(torch.stack(recording.logits, dim=1), expected_logits, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(expected_logits, float_logits, atol=1e-4)  # the int8 weights are what ran


# Runs on disk.


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> dict[str, Path]:
    """Each fixture run quantized into its own directory."""
    root = tmp_path_factory.mktemp("quantized")
    runs = {}
    for name in RUNS:
        runs[name] = root / name
        assert run_cli("quantize", FIXTURES / name, "--out", runs[name]).code == 0
    return runs


@pytest.mark.parametrize("name", RUNS)
def test_a_quantized_run_is_smaller_holds_int8_and_loads_quantized(quantized, name):
    out = quantized[name]
    assert (out / WEIGHTS_FILE).stat().st_size < (FIXTURES / name / WEIGHTS_FILE).stat().st_size
    record = json.loads((out / CONFIG_FILE).read_text())["quantization"]
    with safe_open(str(out / WEIGHTS_FILE), framework="pt") as f:
        for module in record["modules"]:
            assert f.get_slice(f"{module}.weight.qdata").get_dtype() == "I8"
    model = load_pretrained(out)
    assert quantization_of(model).modules == tuple(record["modules"])
    assert json.loads((out / "quantized_from.json").read_text()) == {
        "run": str(FIXTURES / name),
        "method": "dynamic-int8",
    }
    assert not (out / "results.json").exists()
    assert out.stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("name", RUNS)
def test_evaluate_predict_and_generate_take_a_quantized_run(quantized, name):
    words = {"g2p": ["cat", "dog"], "lm": ["The lord"], "classify": ["Ivanov", "Tanaka"]}[name.split("_")[0]]
    predicted = run_cli("predict", quantized[name], *words)
    assert predicted.code == 0 and len(predicted.out.splitlines()) == len(words)
    if name.startswith("lm"):
        generated = run_cli("generate", quantized[name], "--prompt", "The land", "--max-new-tokens", "5")
        assert generated.code == 0 and generated.out.startswith("The land")
    data = FIXTURES / DATA[name.split("_")[0]]
    scores = [
        json.loads(run_cli("evaluate", run, "--data", data, "--json").out) for run in (FIXTURES / name, quantized[name])
    ]
    # int8 keeps about 2.5 significant digits of each weight and input row: the tiny fixtures' metrics move a little.
    for metric, tolerance in TOLERANCES.items():
        if metric in scores[0]:
            assert abs(scores[1][metric] - scores[0][metric]) <= tolerance, (metric, scores)


def test_a_loaded_quantized_lm_generates_what_the_quantized_model_did_and_round_trips(quantized, tmp_path):
    system = load_system(quantized["lm_gpt_9a192c4"])
    model = load_pretrained(FIXTURES / "lm_gpt_9a192c4")
    quantize_model(model)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    assert torch.equal(system.model(ids).logits, model(ids).logits)  # the stored int8 data is what was quantized
    predictions = [p.lines() for p in system.predict(["the ", "a"])]
    system.save(tmp_path)
    shutil.copyfile(quantized["lm_gpt_9a192c4"] / "recipe.json", tmp_path / "recipe.json")
    again = load_system(tmp_path)
    assert torch.equal(again.model(ids).logits, model(ids).logits)
    assert [p.lines() for p in again.predict(["the ", "a"])] == predictions  # greedy decode section


def test_refusals_are_one_line(quantized, tmp_path):
    run = FIXTURES / "lm_gpt_9a192c4"
    assert_error(
        run_cli("quantize", quantized["lm_gpt_9a192c4"], "--out", tmp_path / "again"),
        f"{quantized['lm_gpt_9a192c4']}: the model is already quantized (dynamic-int8, 6 Linear layers)",
    )
    assert_error(
        run_cli("quantize", run, "--out", tmp_path / "x", "--method", "int4"),
        "unknown quantization method 'int4'; choose from dynamic-int8",
    )
    assert_error(
        run_cli("quantize", run, "--out", quantized["g2p_v0_1"]),
        f"--out {quantized['g2p_v0_1']}: already exists and is not empty; pass --overwrite to replace it",
    )
    assert_error(
        run_cli("quantize", run, "--out", FIXTURES / "g2p_v0_1", "--overwrite"),
        f"--out {FIXTURES / 'g2p_v0_1'}: holds what `seqlab train` wrote; "
        "--overwrite replaces only what `seqlab quantize` wrote",
    )
    assert_error(
        run_cli("quantize", run, "--out", FIXTURES, "--overwrite"),
        f"--out {FIXTURES}: holds {run}, an input of this command; write the output elsewhere",
    )
    assert not (tmp_path / "again").exists() and not (tmp_path / "x").exists()


def test_a_run_without_untied_linear_layers_is_refused(tmp_path):
    run = tmp_path / "tied"
    shutil.copytree(FIXTURES / "lm_lstm_word_9a192c4", run)
    model = load_pretrained(run)
    config = json.loads((run / CONFIG_FILE).read_text())
    config["config"]["tie_embeddings"] = True  # its only Linear layer, the output, becomes the embedding
    (run / CONFIG_FILE).write_text(json.dumps(config))
    tied = type(model)(type(model.config)(**config["config"]))
    tied.save_pretrained(run)
    assert_error(run_cli("quantize", run, "--out", tmp_path / "q"), f"{run}: the model has no Linear layer to quantize")


def test_overwrite_replaces_a_quantized_run(quantized, tmp_path):
    out = tmp_path / "q"
    shutil.copytree(quantized["g2p_v0_1"], out)
    assert quantize_run(FIXTURES / "lm_gpt_9a192c4", out, method="dynamic-int8", overwrite=True) == 6
    assert json.loads((out / "recipe.json").read_text())["recipe"] == "lm"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q"]  # no staging or retired directory left


def test_loading_a_quantized_run_unpickles_nothing(quantized, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a quantized run was unpickled")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert quantization_of(load_system(quantized["g2p_v0_1"]).model) is not None


def test_a_tampered_quantized_checkpoint_is_refused_in_one_line(quantized, tmp_path):
    run = tmp_path / "tampered"
    shutil.copytree(quantized["lm_gpt_9a192c4"], run)
    tensors = load_file(str(run / WEIGHTS_FILE))
    name = "decoder.layers.0.feed_forward.linear1.weight.qdata"
    tensors[name] = tensors[name].float()  # float values where the config says int8
    save_file(tensors, str(run / WEIGHTS_FILE))
    with pytest.raises(CheckpointError) as error:
        load_system(run)
    assert str(error.value) == (
        f"{run / WEIGHTS_FILE}: {name} is torch.float32 [128, 32], the config needs torch.int8 [128, 32]"
    )
