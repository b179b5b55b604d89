"""Checkpoints written by seqlab 0.1.0 (before the model registry) still load and predict exactly as they did.

``tests/fixtures/checkpoints/`` holds two tiny g2p run directories trained by seqlab 0.1.0 on ``train.dict``
(an RNN and a Transformer seq2seq), each with the ``seqlab predict`` output that version printed for them.
"""

import contextlib
import io
from pathlib import Path

import pytest

from seqlab.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"


@pytest.mark.parametrize("name", ["g2p_v0_1", "g2p_transformer_v0_1"])
def test_v0_1_checkpoint_predicts_as_it_did(name, tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["predict", str(FIXTURES / name), "cat", "dog", "pin", "--beam-size", "2", "--nbest", "2"])
    assert code == 0
    assert out.getvalue() == (FIXTURES / name / "expected_predictions.txt").read_text()
