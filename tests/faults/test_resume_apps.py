"""Resume of the forecast and translate recipes: killed mid-run and resumed, they end with the weights, results
and metrics of an uninterrupted run (the resume machinery is tested in test_resume; this checks that these
recipes' data, shuffling and saved files are resumable)."""

import dataclasses
import json

import numpy as np
import pytest
from faults.helpers import Killed, assert_equal_tensors, kill_at_micro_batch, resume, train, train_config, weights

from seqlab.recipes import forecast, translate
from seqlab.training import Seq2SeqTrainConfig


def forecast_config(folder):
    path = folder / "series.txt"
    path.write_text("".join(f"{np.sin(i / 3):.5f} {np.cos(i / 7):.5f}\n" for i in range(160)))
    return forecast.Config(
        data=forecast.DataConfig(path=str(path), season=4, input_length=8, horizon=2),
        model=forecast.GRUArmConfig(hidden_size=8, num_layers=2, dropout=0.2),
        train=train_config(),
        eval=forecast.EvalConfig(arima=False),
    )


def translate_config(folder):
    words = ["the", "cat", "sees", "a", "big", "dog"]
    rng = np.random.default_rng(0)
    src = [" ".join(rng.choice(words, size=3)) for _ in range(60)]
    (folder / "src").write_text("".join(f"{s}\n" for s in src))
    (folder / "tgt").write_text("".join(f"{' '.join(reversed(s.split()))}\n" for s in src))
    return translate.Config(
        data=translate.DataConfig(src=str(folder / "src"), tgt=str(folder / "tgt"), bpe_size=270, test_fraction=0.1),
        model=translate.TransformerModelConfig(
            d_model=16, num_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, dropout=0.2
        ),
        train=Seq2SeqTrainConfig(**dataclasses.asdict(train_config())),
        decode=translate.DecodeConfig(num_beams=2, max_length=12),
    )


@pytest.mark.parametrize(
    ("recipe", "make_config", "kill_at"), [("forecast", forecast_config, 8), ("translate", translate_config, 11)]
)
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, recipe, make_config, kill_at):
    config = make_config(tmp_path)
    train(recipe, config, tmp_path / "whole")
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, kill_at)
        with pytest.raises(Killed):
            train(recipe, config, out)
    resume(recipe, out)
    assert_equal_tensors(weights(out), weights(tmp_path / "whole"))
    timing = {"train_seconds", "total_seconds"}
    results = [
        {k: v for k, v in json.loads((d / "results.json").read_text()).items() if k not in timing}
        for d in (out, tmp_path / "whole")
    ]
    assert results[0] == results[1]
