"""Every recipe of the registry either runs in onnxruntime or refuses to: a recipe whose System takes ``backend``
has a test here or in its neighbours that runs one of its runs through its export and compares with torch
(``PROVED_BY``); every other recipe refuses ``--backend onnxruntime`` and ``seqlab export`` in one line naming it
(exit 2), before reading anything but ``recipe.json``. The lm and kuramoto-sivashinsky runs are proved here."""

import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None:
    pytest.skip("onnxruntime/onnxscript not installed (pip install -e '.[export]')", allow_module_level=True)

from cli_helpers import assert_error, run_cli

from seqlab.data.forecasting import Scaler
from seqlab.export import export_onnx
from seqlab.models.forecaster import Forecaster
from seqlab.recipes import RECIPES, kuramoto_sivashinsky, load_system
from seqlab.recipes.saved_run import save_recipe_file
from seqlab.recipes.system import SystemOptions

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
HERE = Path(__file__).parent

# The test that runs each onnxruntime recipe's System through its export against torch (file in tests/export).
PROVED_BY = {
    "bert-mlm": ("test_backends.py", "test_bert_mlm_fills_masks_through_onnxruntime_as_in_torch"),
    "chirps": ("test_backends.py", "test_chirps_denoises_through_onnxruntime_what_it_denoises_in_torch"),
    "classify": ("test_backends.py", "test_classify_predicts_and_evaluates_through_onnxruntime_what_it_does_in_torch"),
    "forecast": ("test_backends.py", "test_forecast_predicts_and_rolls_out_through_onnxruntime_what_it_does_in_torch"),
    "g2p": ("test_onnx.py", "test_predict_with_the_onnxruntime_backend_prints_what_torch_prints"),
    "kuramoto-sivashinsky": ("test_recipe_backends.py", "test_kuramoto_sivashinsky_forecasts_through_onnxruntime"),
    "lm": ("test_recipe_backends.py", "test_lm_generates_through_onnxruntime_what_it_generates_in_torch"),
    "protein": ("test_backends.py", "test_protein_fills_residues_through_onnxruntime_as_in_torch"),
    "t5-g2p": ("test_encoder_decoders.py", "test_t5_g2p_predicts_through_onnxruntime_what_it_predicts_in_torch"),
    "tagger": ("test_backends.py", "test_the_tagger_predicts_through_onnxruntime_what_it_predicts_in_torch"),
    "translate": ("test_encoder_decoders.py", "test_translate_predicts_through_onnxruntime_what_it_predicts_in_torch"),
    "vowels": ("test_backends.py", "test_vowels_classifies_through_onnxruntime_what_it_classifies_in_torch"),
}
TORCH_ONLY = sorted(name for name, recipe in RECIPES.items() if "backend" not in recipe.System.OPTIONS)


def test_every_recipe_either_runs_in_onnxruntime_with_a_proving_test_or_is_torch_only():
    onnxruntime = {name for name, recipe in RECIPES.items() if "backend" in recipe.System.OPTIONS}
    assert onnxruntime == set(PROVED_BY)
    assert set(TORCH_ONLY) == set(RECIPES) - onnxruntime
    for file, test in PROVED_BY.values():
        assert re.search(rf"^def {test}\(", (HERE / file).read_text(), re.MULTILINE), f"{file} lacks {test}"


@pytest.mark.parametrize("name", TORCH_ONLY)
def test_a_torch_only_recipe_refuses_the_backend_and_export_in_one_line(name, tmp_path):
    save_recipe_file(tmp_path, name, RECIPES[name].Config())  # nothing else: the refusal reads only recipe.json
    why = f"the {name} recipe runs in torch only (no onnxruntime backend, so no `seqlab export`)"
    assert_error(run_cli("predict", tmp_path, "x", "--backend", "onnxruntime"), f"--backend onnxruntime: {why}")
    assert_error(run_cli("export", tmp_path, "--format", "onnx"), f"{tmp_path}: {why}")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["recipe.json"]


def test_lm_generates_through_onnxruntime_what_it_generates_in_torch(tmp_path):
    run = tmp_path / "lm"
    shutil.copytree(FIXTURES / "lm_gpt_9a192c4", run)
    assert run_cli("export", run, "--format", "onnx").code == 0
    for settings in ([], ["--num-beams", "3"]):
        flags = ["--prompt", "th", "--max-new-tokens", "20", *settings]
        torch_run = run_cli("generate", run, *flags)
        onnx_run = run_cli("generate", run, *flags, "--backend", "onnxruntime")
        assert onnx_run.code == 0 and onnx_run.out == torch_run.out


def test_kuramoto_sivashinsky_forecasts_through_onnxruntime(tmp_path):
    config = kuramoto_sivashinsky.Config(
        data=kuramoto_sivashinsky.DataConfig(grid=8, input_length=6, horizon=2),
        model=kuramoto_sivashinsky.GRUArmConfig(hidden_size=4),
    )
    torch.manual_seed(0)
    model = Forecaster(config.model.model_config(channels=8, horizon=2))
    scaler = Scaler(np.linspace(-0.3, 0.4, 8), np.linspace(0.5, 2.0, 8))
    kuramoto_sivashinsky.System(model, scaler, 0.05, 1.3, config).save(tmp_path)
    save_recipe_file(tmp_path, "kuramoto-sivashinsky", config)
    export_onnx(tmp_path, tmp_path / "onnx")  # traced on windows of 4 steps; the model reads 6
    field = tmp_path.parent / "field.txt"
    rows = np.random.default_rng(9).normal(size=(9, 8))
    field.write_text("".join(" ".join(f"{v:.5f}" for v in row) + "\n" for row in rows))
    torch_system, onnx_system = load_system(tmp_path), load_system(tmp_path, SystemOptions(backend="onnxruntime"))
    (expected,), (got,) = torch_system.predict([str(field)]), onnx_system.predict([str(field)])
    np.testing.assert_allclose(got.values, expected.values, rtol=0, atol=1e-5)
    assert expected.values.shape == (2, 8)
