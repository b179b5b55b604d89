"""``--backend onnxruntime`` for the encoder-decoder recipes beyond g2p: T5 (``t5-g2p``), exported as encoder +
decoder prefill + step with its relative position biases computed inside the graphs, and ``translate``'s
Transformer and RNN. The graphs compute what the modules compute (float32, within 1e-5, on shapes other than the
export's and past the T5's exact relative distances), greedy and beam search through them choose the module's
tokens, and ``seqlab predict`` prints through them what it prints in torch. Each run is exported once."""

import importlib.util

import pytest
import torch

if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None:
    pytest.skip("onnxruntime/onnxscript not installed (pip install -e '.[export]')", allow_module_level=True)

from cli_helpers import run_cli
from seq2seq_graph_parity import assert_graphs_match_the_module

from seqlab.data.tokenizers import BPETokenizer
from seqlab.data.vocab import Vocabulary
from seqlab.decoding import beam_search, greedy_search
from seqlab.export import OnnxTransformerSeq2Seq, export_onnx, load_step_model, read_manifest
from seqlab.models.t5 import T5
from seqlab.recipes import t5_g2p, translate
from seqlab.recipes.common.search import SearchDecodeConfig
from seqlab.recipes.saved_run import save_recipe_file
from seqlab.recipes.translate.system import SPECIALS

LETTERS, PHONEMES = list("abcdehilnorstw"), ["AH", "EH", "HH", "L", "OW", "R", "S", "T", "W", "D"]


@pytest.fixture(scope="module")
def t5_run(tmp_path_factory):
    """A t5-g2p run of an untrained T5 v1.1 (gated GELU, untied output layer; 1 encoder and 2 decoder layers,
    relative distances exact below 2 and shared beyond 6), exported."""
    run = tmp_path_factory.mktemp("t5_g2p")
    vocab = Vocabulary([*t5_g2p.PREFIXES.values(), *LETTERS, *PHONEMES])
    model_config = t5_g2p.T5G2PModelConfig(
        d_model=16, d_kv=4, d_ff=24, num_layers=1, num_decoder_layers=2, num_heads=2, dropout=0.0,
        relative_attention_num_buckets=8, relative_attention_max_distance=6, feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    )  # fmt: skip
    config = t5_g2p.Config(model=model_config, decode=SearchDecodeConfig(num_beams=1, max_length=12))
    torch.manual_seed(0)
    t5_g2p.System(T5(model_config.model_config(vocab)), vocab, config).save(run)
    save_recipe_file(run, "t5-g2p", config)
    export_onnx(run, run / "onnx")
    return run


@pytest.fixture(scope="module")
def t5(t5_run):
    return T5.from_pretrained(t5_run).eval(), load_step_model(t5_run)


def _sources(vocab_size: int, lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids right-padded with 0 after ``lengths`` (the export traced 2 x 4), and the lengths."""
    steps = max(lengths)
    src = torch.randint(3, vocab_size, (len(lengths), steps), generator=torch.Generator().manual_seed(seed))
    lengths = torch.tensor(lengths)
    src[torch.arange(steps) >= lengths[:, None]] = 0
    return src, lengths


def test_the_t5s_prefill_is_its_steps_one_token_at_a_time(t5):
    model, _ = t5
    src, lengths = _sources(model.config.vocab_size, [6, 3], seed=1)
    prefix = torch.tensor([[0, 5, 8, 6, 9], [0, 4, 4, 9, 12]])
    with torch.no_grad():
        state = model.encode(src, lengths)
        for t in range(prefix.shape[1]):
            out = model.step(prefix[:, t], state)
            state = out.state
        prefilled = model.prefill(prefix, model.encode(src, lengths))
        torch.testing.assert_close(prefilled.logits, out.logits)
        teacher_forced = model(src, lengths, prefix).logits[:, -1]
        torch.testing.assert_close(prefilled.logits, teacher_forced)


def test_the_t5s_encoder_prefill_and_steps_match_the_module_within_1e5(t5):
    model, onnx = t5
    assert isinstance(onnx, OnnxTransformerSeq2Seq)
    src, lengths = _sources(model.config.vocab_size, [11, 2, 7], seed=2)
    prefix = torch.tensor([[0, 5, 8], [0, 4, 4], [0, 9, 3]])
    # 11 positions: past max_distance 6, into the shared bucket
    assert_graphs_match_the_module(model, onnx, src, lengths, prefix, tokens=(5, 8, 11, 3, 7, 9, 4, 10))


def test_t5_greedy_and_beam_search_through_the_graphs_choose_the_modules_tokens(t5):
    model, onnx = t5
    src, lengths = _sources(model.config.vocab_size, [9, 3, 6, 1], seed=3)
    start, eos = torch.zeros(4, dtype=torch.long), model.config.eos_id
    with torch.no_grad():
        for search, options in ((greedy_search, {}), (beam_search, {"num_beams": 3})):
            expected = search(model, model.encode(src, lengths), start, eos_id=eos, max_length=12, **options)
            got = search(onnx, onnx.encode(src, lengths), start, eos_id=eos, max_length=12, **options)
            torch.testing.assert_close(got.tokens, expected.tokens, rtol=0, atol=0)


@pytest.mark.parametrize("num_beams", ["1", "3"])
def test_t5_g2p_predicts_through_onnxruntime_what_it_predicts_in_torch(t5_run, num_beams):
    inputs = ["graphemes to phonemes: hello", "graphemes to phonemes: water", "phonemes to graphemes: HH EH L OW"]
    torch_run = run_cli("predict", t5_run, *inputs, "--num-beams", num_beams)
    onnx_run = run_cli("predict", t5_run, *inputs, "--num-beams", num_beams, "--backend", "onnxruntime")
    assert onnx_run.code == 0 and onnx_run.out == torch_run.out
    assert read_manifest(t5_run / "onnx")["model_type"] == "t5"


SENTENCES = ["the cat sees a dog", "a bird", "the small dog sees the big cat"]


TRANSLATE_MODELS = {
    "transformer": translate.TransformerModelConfig(
        d_model=16, num_heads=2, d_ff=24, encoder_layers=1, decoder_layers=1
    ),
    "rnn": translate.RNNModelConfig(embedding_size=8, hidden_size=8, encoder_layers=1, decoder_layers=1),
}


@pytest.fixture(scope="module", params=list(TRANSLATE_MODELS))
def translate_run(request, tmp_path_factory):
    """A translate run of an untrained Transformer (rotary positions, one layer each side) or RNN encoder-decoder
    (LSTM, additive attention) over a BPE tokenizer trained on a few sentences, exported."""
    run = tmp_path_factory.mktemp(f"translate_{request.param}")
    tokenizer = BPETokenizer.train(SENTENCES * 3, vocab_size=300, min_frequency=1)
    config = translate.Config(
        model=TRANSLATE_MODELS[request.param], decode=translate.DecodeConfig(num_beams=3, max_length=12)
    )
    torch.manual_seed(0)
    vocab_size = tokenizer.vocab_size + SPECIALS
    model = config.model.model_class(config.model.model_config(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size))
    if request.param == "transformer":
        with torch.no_grad():  # else the untrained model, its output tied to the embeddings, repeats BOS (printed "")
            model.tgt_embedding.weight[model.config.bos_id].mul_(0.1)
    translate.System(model, tokenizer, tokenizer, config).save(run)
    save_recipe_file(run, "translate", config)
    export_onnx(run, run / "onnx")
    return run


@pytest.mark.parametrize("num_beams", ["1", "3"])
def test_translate_predicts_through_onnxruntime_what_it_predicts_in_torch(translate_run, num_beams):
    torch_run = run_cli("predict", translate_run, *SENTENCES, "--num-beams", num_beams)
    onnx_run = run_cli("predict", translate_run, *SENTENCES, "--num-beams", num_beams, "--backend", "onnxruntime")
    assert onnx_run.code == 0 and onnx_run.out == torch_run.out
    assert len(set(torch_run.out.splitlines())) > 1  # the untrained model does not print one line for all
