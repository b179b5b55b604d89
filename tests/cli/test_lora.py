"""``seqlab merge-lora RUN --out DIR``: the merged run is a plain run (no lora section, no adapter tensors, no
training state) whose model computes what the LoRA run's computes and generates the same text; a run without
adapters, an occupied --out and an --out inside the run are refused in one line, leaving nothing behind."""

import dataclasses
import json
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli
from faults.helpers import lm_recipe_config, train
from torch.testing import assert_close

from seqlab.models import load_pretrained
from seqlab.nn.lora import LoRALinear, lora_layers
from seqlab.recipes import load_system
from seqlab.recipes.system import GenerationRequest

WORDS = ["the", "lord", "said", "unto", "moses", "and", "aaron", "in", "the", "land", "of", "egypt"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(a plain GPT lm run, a LoRA run fine-tuned from it with adapters on every Linear of its attention)."""
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("runs")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(9)) for _ in range(200)) + "\n")
    train("lm", lm_recipe_config(corpus, "gpt", max_steps=6), root / "base")
    config = lm_recipe_config(corpus, "gpt", lora_rank=2, lora_targets="q_proj,k_proj,v_proj,out_proj", lr=0.05)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, init_from=str(root / "base")))
    train("lm", config, root / "lora")
    return root / "base", root / "lora"


@pytest.fixture(scope="module")
def merged(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "merged"
    result = run_cli("merge-lora", runs[1], "--out", out)
    assert result.code == 0, result.err
    assert result.out == f"merged the LoRA adapters of 4 layers of {runs[1]} into {out}\n"
    return out


def test_the_merged_run_is_a_plain_run_with_the_lora_run_s_files(runs, merged):
    lora = runs[1]
    config = json.loads((merged / "config.json").read_text())
    assert "lora" not in config
    assert config["config"] == json.loads((lora / "config.json").read_text())["config"]
    model = load_pretrained(merged)
    assert lora_layers(model) == {} and not any(".lora_" in name for name in model.state_dict())
    assert not (merged / "training_state.safetensors").exists()
    for name in ("recipe.json", "results.json", "metrics.jsonl", "tokenizer.json"):
        assert (merged / name).read_bytes() == (lora / name).read_bytes(), name
    assert json.loads((merged / "merged_from.json").read_text()) == {
        "run": str(lora),
        "layers": [f"decoder.layers.0.self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj", "out_proj")],
    }


def test_merged_equals_unmerged_and_generates_the_same_text(runs, merged):
    adapted, plain = load_pretrained(runs[1]), load_pretrained(merged)
    assert isinstance(adapted.decoder.layers[0].self_attn.q_proj, LoRALinear)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3, 2, 1]])
    with torch.no_grad():
        assert_close(plain(ids).logits, adapted(ids).logits, rtol=0, atol=1e-5)
        assert not torch.allclose(adapted(ids).logits, load_pretrained(runs[0])(ids).logits, atol=1e-3)
    request = GenerationRequest("the lord", max_new_tokens=12, do_sample=False)
    texts = [[c.text for c in load_system(run).generate(request)] for run in (runs[1], merged)]
    assert texts[0] == texts[1]


def test_a_run_without_adapters_is_refused(runs, merged, tmp_path):
    assert_error(
        run_cli("merge-lora", merged, "--out", tmp_path / "again"),
        f"{merged}: has no LoRA adapters to merge (its config.json has no 'lora' section)",
    )
    assert not (tmp_path / "again").exists()


def test_an_occupied_out_or_one_inside_the_run_is_refused(runs, tmp_path):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine\n")
    assert_error(
        run_cli("merge-lora", runs[1], "--out", occupied),
        f"--out {occupied}: already exists and is not empty; pass --overwrite to replace it",
    )
    assert [p.name for p in occupied.iterdir()] == ["notes.txt"]
    assert_error(
        run_cli("merge-lora", runs[1], "--out", runs[1] / "merged"),
        f"--out {runs[1] / 'merged'}: inside the run {runs[1]}; give a directory outside it",
    )
    assert_error(
        run_cli("merge-lora", tmp_path / "nothing", "--out", tmp_path / "x"),
        f"{tmp_path / 'nothing'}: no such checkpoint directory",
    )
