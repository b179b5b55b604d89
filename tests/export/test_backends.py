"""``--backend onnxruntime`` for the recipes whose models are exported whole (classify, tagger, forecast, vowels,
bert-mlm, chirps, protein): an ``OnnxModel`` called as the module gives the module's output type and values
(float32, within 1e-5, on shapes other than the export's), and each system predicts through it what it predicts in
torch. Each run is exported once."""

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None:
    pytest.skip("onnxruntime/onnxscript not installed (pip install -e '.[export]')", allow_module_level=True)

from cli_helpers import assert_error, run_cli

from seqlab.data.forecasting import Scaler
from seqlab.data.tokenizers import CharTokenizer
from seqlab.data.vocab import Vocabulary
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.export import MANIFEST_FILE, OnnxModel, export_onnx, load_onnx_model
from seqlab.models import load_pretrained
from seqlab.models.bert import BertConfig, BertForMaskedLM, BertForPreTraining, BertForTokenClassification
from seqlab.models.bert.heads import MaskedLMOutput, PreTrainingOutput
from seqlab.models.classifier import ClassifierOutput, Seq2VecClassifier
from seqlab.models.denoiser import SequenceDenoiser
from seqlab.models.forecaster import Forecaster, ForecasterConfig
from seqlab.models.language_model.gpt import GPT
from seqlab.models.tagger import TaggerOutput
from seqlab.recipes import bert_mlm, chirps, forecast, load_system, protein, tagger, vowels
from seqlab.recipes.protein.config import ProteinModelConfig
from seqlab.recipes.protein.system import residue_tokenizer
from seqlab.recipes.saved_run import save_recipe_file
from seqlab.recipes.system import SystemOptions

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
TOLERANCE = {"rtol": 0.0, "atol": 1e-5}
ONNX = SystemOptions(backend="onnxruntime")
NAMES = ("Ivanov", "Tanaka", "Lindberg", "Sato", "Petrov", "Berg", "Kimura")


def _exported(run: Path) -> Path:
    export_onnx(run, run / "onnx")
    return run


@pytest.fixture(scope="module")
def classify_run(tmp_path_factory):
    """A copy of the classify fixture run (bi-LSTM over characters, max pooling), exported."""
    run = tmp_path_factory.mktemp("classify")
    shutil.copytree(FIXTURES / "classify_9a192c4", run, dirs_exist_ok=True)
    return _exported(run)


def test_the_classifier_called_through_onnxruntime_gives_the_modules_output(classify_run):
    model, onnx = load_pretrained(classify_run).eval(), load_onnx_model(classify_run)
    x = torch.randint(4, model.config.vocab_size, (3, 11), generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([11, 5, 2])  # the export traced 2 x 4
    x[torch.arange(11) >= lengths[:, None]] = 0
    with torch.no_grad():
        expected = model(x, lengths)
    got = onnx(x, lengths)
    assert isinstance(onnx, OnnxModel) and isinstance(got, ClassifierOutput) and got.attention is None
    torch.testing.assert_close(got.logits, expected.logits, **TOLERANCE)


def test_classify_predicts_and_evaluates_through_onnxruntime_what_it_does_in_torch(classify_run, tmp_path):
    torch_system, onnx_system = load_system(classify_run), load_system(classify_run, ONNX)
    expected, got = torch_system.predict(NAMES), onnx_system.predict(NAMES)
    assert [p.label for p in got] == [p.label for p in expected]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(list(a.probabilities.values()), list(b.probabilities.values()), rtol=0, atol=1e-5)
    data = tmp_path / "names.tsv"
    labels = ("russian", "japanese") * 4
    data.write_text("".join(f"{name}\t{label}\n" for name, label in zip(NAMES, labels, strict=False)))
    assert onnx_system.evaluate(str(data)) == torch_system.evaluate(str(data))
    torch_run = run_cli("predict", classify_run, *NAMES)
    onnx_run = run_cli("predict", classify_run, *NAMES, "--backend", "onnxruntime")
    assert onnx_run.code == 0 and onnx_run.out == torch_run.out


@pytest.fixture(scope="module")
def tagger_run(tmp_path_factory):
    """A tagger run of an untrained 1-layer bi-GRU over 7 phonemes (vowels AA, IY), exported."""
    run = tmp_path_factory.mktemp("tagger")
    config = tagger.Config(model=tagger.RNNTaggerConfig(cell="gru", num_layers=1, embedding_size=6, hidden_size=4))
    vocab = Vocabulary(["AA", "IY", "K", "M", "S", "T"])
    torch.manual_seed(0)
    tagger.TaggerSystem(config.model.build(len(vocab)), vocab, frozenset({"AA", "IY"})).save(run)
    save_recipe_file(run, "tagger", config)
    return _exported(run)


def test_the_tagger_called_through_onnxruntime_gives_the_modules_output(tagger_run):
    model, onnx = load_pretrained(tagger_run).eval(), load_onnx_model(tagger_run)
    x = torch.randint(3, 9, (2, 9), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([3, 9])
    x[torch.arange(9) >= lengths[:, None]] = 0
    with torch.no_grad():
        expected = model(x, lengths)
    got = onnx(x, lengths)
    assert isinstance(got, TaggerOutput) and torch.equal(got.keep_mask, expected.keep_mask)
    torch.testing.assert_close(got.logits, expected.logits, **TOLERANCE)


def test_the_tagger_predicts_through_onnxruntime_what_it_predicts_in_torch(tagger_run):
    inputs = ["K AA M IY T", "S IY", "M AA K AA S IY T AA K"]
    expected = load_system(tagger_run).predict(inputs)
    assert load_system(tagger_run, ONNX).predict(inputs) == expected
    onnx_run = run_cli("predict", tagger_run, *inputs, "--backend", "onnxruntime")
    assert onnx_run.code == 0 and onnx_run.out == run_cli("predict", tagger_run, *inputs).out


@pytest.fixture(scope="module")
def forecast_run(tmp_path_factory):
    """A forecast run of an untrained GRU forecaster (2 channels, window 12, horizon 3), exported, and a series
    file of 40 steps."""
    run = tmp_path_factory.mktemp("forecast")
    series = run.parent / "series.txt"
    t = np.arange(40)
    series.write_text("".join(f"{np.sin(i / 3):.6f}, {i / 10:.3f}\n" for i in t))
    config = forecast.Config(data=forecast.DataConfig(path=str(series), season=12, input_length=12, horizon=3))
    torch.manual_seed(0)
    model = Forecaster(ForecasterConfig(channels=2, horizon=3, hidden_size=4, num_layers=1))
    scaler = Scaler(np.array([0.1, 2.0]), np.array([0.7, 1.1]))
    forecast.System(model, scaler, np.ones(2), 12, config).save(run)
    save_recipe_file(run, "forecast", config)
    return _exported(run), series


def test_forecast_predicts_and_rolls_out_through_onnxruntime_what_it_does_in_torch(forecast_run):
    run, series = forecast_run
    torch_system, onnx_system = load_system(run), load_system(run, ONNX)
    (expected,), (got,) = torch_system.predict([str(series)]), onnx_system.predict([str(series)])
    np.testing.assert_allclose(got.values, expected.values, rtol=0, atol=1e-5)
    window = np.random.default_rng(2).normal(size=(3, 12, 2))
    np.testing.assert_allclose(
        onnx_system.forecast(window, steps=8), torch_system.forecast(window, steps=8), rtol=0, atol=1e-5
    )
    assert onnx_system.evaluate(str(series)).keys() == torch_system.evaluate(str(series)).keys()


def test_vowels_classifies_through_onnxruntime_what_it_classifies_in_torch(tmp_path):
    config = vowels.Config(model=vowels.VowelsModelConfig(hidden_size=4))
    torch.manual_seed(0)
    model = Seq2VecClassifier(config.model.model_config(input_size=3, num_classes=4))
    vowels.VowelsSystem(model, list("abcd"), np.zeros(3), np.ones(3), config).save(tmp_path)
    save_recipe_file(tmp_path, "vowels", config)
    _exported(tmp_path)
    rng = np.random.default_rng(4)
    series = [rng.normal(size=(t, 3)).astype(np.float32) for t in (9, 2, 13, 5)]  # the export traced 2 x 4
    expected = load_system(tmp_path).classify(series)
    assert load_system(tmp_path, ONNX).classify(series) == expected


def test_a_bert_head_called_through_onnxruntime_takes_the_modules_defaults(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=17, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_positions=12, num_labels=3)
    BertForTokenClassification(config).save_pretrained(tmp_path)
    model, onnx = load_pretrained(_exported(tmp_path)).eval(), load_onnx_model(tmp_path)
    ids = torch.randint(1, 17, (3, 9), generator=torch.Generator().manual_seed(3))
    keep_mask = torch.arange(9) < torch.tensor([9, 4, 6])[:, None]
    with torch.no_grad():
        for options in ({}, {"keep_mask": keep_mask}, {"keep_mask": keep_mask, "token_type_ids": keep_mask.long()}):
            expected, got = model(ids, **options), onnx(ids, **options)
            assert isinstance(got, ClassifierOutput)
            torch.testing.assert_close(got.logits, expected.logits, **TOLERANCE)


def test_classify_with_the_onnxruntime_backend_and_no_export_says_how_to_make_one(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "classify_9a192c4", run)
    assert_error(
        run_cli("predict", run, "Ivanov", "--backend", "onnxruntime"),
        f"{run / 'onnx' / MANIFEST_FILE}: missing; make the export with `seqlab export RUN --format onnx`",
    )


TEXT = "the cat sat on the mat and the dog sat on the log while the bird sang in the tree by the house"


@pytest.fixture(scope="module", params=["mlm", "nsp"])
def bert_mlm_run(request, tmp_path_factory):
    """A bert-mlm run of an untrained BERT over a WordPiece vocabulary of one sentence: the MLM head alone, or with
    NSP (``BertForPreTraining``), exported."""
    run = tmp_path_factory.mktemp(f"bert_mlm_{request.param}")
    tokenizer = WordPieceTokenizer.train(TEXT, vocab_size=40)
    nsp = request.param == "nsp"
    config = bert_mlm.Config(
        data=bert_mlm.DataConfig(context_length=32, nsp=nsp),
        model=bert_mlm.ModelConfig(d_model=8, num_heads=2, num_layers=1, d_ff=16),
    )
    torch.manual_seed(0)
    model_config = config.model.model_config(vocab_size=tokenizer.vocab_size, max_positions=32, pooler=nsp)
    model = (BertForPreTraining if nsp else BertForMaskedLM)(model_config)
    bert_mlm.System(model, tokenizer, config).save(run)
    save_recipe_file(run, "bert-mlm", config)
    return _exported(run)


def test_the_mlm_heads_called_through_onnxruntime_give_the_modules_output(bert_mlm_run):
    model, onnx = load_pretrained(bert_mlm_run).eval(), load_onnx_model(bert_mlm_run)
    ids = torch.randint(5, model.config.vocab_size, (3, 11), generator=torch.Generator().manual_seed(8))
    keep_mask = torch.arange(11) < torch.tensor([11, 5, 8])[:, None]  # the export traced 2 x 4
    with torch.no_grad():
        expected, got = model(ids, keep_mask=keep_mask), onnx(ids, keep_mask=keep_mask)
    if isinstance(model, BertForPreTraining):
        assert isinstance(got, PreTrainingOutput)
        torch.testing.assert_close(got.nsp_logits, expected.nsp_logits, **TOLERANCE)
        torch.testing.assert_close(got.mlm_logits, expected.mlm_logits, **TOLERANCE)
    else:
        assert isinstance(got, MaskedLMOutput) and got.hidden is None
        torch.testing.assert_close(got.logits, expected.logits, **TOLERANCE)


def test_bert_mlm_fills_masks_through_onnxruntime_as_in_torch(bert_mlm_run):
    inputs = ["the [MASK] sat on the mat", "[MASK] dog sat on the [MASK] by the tree"]  # 32 positions
    torch_run = run_cli("predict", bert_mlm_run, *inputs)
    onnx_run = run_cli("predict", bert_mlm_run, *inputs, "--backend", "onnxruntime")
    assert onnx_run.code == 0 and onnx_run.out == torch_run.out


@pytest.fixture(scope="module")
def chirps_run(tmp_path_factory):
    """A chirps run of an untrained 1-layer bi-GRU denoiser over frames of 8 samples (series of 64), exported,
    and a strain file of 80 samples (the export traced 2 series of 32)."""
    run = tmp_path_factory.mktemp("chirps")
    config = chirps.Config(
        data=chirps.DataConfig(samples=64, cut_time_min=0.1, cut_time_max=0.2),
        model=chirps.GRUDenoiserConfig(frame_size=8, hidden_size=4, num_layers=1),
    )
    torch.manual_seed(0)
    power = np.random.default_rng(5).uniform(0.1, 1.0, 64 // 2 + 1)
    chirps.System(SequenceDenoiser(config.model.model_config()), power, config).save(run)
    save_recipe_file(run, "chirps", config)
    strain = run.parent / "strain.txt"
    strain.write_text("".join(f"{v:.6e}\n" for v in np.random.default_rng(6).normal(0.0, 1e-21, 80)))
    return _exported(run), strain


def test_chirps_denoises_through_onnxruntime_what_it_denoises_in_torch(chirps_run):
    run, strain = chirps_run
    torch_system, onnx_system = load_system(run), load_system(run, ONNX)
    noisy = np.random.default_rng(7).normal(size=(3, 72))  # 9 frames
    np.testing.assert_allclose(onnx_system.denoise(noisy), torch_system.denoise(noisy), rtol=0, atol=1e-5)
    (expected,), (got,) = torch_system.predict([str(strain)]), onnx_system.predict([str(strain)])
    np.testing.assert_allclose(got.values, expected.values, rtol=0, atol=1e-5)


PROTEINS = "ACDEFGHIKLMNPQRSTVWY"  # the residues the tokenizers know


def _protein_run(directory, objective: str):
    """A protein run of an untrained model of the objective (a BERT for masked, a GPT for causal)."""
    tokenizer = residue_tokenizer(PROTEINS) if objective == "masked" else CharTokenizer.train(PROTEINS)
    config = protein.Config(
        model=ProteinModelConfig(objective=objective, context_length=24, d_model=8, num_heads=2, num_layers=1, d_ff=16)
    )
    torch.manual_seed(0)
    model_config = config.model.config_for(vocab_size=tokenizer.vocab_size)
    model = BertForMaskedLM(model_config) if objective == "masked" else GPT(model_config)
    protein.System(model, tokenizer, config).save(directory)
    save_recipe_file(directory, "protein", config)
    return directory


def test_protein_fills_residues_through_onnxruntime_as_in_torch(tmp_path):
    run = _exported(_protein_run(tmp_path, "masked"))
    inputs = ["MKT_YIAK_RQ", "_" * 5 + "LEERLG"]
    torch_run = run_cli("predict", run, *inputs)
    onnx_run = run_cli("predict", run, *inputs, "--backend", "onnxruntime")
    assert onnx_run.code == 0 and onnx_run.out == torch_run.out


def test_a_causal_protein_run_with_the_onnxruntime_backend_is_refused_in_one_line(tmp_path):
    run = _protein_run(tmp_path, "causal")
    assert_error(
        run_cli("predict", run, "MKTAYIAK", "--backend", "onnxruntime"),
        f"--backend onnxruntime: {run} is a causal protein run; the protein recipe runs masked "
        "(model.objective=masked) runs in onnxruntime, causal ones in torch only",
    )
