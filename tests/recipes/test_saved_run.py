"""A saved run's files (``seqlab.recipes.saved_run``): ``recipe.json`` written and read back as the typed config,
and the one-line errors of a bad recipe or list file."""

import dataclasses
import json
import re

import pytest

from seqlab.errors import CheckpointError
from seqlab.recipes import chirps, g2p, recipe_of_checkpoint, vowels
from seqlab.recipes.run_directory import RECIPE_FILE
from seqlab.recipes.saved_run import load_recipe_config, read_json_list, save_recipe_file
from seqlab.training.train_config import ScheduledSamplingTrainConfig, TrainConfig


def test_a_sectioned_config_round_trips_through_the_recipe_file(tmp_path):
    config = g2p.Config(
        model=g2p.TransformerConfig(d_model=8, num_heads=2, dropout=0.0),
        train=ScheduledSamplingTrainConfig(lr=1e-2, batch_size=3, max_steps=7, teacher_forcing=0.5),
        decode=g2p.DecodeConfig(num_beams=2),
    )
    save_recipe_file(tmp_path, g2p.NAME, config)
    as_json = json.loads(json.dumps(dataclasses.asdict(config)))  # tuples (train.betas) are JSON lists
    assert json.loads((tmp_path / RECIPE_FILE).read_text()) == {"recipe": "g2p", "config": as_json}
    assert load_recipe_config(tmp_path, g2p.Config) == config
    assert recipe_of_checkpoint(tmp_path) is g2p


def test_a_recipe_file_missing_a_section_is_one_line(tmp_path):
    save_recipe_file(tmp_path, vowels.NAME, vowels.Config())
    path = tmp_path / RECIPE_FILE
    saved = json.loads(path.read_text())
    del saved["config"]["model"]
    path.write_text(json.dumps(saved))
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: bad recipe config \\('model'\\)$"):
        load_recipe_config(tmp_path, vowels.Config)


def test_read_json_list_names_the_file_and_what_is_wrong(tmp_path):
    path = tmp_path / "labels.json"
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: missing$"):
        read_json_list(path, "labels")
    path.write_text("{")
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}:1: not valid JSON \\(Expecting"):
        read_json_list(path, "labels")
    for text, reason in (('{"other": []}', "'labels'"), ('{"labels": 3}', "labels is not a list")):
        path.write_text(text)
        with pytest.raises(CheckpointError) as error:
            read_json_list(path, "labels")
        message = str(error.value)
        assert message.startswith(f"{path}: bad labels file (") and reason in message and "\n" not in message
    path.write_text('{"labels": ["a", "b"]}')
    assert read_json_list(path, "labels") == ["a", "b"]


def test_tuples_saved_as_json_lists_load_as_the_tuples(tmp_path):
    config = dataclasses.replace(chirps.Config(), train=TrainConfig(betas=(0.8, 0.95)))
    config = dataclasses.replace(config, eval=chirps.EvalConfig(snrs=(3.0, 7.0)))
    save_recipe_file(tmp_path, chirps.NAME, config)
    assert '"betas": [\n' in (tmp_path / "recipe.json").read_text()
    assert load_recipe_config(tmp_path, chirps.Config) == config
