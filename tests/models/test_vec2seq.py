"""ConditionedRNNGenerator: the class sets h_0 as the equations say, generation starts from the class's state and
agrees with a teacher-forced forward pass, and a seed reproduces the samples."""

import pytest
import torch

from seqlab.decoding import generate
from seqlab.models import ConditionedRNNGenerator, ConditionedRNNGeneratorConfig
from seqlab.nn import LSTMState

V, K, BOS, EOS = 9, 3, 1, 2


def make(cell="gru", condition="both", num_layers=2):
    torch.manual_seed(0)
    config = ConditionedRNNGeneratorConfig(
        vocab_size=V, num_classes=K, class_embedding_size=4, embedding_size=5, hidden_size=6, num_layers=num_layers,
        cell=cell, condition=condition, dropout=0.0,
    )  # fmt: skip
    return ConditionedRNNGenerator(config).eval()


@pytest.mark.parametrize("cell", ["rnn", "gru", "gru_textbook", "lstm"])
def test_initial_state_is_tanh_of_the_projected_class_vector(cell):
    model = make(cell)
    classes = torch.tensor([2, 0])
    state = model.initial_state(classes)
    h = state.h if cell == "lstm" else state
    c = model.class_embedding.weight[classes]  # (B, C)
    expected = torch.tanh(c @ model.initial.weight.T + model.initial.bias).view(2, 2, 6).transpose(0, 1)
    torch.testing.assert_close(h, expected)
    if cell == "lstm":
        assert isinstance(state, LSTMState) and not state.c.any()
    assert make(cell, condition="input").initial is None


def test_a_row_of_class_c_starts_from_class_cs_state_whatever_the_batch():
    model = make()
    bos = torch.full((3, 1), BOS)
    mixed = model.bind(torch.tensor([0, 1, 2])).prefill(bos).logits  # (3, V)
    for c in range(K):
        alone = model(torch.tensor([[BOS]]), torch.tensor([c])).logits[:, 0]
        torch.testing.assert_close(mixed[c : c + 1], alone)
    assert not torch.allclose(mixed[0], mixed[1])  # the class changes the first character's distribution


@pytest.mark.parametrize("condition", ["init", "input", "both"])
def test_sampled_log_probs_equal_a_teacher_forced_pass_and_a_seed_reproduces_them(condition):
    model = make("lstm", condition)
    classes = torch.tensor([0, 1, 2, 0, 1, 2])
    prompts = torch.full((6, 1), BOS)

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return generate(model.bind(classes), prompts, max_new_tokens=8, do_sample=True, eos_id=EOS, generator=g)

    out = run(1)
    torch.testing.assert_close(run(1).tokens, out.tokens)
    assert len(set(out.lengths.tolist())) > 1  # rows ended at different steps and left the batch
    for b in range(6):
        n = int(out.lengths[b])
        x = out.tokens[b : b + 1, : 1 + n]
        log_probs = torch.log_softmax(model(x[:, :-1], classes[b : b + 1]).logits, -1)  # (1, n, V)
        expected = log_probs[0, torch.arange(n), x[0, 1:]].sum()
        torch.testing.assert_close(out.log_probs[b], expected)


def test_bad_class_ids_are_refused():
    with pytest.raises(ValueError, match=r"class_ids must be \(1,\) ids in \[0, 3\), got \[3\]"):
        make()(torch.tensor([[BOS]]), torch.tensor([3]))
