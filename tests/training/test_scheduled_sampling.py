"""Scheduled sampling: the schedules against Bengio et al.'s (2015) formulas, and the loss at eps = 1 and eps = 0."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from seqlab.data.batching import collate_seq2seq
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.models.seq2seq.unroll import unroll
from seqlab.training.objectives import teacher_forcing_loss
from seqlab.training.scheduled_sampling import ScheduledSampling, TeacherForcingSchedule, scheduled_sampling_loss
from seqlab.training.train_config import ScheduledSamplingTrainConfig

PAIRS = [([3, 4, 5], [3, 4, 5, 6]), ([4], [5]), ([6, 3, 7, 8], [6, 3, 4])]
V = 9


@pytest.mark.parametrize("step", [0, 1, 10, 250, 1000])
def test_schedules_match_the_papers_formulas(step):
    linear = TeacherForcingSchedule("linear", k=1.0, c=0.001, epsilon_min=0.1)
    assert linear.probability(step) == max(0.1, 1.0 - 0.001 * step)
    assert TeacherForcingSchedule("exponential", k=0.99).probability(step) == 0.99**step
    assert TeacherForcingSchedule("inverse_sigmoid", k=100.0).probability(step) == 100.0 / (
        100.0 + math.exp(step / 100.0)
    )
    assert TeacherForcingSchedule("constant", 0.75).probability(step) == 0.75


def test_schedule_values_at_landmarks():
    assert TeacherForcingSchedule("linear", k=1.0, c=0.01).probability(50) == pytest.approx(0.5)
    assert TeacherForcingSchedule("linear", k=1.0, c=0.01, epsilon_min=0.2).probability(90) == 0.2
    assert TeacherForcingSchedule("inverse_sigmoid", k=10.0).probability(round(10 * math.log(10))) == pytest.approx(
        0.5, abs=0.01
    )
    assert TeacherForcingSchedule("inverse_sigmoid", k=10.0).probability(10**6) < 1e-300  # no OverflowError
    assert ScheduledSamplingTrainConfig().teacher_forcing_probability(12345) == 1.0


def test_linear_schedule_starts_at_its_offset_k():
    linear = TeacherForcingSchedule("linear", k=0.8, c=0.01)
    assert linear.probability(0) == 0.8
    assert linear.probability(10) == pytest.approx(0.7)


def test_the_schedule_counts_optimizer_steps_under_gradient_accumulation():
    # accumulation 2: micro-batches 0..5 are optimizer steps 0, 0, 1, 1, 2, 2, so with eps_i = 1 - 0.1 i the
    # probability of feeding the model's own token, 1 - eps, is 0, 0, .1, .1, .2, .2
    strategy = ScheduledSampling(
        TeacherForcingSchedule("linear", k=1.0, c=0.1).probability, grad_accumulation_steps=2, seed=0
    )
    seen = []

    def loss_fn(model, batch, *, teacher_forcing, generator):
        seen.append(teacher_forcing)

    for _ in range(6):
        strategy.loss(None, None, loss_fn)
    assert [1 - eps for eps in seen] == pytest.approx([0.0, 0.0, 0.1, 0.1, 0.2, 0.2])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"teacher_forcing_schedule": "cosine"}, r"teacher_forcing_schedule \('cosine'\) must be one of"),
        ({"teacher_forcing": 1.2}, r"teacher_forcing \(1.2\) must be a finite number >= 0.0 and <= 1.0"),
        ({"teacher_forcing_schedule": "exponential"}, r"schedule 'exponential' needs teacher_forcing_k"),
        ({"teacher_forcing_schedule": "linear", "teacher_forcing_k": 1.0}, r"'linear' needs teacher_forcing_c"),
        (
            {"teacher_forcing_schedule": "exponential", "teacher_forcing_k": 1.0},
            r"teacher_forcing_k \(1.0\) must be a finite number > 0.0 and < 1.0",
        ),
        (
            {"teacher_forcing_schedule": "inverse_sigmoid", "teacher_forcing_k": 0.5},
            r"teacher_forcing_k \(0.5\) must be a finite number >= 1.0",
        ),
        (
            {"teacher_forcing_schedule": "inverse_sigmoid", "teacher_forcing_k": 5.0, "teacher_forcing": 0.5},
            r"teacher_forcing \(0.5\) is the constant schedule's probability; schedule 'inverse_sigmoid' sets it",
        ),
        ({"teacher_forcing_k": 5.0}, r"teacher_forcing_k \(5.0\) is not used by teacher_forcing_schedule 'constant'"),
        (
            {"teacher_forcing_schedule": "exponential", "teacher_forcing_k": 0.9, "teacher_forcing_epsilon_min": 0.1},
            r"teacher_forcing_epsilon_min \(0.1\) is not used by teacher_forcing_schedule 'exponential'",
        ),
    ],
)
def test_train_config_validates_the_schedule(options, message):
    with pytest.raises(ValueError, match=message):
        ScheduledSamplingTrainConfig(**options)


def rnn_model():
    torch.manual_seed(0)
    config = RNNSeq2SeqConfig(V, V, embedding_size=5, hidden_size=6, dropout=0.0)
    return RNNSeq2Seq(config).double().train()


def transformer_model():
    torch.manual_seed(0)
    config = TransformerSeq2SeqConfig(V, V, d_model=8, num_heads=2, d_ff=16, dropout=0.0)
    return TransformerSeq2Seq(config).double().train()


@pytest.mark.parametrize("make", [rnn_model, transformer_model])
def test_probability_one_is_exactly_teacher_forcing(make):
    model, batch = make(), collate_seq2seq(PAIRS)
    expected = teacher_forcing_loss(model, batch)
    for two_pass in (False, True):
        got = scheduled_sampling_loss(model, batch, teacher_forcing=1.0, two_pass=two_pass)
        assert got.num_tokens == expected.num_tokens
        assert torch.equal(got.loss, expected.loss)


def test_rnn_probability_zero_trains_on_the_free_running_greedy_decode():
    """eps = 0: the loss is the cross-entropy of the gold targets under the model's own greedy prefixes."""
    model, batch = rnn_model(), collate_seq2seq(PAIRS)
    got = scheduled_sampling_loss(model, batch, teacher_forcing=0.0, two_pass=False)
    with torch.no_grad():
        free = unroll(model, model.encode(batch.src, batch.src_lengths), batch.tgt_in, teacher_forcing=0.0)
        again = model(batch.src, batch.src_lengths, free.inputs).logits  # teacher-forced on the greedy inputs
    expected = F.cross_entropy(again.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0)
    assert_close(got.loss.detach(), expected)
    assert not torch.equal(free.inputs, batch.tgt_in)
    got.loss.backward()
    assert all(p.grad is not None for p in model.decoder.parameters())


def test_transformer_probability_zero_is_the_second_pass_on_first_pass_predictions():
    model, batch = transformer_model(), collate_seq2seq(PAIRS)
    got = scheduled_sampling_loss(model, batch, teacher_forcing=0.0, two_pass=True)
    with torch.no_grad():
        first = model(batch.src, batch.src_lengths, batch.tgt_in).logits
        inputs = torch.cat([batch.tgt_in[:, :1], first[:, :-1].argmax(dim=-1)], dim=1)
        second = model(batch.src, batch.src_lengths, inputs).logits
    expected = F.cross_entropy(second.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0)
    assert_close(got.loss.detach(), expected)
