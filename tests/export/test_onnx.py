"""ONNX export and the onnxruntime backend: the exported graphs compute what the modules compute (float32, within
1e-5, on shapes other than the export's), greedy and beam decoding through them choose seqlab's tokens, and the
export directory and ``--backend onnxruntime`` keep their promises. The classifiers' and BERT's whole-model graphs
give seqlab's outputs on batches with padding. Each model is exported once per module (a dynamo
export takes seconds)."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None:
    pytest.skip("onnxruntime/onnxscript not installed (pip install -e '.[export]')", allow_module_level=True)

from cli_helpers import assert_error, run_cli
from seq2seq_graph_parity import TOLERANCE, assert_graphs_match_the_module

from seqlab.decoding import beam_search, generate, greedy_search
from seqlab.errors import CheckpointError, ConfigError
from seqlab.export import (
    MANIFEST_FILE,
    OnnxGPT,
    OnnxRNNSeq2Seq,
    OnnxTransformerSeq2Seq,
    export_onnx,
    load_step_model,
    read_manifest,
)
from seqlab.files import is_bookkeeping, output_kind
from seqlab.models import GPT, RNNSeq2Seq, TransformerSeq2Seq, load_pretrained
from seqlab.models.bert import (
    Bert,
    BertConfig,
    BertForMaskedLM,
    BertForMeanPooledClassification,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from seqlab.models.classifier import Seq2VecClassifier, Seq2VecClassifierConfig
from seqlab.models.forecaster import Forecaster, ForecasterConfig
from seqlab.models.language_model.gpt import GPTConfig
from seqlab.models.tagger import RNNSequenceTagger, RNNSequenceTaggerConfig

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"


def _exported(run: Path) -> tuple[torch.nn.Module, OnnxGPT | OnnxRNNSeq2Seq]:
    export_onnx(run, run / "onnx")
    return load_pretrained(run).eval(), load_step_model(run)


@pytest.fixture(scope="module", params=["learned", "sinusoidal", "rotary"])
def gpt(request, tmp_path_factory):
    """(GPT, its graphs under onnxruntime): the lm fixture run (learned positions), tiny sinusoidal and rotary GPTs."""
    run = tmp_path_factory.mktemp(f"gpt_{request.param}")
    if request.param == "learned":
        shutil.copytree(FIXTURES / "lm_gpt_9a192c4", run, dirs_exist_ok=True)
    else:
        torch.manual_seed(0)
        config = GPTConfig(
            vocab_size=13, context_length=24, d_model=16, num_heads=2, num_layers=2, positional=request.param
        )
        GPT(config).save_pretrained(run)
    return _exported(run)


@pytest.fixture(scope="module")
def g2p_run(tmp_path_factory):
    """A copy of the g2p fixture run (bidirectional 2-layer LSTM encoder, additive attention), exported."""
    run = tmp_path_factory.mktemp("g2p")
    shutil.copytree(FIXTURES / "g2p_v0_1", run, dirs_exist_ok=True)
    export_onnx(run, run / "onnx")
    return run


@pytest.fixture(scope="module")
def g2p(g2p_run):
    return RNNSeq2Seq.from_pretrained(g2p_run).eval(), load_step_model(g2p_run)


def _prompts(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three left-padded prompts of 6, 4 and 1 tokens (the export traced 2 x 3)."""
    ids = torch.randint(3, vocab_size, (3, 6), generator=torch.Generator().manual_seed(1))
    keep_mask = torch.arange(6) >= torch.tensor([0, 2, 5])[:, None]
    return ids, keep_mask


def test_gpt_prefill_and_steps_match_the_module_within_1e5(gpt):
    model, onnx = gpt
    ids, keep_mask = _prompts(model.config.vocab_size)
    with torch.no_grad():
        expected = model.prefill(ids, keep_mask)
        got = onnx.prefill(ids, keep_mask)
        torch.testing.assert_close(got.logits, expected.logits, **TOLERANCE)
        keys = [t for cache in expected.state.caches for t in (cache.keys, cache.values)]
        for got_cache, cache in zip(got.state.caches, keys, strict=True):
            torch.testing.assert_close(got_cache, cache, **TOLERANCE)
        expected_state, state = expected.state, got.state
        for token in (4, 7, 5, 9):
            tokens = torch.full((3,), token)
            expected = model.step(tokens, expected_state)
            got = onnx.step(tokens, state)
            torch.testing.assert_close(got.logits, expected.logits, **TOLERANCE)
            expected_state, state = expected.state, got.state
        assert state.caches[0].shape[2] == 6 + 4


@pytest.mark.parametrize("num_beams", [1, 3])
def test_gpt_decoding_through_the_graphs_chooses_the_modules_tokens(gpt, num_beams):
    model, onnx = gpt
    ids, keep_mask = _prompts(model.config.vocab_size)
    settings = {"keep_mask": keep_mask, "max_new_tokens": 12, "num_beams": num_beams}
    expected, got = generate(model, ids, **settings), generate(onnx, ids, **settings)
    torch.testing.assert_close(got.tokens, expected.tokens, rtol=0, atol=0)


def test_g2p_encoder_and_steps_match_the_module_within_1e5(g2p):
    model, onnx = g2p
    src = torch.randint(3, model.config.src_vocab_size, (3, 7), generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([7, 2, 5])
    src[1, 2:] = src[2, 5:] = model.config.pad_id
    with torch.no_grad():
        expected = model.encode(src, lengths)
        state = onnx.encode(src, lengths)
        torch.testing.assert_close(state["memory"], expected.memory, **TOLERANCE)
        torch.testing.assert_close(state["hidden.h"], expected.hidden.h, **TOLERANCE)
        torch.testing.assert_close(state["hidden.c"], expected.hidden.c, **TOLERANCE)
        for token in (model.config.bos_id, 5, 8):
            tokens = torch.full((3,), token)
            out = model.step(tokens, expected)
            got = onnx.step(tokens, state)
            torch.testing.assert_close(got.logits, out.logits, **TOLERANCE)
            expected, state = out.state, got.state


def test_g2p_greedy_and_beam_search_through_the_graphs_choose_the_modules_tokens(g2p):
    model, onnx = g2p
    src = torch.randint(3, model.config.src_vocab_size, (4, 9), generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([9, 3, 6, 1])
    bos, eos = torch.full((4,), model.config.bos_id), model.config.eos_id
    with torch.no_grad():
        for search, options in ((greedy_search, {}), (beam_search, {"num_beams": 3})):
            expected = search(model, model.encode(src, lengths), bos, eos_id=eos, max_length=10, **options)
            got = search(onnx, onnx.encode(src, lengths), bos, eos_id=eos, max_length=10, **options)
            torch.testing.assert_close(got.tokens, expected.tokens, rtol=0, atol=0)


@pytest.fixture(scope="module")
def g2p_transformer_run(tmp_path_factory):
    """A copy of the g2p Transformer fixture run (pre-LN, rotary positions, one layer each side), exported."""
    run = tmp_path_factory.mktemp("g2p_transformer")
    shutil.copytree(FIXTURES / "g2p_transformer_v0_1", run, dirs_exist_ok=True)
    export_onnx(run, run / "onnx")
    return run


@pytest.fixture(scope="module")
def g2p_transformer(g2p_transformer_run):
    return TransformerSeq2Seq.from_pretrained(g2p_transformer_run).eval(), load_step_model(g2p_transformer_run)


def _padded_sources(model, batch: int, steps: int, lengths: list[int], seed: int):
    """Source ids (batch, steps), padded after ``lengths``, and the lengths (the exports traced 2 x 4)."""
    src = torch.randint(3, model.config.src_vocab_size, (batch, steps), generator=torch.Generator().manual_seed(seed))
    lengths = torch.tensor(lengths)
    src[torch.arange(steps) >= lengths[:, None]] = model.config.pad_id
    return src, lengths


def test_the_transformer_encoder_prefill_and_steps_match_the_module_within_1e5(g2p_transformer):
    model, onnx = g2p_transformer
    assert isinstance(onnx, OnnxTransformerSeq2Seq)
    src, lengths = _padded_sources(model, 3, 7, [7, 2, 5], seed=2)
    prefix = torch.tensor([[1, 5, 8], [1, 4, 4], [1, 9, 3]])  # BOS and two forced tokens
    assert_graphs_match_the_module(model, onnx, src, lengths, prefix, tokens=(5, 8, 11))


def test_the_transformer_with_the_monotonic_alibi_bias_exports_its_positions_into_the_graphs(tmp_path):
    """Issue 25: the bias depends on the target position (the cache's length), which the graphs must carry."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "g2p_transformer_v0_1", run)
    for name, keys in (("config.json", ["config"]), ("recipe.json", ["config", "model"])):
        payload = json.loads((run / name).read_text())
        section = payload
        for key in keys:
            section = section[key]
        section.update(cross_attention_alibi=1.0, length_ratio=0.85)
        (run / name).write_text(json.dumps(payload))
    export_onnx(run, run / "onnx")
    model = TransformerSeq2Seq.from_pretrained(run).eval()
    assert model.alibi_slopes is not None
    src, lengths = _padded_sources(model, 3, 7, [7, 2, 5], seed=2)
    prefix = torch.tensor([[1, 5, 8], [1, 4, 4], [1, 9, 3]])
    assert_graphs_match_the_module(model, load_step_model(run), src, lengths, prefix, tokens=(5, 8, 11))


def test_the_models_prefill_is_its_steps_one_token_at_a_time(g2p_transformer):
    model, _ = g2p_transformer
    src, lengths = _padded_sources(model, 2, 5, [5, 3], seed=4)
    prefix = torch.tensor([[1, 5, 8, 6], [1, 4, 4, 9]])
    with torch.no_grad():
        state = model.encode(src, lengths)
        for t in range(4):
            out = model.step(prefix[:, t], state)
            state = out.state
        torch.testing.assert_close(model.prefill(prefix, model.encode(src, lengths)).logits, out.logits)


def test_transformer_greedy_and_beam_search_through_the_graphs_choose_the_modules_tokens(g2p_transformer):
    model, onnx = g2p_transformer
    src, lengths = _padded_sources(model, 4, 9, [9, 3, 6, 1], seed=3)
    bos, eos = torch.full((4,), model.config.bos_id), model.config.eos_id
    with torch.no_grad():
        for search, options in ((greedy_search, {}), (beam_search, {"num_beams": 3})):
            expected = search(model, model.encode(src, lengths), bos, eos_id=eos, max_length=12, **options)
            got = search(onnx, onnx.encode(src, lengths), bos, eos_id=eos, max_length=12, **options)
            torch.testing.assert_close(got.tokens, expected.tokens, rtol=0, atol=0)


def test_predict_on_the_transformer_g2p_with_the_onnxruntime_backend_prints_what_torch_prints(g2p_transformer_run):
    words = ("hello", "world", "testing", "a")
    torch_run = run_cli("predict", g2p_transformer_run, *words, "--num-beams", "3", "--nbest", "2")
    onnx_run = run_cli(
        "predict", g2p_transformer_run, *words, "--num-beams", "3", "--nbest", "2", "--backend", "onnxruntime"
    )
    assert onnx_run.code == 0 and onnx_run.out == torch_run.out
    manifest = read_manifest(g2p_transformer_run / "onnx")
    assert manifest["graphs"]["prefill"]["inputs"] == ["tgt_in", "src_keep_mask", "memory.0.key", "memory.0.value"]
    assert manifest["graphs"]["step"]["outputs"] == ["logits", "present.0.key", "present.0.value"]


def test_the_export_directory_has_the_graphs_a_manifest_and_the_runs_files(g2p_run):
    manifest = read_manifest(g2p_run / "onnx")
    assert manifest["model_type"] == "rnn_seq2seq"
    assert manifest["run"] == str(g2p_run.resolve())
    assert manifest["graphs"]["encoder"]["inputs"] == ["src", "src_lengths"]
    assert manifest["graphs"]["step"]["outputs"] == ["logits", "hidden.h_out", "hidden.c_out"]
    names = {path.name for path in (g2p_run / "onnx").iterdir() if not is_bookkeeping(path.name)}
    assert names == {"encoder.onnx", "step.onnx", MANIFEST_FILE, *manifest["run_files"]}
    assert output_kind(g2p_run / "onnx") == "export"
    assert {"recipe.json", "config.json", "source_vocab.json", "target_vocab.json"} <= set(manifest["run_files"])


def test_an_existing_out_is_refused_without_overwrite_and_a_non_export_even_with_it(g2p_run, tmp_path):
    with pytest.raises(
        ConfigError, match=r"^--out .*onnx: already exists and is not empty; pass --overwrite to replace it$"
    ):
        export_onnx(g2p_run, g2p_run / "onnx")
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(
        ConfigError,
        match=r"^--out .*notes.*: not a seqlab output .*; --overwrite replaces only what `seqlab export` wrote$",
    ):
        export_onnx(g2p_run, other, overwrite=True)
    assert (other / "keep.txt").read_text() == "mine"


def test_a_model_without_graphs_is_refused_naming_those_that_have_them(tmp_path):
    run = FIXTURES / "lm_lstm_word_9a192c4"
    exported = (
        "bert, bert_mean_pooled_classification, bert_mlm, bert_pretraining, bert_sequence_classification, "
        "bert_token_classification, forecaster, gpt, rnn_seq2seq, rnn_sequence_tagger, seq2vec_classifier, "
        "sequence_denoiser, t5, transformer_seq2seq"
    )
    with pytest.raises(
        ConfigError, match=rf"a rnn_language_model model cannot be exported yet; exported types: {exported}$"
    ):
        export_onnx(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_export_of_other_weights_is_refused(g2p_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(g2p_run, run)
    model = RNNSeq2Seq.from_pretrained(run)
    with torch.no_grad():
        model.decoder.output.bias.add_(1.0)
    model.save_pretrained(run)
    with pytest.raises(CheckpointError, match=r"exported from other weights than .*; make it afresh with"):
        load_step_model(run)


def test_predict_with_the_onnxruntime_backend_prints_what_torch_prints(g2p_run):
    words = ("hello", "world", "testing")
    torch_run = run_cli("predict", g2p_run, *words, "--num-beams", "3", "--nbest", "2")
    onnx_run = run_cli("predict", g2p_run, *words, "--num-beams", "3", "--nbest", "2", "--backend", "onnxruntime")
    assert onnx_run.code == 0 and onnx_run.out == torch_run.out


def test_the_onnxruntime_backend_without_an_export_says_how_to_make_one(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "lm_gpt_9a192c4", run)
    assert_error(
        run_cli("generate", run, "--prompt", "th", "--backend", "onnxruntime"),
        f"{run / 'onnx' / MANIFEST_FILE}: missing; make the export with `seqlab export RUN --format onnx`",
    )


def _session(run: Path):
    """The ``model`` graph of ``run``'s export under onnxruntime, and its input names."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(run / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    return session, [node.name for node in session.get_inputs()]


CLASSIFIERS = {
    "gru_attention": {"vocab_size": 11, "embedding_size": 6, "cell": "gru", "num_layers": 2, "pooling": "attention"},
    "gru_last_features": {"input_size": 5, "cell": "gru", "pooling": "last"},
    "lstm_mean": {"vocab_size": 11, "embedding_size": 6, "cell": "lstm", "bidirectional": False, "pooling": "mean"},
}


@pytest.fixture(scope="module", params=["fixture", *CLASSIFIERS])
def classifier(request, tmp_path_factory):
    """(Seq2VecClassifier, its run, exported): the classify fixture run (bi-LSTM, max pooling) and tiny bi-GRUs with
    attention pooling (2 layers, token input) and last pooling (continuous input), and a unidirectional LSTM."""
    run = tmp_path_factory.mktemp(f"classifier_{request.param}")
    if request.param == "fixture":
        shutil.copytree(FIXTURES / "classify_9a192c4", run, dirs_exist_ok=True)
    else:
        torch.manual_seed(0)
        config = Seq2VecClassifierConfig(num_classes=3, hidden_size=4, **CLASSIFIERS[request.param])
        Seq2VecClassifier(config).save_pretrained(run)
    export_onnx(run, run / "onnx")
    return load_pretrained(run).eval(), run


def test_the_classifiers_graph_matches_the_module_within_1e5_on_a_padded_batch(classifier):
    model, run = classifier
    session, names = _session(run)
    generator = torch.Generator().manual_seed(4)
    lengths = torch.tensor([9, 2, 6, 1, 9])  # the export traced 2 x 4
    if model.config.token_input:
        x = torch.randint(1, model.config.vocab_size, (5, 9), generator=generator)
        x[torch.arange(9) >= lengths[:, None]] = 0
    else:
        x = torch.randn(5, 9, model.config.input_size, generator=generator)
    with torch.no_grad():
        expected = model(x, lengths)
    got = session.run(None, dict(zip(names, (x.numpy(), lengths.numpy()), strict=True)))
    assert names == ["input_ids" if model.config.token_input else "features", "lengths"]
    torch.testing.assert_close(torch.from_numpy(got[0]), expected.logits, **TOLERANCE)
    if expected.attention is None:
        assert len(got) == 1
    else:
        torch.testing.assert_close(torch.from_numpy(got[1]), expected.attention, **TOLERANCE)


BERTS = {
    "bert": Bert,
    "bert_no_pooler": Bert,
    "sequence": BertForSequenceClassification,
    "mean_pooled": BertForMeanPooledClassification,
    "token": BertForTokenClassification,
    "mlm": BertForMaskedLM,
    "pretraining": BertForPreTraining,
}


@pytest.fixture(scope="module", params=list(BERTS))
def bert(request, tmp_path_factory):
    """(a tiny BERT body or classification head, its run, exported)."""
    run = tmp_path_factory.mktemp(f"bert_{request.param}")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=17, d_model=8, num_heads=2, num_layers=2, d_ff=16, max_positions=12, num_labels=3,
        pooler=request.param not in ("bert_no_pooler", "mean_pooled"),
    )  # fmt: skip
    BERTS[request.param](config).save_pretrained(run)
    export_onnx(run, run / "onnx")
    return load_pretrained(run).eval(), run


@pytest.mark.parametrize("padded", [True, False])
def test_berts_graph_matches_the_module_within_1e5(bert, padded):
    model, run = bert
    session, names = _session(run)
    assert names == ["input_ids", "keep_mask", "token_type_ids"]
    lengths = torch.tensor([7, 3, 12] if padded else [12, 12, 12])  # the export traced 2 x 4; 12 = max_positions
    keep_mask = torch.arange(12) < lengths[:, None]
    ids = torch.randint(1, 17, (3, 12), generator=torch.Generator().manual_seed(5)).masked_fill(~keep_mask, 0)
    token_type_ids = (torch.arange(12) >= 2).long().expand(3, 12) * keep_mask
    with torch.no_grad():
        expected = model(ids, keep_mask=keep_mask, token_type_ids=token_type_ids)
    got = session.run(None, {"input_ids": ids.numpy(), "keep_mask": keep_mask.numpy(),
                             "token_type_ids": token_type_ids.numpy()})  # fmt: skip
    if isinstance(model, Bert):
        wanted = [expected.last_hidden_state] + ([] if expected.pooled is None else [expected.pooled])
    elif isinstance(model, BertForPreTraining):
        wanted = [expected.mlm_logits, expected.nsp_logits]
    else:
        wanted = [expected.logits]
    assert len(got) == len(wanted)
    for array, tensor in zip(got, wanted, strict=True):
        torch.testing.assert_close(torch.from_numpy(array), tensor, **TOLERANCE)


TAGGERS = {"bilstm": {"cell": "lstm"}, "gru_residual": {"cell": "gru", "num_layers": 2, "residual": True}}


@pytest.fixture(scope="module", params=list(TAGGERS))
def tagger(request, tmp_path_factory):
    """(a tiny sequence tagger, its run, exported): a bi-LSTM and a 2-layer residual bi-GRU."""
    run = tmp_path_factory.mktemp(f"tagger_{request.param}")
    torch.manual_seed(0)
    config = RNNSequenceTaggerConfig(
        vocab_size=11, num_labels=4, embedding_size=6, hidden_size=4, **TAGGERS[request.param]
    )
    RNNSequenceTagger(config).save_pretrained(run)
    export_onnx(run, run / "onnx")
    return load_pretrained(run).eval(), run


def test_the_taggers_graph_matches_the_module_within_1e5_on_a_padded_batch(tagger):
    model, run = tagger
    session, names = _session(run)
    assert names == ["input_ids", "lengths"]
    lengths = torch.tensor([2, 8, 5])  # the export traced 2 x 4
    x = torch.randint(1, 11, (3, 8), generator=torch.Generator().manual_seed(6))
    x[torch.arange(8) >= lengths[:, None]] = 0
    with torch.no_grad():
        expected = model(x, lengths)
    logits, keep_mask = session.run(None, {"input_ids": x.numpy(), "lengths": lengths.numpy()})
    torch.testing.assert_close(torch.from_numpy(logits), expected.logits, **TOLERANCE)
    assert torch.equal(torch.from_numpy(keep_mask), expected.keep_mask)


FORECASTERS = {
    "gru_direct": {"encoder": "gru"},
    "gru_textbook_direct": {"encoder": "gru_textbook"},  # two views of W_hh enter the exported scan
    "lstm_autoregressive_residual": {"encoder": "lstm", "head": "autoregressive", "residual": True},
    "transformer_direct": {"encoder": "transformer"},
    "transformer_autoregressive": {"encoder": "transformer", "head": "autoregressive"},
    "tcn_direct": {"encoder": "tcn", "num_levels": 2},
}


@pytest.fixture(scope="module", params=list(FORECASTERS))
def forecaster(request, tmp_path_factory):
    """(a tiny forecaster, its run, exported), recurrent and Transformer encoders, direct and autoregressive heads."""
    run = tmp_path_factory.mktemp(f"forecaster_{request.param}")
    torch.manual_seed(0)
    config = ForecasterConfig(
        channels=2, horizon=3, hidden_size=4, num_layers=2, d_model=8, num_heads=2, d_ff=16, max_length=16,
        **FORECASTERS[request.param],
    )  # fmt: skip
    Forecaster(config).save_pretrained(run)
    export_onnx(run, run / "onnx")
    return load_pretrained(run).eval(), run


def test_a_forecaster_with_the_ssm_encoder_is_refused_in_one_line_and_writes_nothing(tmp_path):
    Forecaster(ForecasterConfig(channels=1, horizon=2, encoder="ssm", d_model=4, state_size=4)).save_pretrained(
        tmp_path
    )
    with pytest.raises(ConfigError) as error:
        export_onnx(tmp_path, tmp_path / "onnx")
    assert str(error.value) == "a forecaster with the ssm encoder cannot be exported yet: ONNX has no complex numbers"
    assert not (tmp_path / "onnx").exists()


def test_the_forecasters_graph_matches_the_module_within_1e5(forecaster):
    model, run = forecaster
    session, names = _session(run)
    assert names == ["window"]
    window = torch.randn(3, 9, 2, generator=torch.Generator().manual_seed(7))  # the export traced 2 x 4
    with torch.no_grad():
        expected = model(window)
    (got,) = session.run(None, {"window": window.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), expected, **TOLERANCE)
