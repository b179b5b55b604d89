"""teacher_forcing_loss against losses computed by hand, token by token.

The model is a fake whose logits are a parameter, so the loss and its gradient can be checked per position.
"""

from types import SimpleNamespace
from typing import NamedTuple

import pytest
import torch
from torch import nn

from seqlab.data.batching import collate_seq2seq
from seqlab.training.objectives import guided_attention_teacher_forcing_loss, mse_loss, teacher_forcing_loss

V = 8
PAD, BOS, EOS = 0, 1, 2
PAIRS = [([3, 4, 5], [3, 4, 5, 6]), ([4], [5]), ([6, 3], [6, 3, 4])]  # targets of 4, 1 and 3 tokens


class FakeOutput(NamedTuple):
    logits: torch.Tensor


class FakeModel(nn.Module):
    """Returns its own logits (B, T, V), after checking that it was called with the batch's tensors."""

    def __init__(self, logits: torch.Tensor, batch) -> None:
        super().__init__()
        self.logits = nn.Parameter(logits.clone())
        self.batch = batch

    def forward(self, src, src_lengths, tgt_in):
        assert src is self.batch.src and src_lengths is self.batch.src_lengths and tgt_in is self.batch.tgt_in
        return FakeOutput(self.logits)


def make_batch(pad_id: int = PAD):
    return collate_seq2seq(PAIRS, pad_id=pad_id, bos_id=BOS, eos_id=EOS)


def random_logits(batch, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    B, T = batch.tgt_out.shape
    return torch.randn(B, T, V, generator=generator, dtype=torch.float64)


def real_positions(batch) -> list[tuple[int, int]]:
    """(b, t) of every real target token, from the lengths alone (not from comparing with pad_id)."""
    return [(b, t) for b, n in enumerate(batch.tgt_lengths.tolist()) for t in range(n)]


def log_softmax_by_hand(row: torch.Tensor) -> torch.Tensor:
    return row - torch.log(torch.exp(row).sum())


def masked_nll_by_hand(logits, batch) -> torch.Tensor:
    positions = real_positions(batch)
    total = sum(-log_softmax_by_hand(logits[b, t])[batch.tgt_out[b, t]] for b, t in positions)
    return total / len(positions)


def smoothed_loss_by_hand(logits, batch, eps: float) -> torch.Tensor:
    """torch's form: the target distribution (1 - eps) one-hot + eps / V over all V classes, so per token
    (1 - eps) * (-log p_y) + eps * mean over the V classes of -log p_c; averaged over the real tokens."""
    positions = real_positions(batch)
    total = 0.0
    for b, t in positions:
        log_p = log_softmax_by_hand(logits[b, t])
        total = total + (1 - eps) * -log_p[batch.tgt_out[b, t]] + eps * (-log_p).sum() / V
    return total / len(positions)


def test_batch_has_padding():
    batch = make_batch()
    assert len(real_positions(batch)) < batch.tgt_out.numel()  # the tests below exercise the padding


@pytest.mark.parametrize("pad_id", [PAD, 7])  # 7: a pad id no real token uses
def test_loss_is_the_masked_token_nll(pad_id):
    batch = make_batch(pad_id)
    logits = random_logits(batch)
    result = teacher_forcing_loss(FakeModel(logits, batch), batch, pad_id=pad_id)
    torch.testing.assert_close(result.loss, masked_nll_by_hand(logits, batch))
    assert result.num_tokens == len(real_positions(batch)) == 4 + 1 + 3 + 3  # each target plus EOS


@pytest.mark.parametrize("eps", [0.1, 0.5])
def test_label_smoothed_loss_is_the_smoothed_target_cross_entropy(eps):
    batch = make_batch()
    logits = random_logits(batch)
    result = teacher_forcing_loss(FakeModel(logits, batch), batch, label_smoothing=eps)
    expected = smoothed_loss_by_hand(logits, batch, eps)
    torch.testing.assert_close(result.loss, expected)
    # The same number written as (1 - eps) * NLL + eps * (mean over real tokens of the mean over V of -log p).
    positions = real_positions(batch)
    uniform = sum(-log_softmax_by_hand(logits[b, t]).mean() for b, t in positions) / len(positions)
    torch.testing.assert_close(result.loss, (1 - eps) * masked_nll_by_hand(logits, batch) + eps * uniform)
    assert not torch.isclose(result.loss, masked_nll_by_hand(logits, batch))


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_padded_logits_change_neither_loss_nor_gradients(eps):
    batch = make_batch()
    logits = random_logits(batch)
    padded = torch.ones_like(batch.tgt_out, dtype=torch.bool)
    for b, t in real_positions(batch):
        padded[b, t] = False
    changed = logits.clone()
    changed[padded] = random_logits(batch, seed=1)[padded] * 100.0

    results, grads = [], []
    for values in (logits, changed):
        model = FakeModel(values, batch)
        result = teacher_forcing_loss(model, batch, label_smoothing=eps)
        result.loss.backward()
        results.append(result.loss.detach())
        grads.append(model.logits.grad)
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)
    assert grads[0][padded].abs().max() == 0.0
    assert grads[0][~padded].abs().min() > 0.0


def test_gradient_is_softmax_minus_target_over_the_token_count():
    """d loss / d logits[b, t] = (softmax - smoothed one-hot) / N at every real position (N real tokens)."""
    eps = 0.1
    batch = make_batch()
    logits = random_logits(batch)
    model = FakeModel(logits, batch)
    teacher_forcing_loss(model, batch, label_smoothing=eps).loss.backward()
    positions = real_positions(batch)
    for b, t in positions:
        target = torch.full((V,), eps / V, dtype=torch.float64)
        target[batch.tgt_out[b, t]] += 1 - eps
        expected = (torch.softmax(logits[b, t], dim=0) - target) / len(positions)
        torch.testing.assert_close(model.logits.grad[b, t], expected)


def test_mse_loss_is_the_mean_squared_error_counted_per_example():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0]]))
    batch = SimpleNamespace(x=torch.tensor([[3.0, 1.0], [0.0, 2.0], [1.0, 1.0]]), y=torch.tensor([[1.0], [0.0], [3.0]]))
    out = mse_loss(model, batch)  # predictions 2, -2, 0: errors 1, -2, -3
    assert out.num_tokens == 3 and out.loss.item() == pytest.approx((1 + 4 + 9) / 3)


# --- the guided attention loss (issue 25) --------------------------------------------------------------------


def tiny_transformer():
    from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig

    torch.manual_seed(0)
    config = TransformerSeq2SeqConfig(10, V, d_model=8, num_heads=2, d_ff=16, encoder_layers=1, decoder_layers=2)
    return TransformerSeq2Seq(config).double().eval()


def brute_force_penalty(weights, batch, sigma):
    """Tachibana et al. (2018), eq. 1, looped: the mean of A_nt W_nt over every real (t, n) of every head."""
    import math

    total, count = 0.0, 0
    for b in range(weights.shape[0]):
        N, T = int(batch.src_lengths[b]), int((batch.tgt_out[b] != PAD).sum())
        for h in range(weights.shape[1]):
            for t in range(T):
                for n in range(N):
                    total += weights[b, h, t, n].item() * (1 - math.exp(-((n / N - t / T) ** 2) / (2 * sigma**2)))
                    count += 1
    return total / count


@pytest.mark.parametrize(("heads", "layers"), [(None, None), (1, 1)])
def test_guided_objective_is_the_cross_entropy_plus_lambda_times_the_penalty(heads, layers):
    model, batch = tiny_transformer(), make_batch()
    got = guided_attention_teacher_forcing_loss(
        model, batch, weight=2.5, sigma=0.3, heads=heads, layers=layers, label_smoothing=0.1
    )
    plain = teacher_forcing_loss(model, batch, label_smoothing=0.1)
    with torch.no_grad():
        _, weights = model.forward_with_cross_weights(batch.src, batch.src_lengths, batch.tgt_in)
    chosen = torch.cat(weights, dim=1) if layers is None else weights[-1][:, :heads]
    assert got.num_tokens == plain.num_tokens == 11  # 8 phonemes + 3 EOS
    assert got.loss.item() == pytest.approx(plain.loss.item() + 2.5 * brute_force_penalty(chosen, batch, 0.3))


def test_guided_objective_of_weight_zero_is_teacher_forcing_exactly():
    model, batch = tiny_transformer(), make_batch()
    got = guided_attention_teacher_forcing_loss(model, batch, weight=0.0, label_smoothing=0.1)
    assert torch.equal(got.loss, teacher_forcing_loss(model, batch, label_smoothing=0.1).loss)
