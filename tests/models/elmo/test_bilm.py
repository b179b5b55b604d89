import pytest
import torch
import torch.nn.functional as F

from seqlab.models import ELMo, ELMoConfig, RNNLanguageModel, RNNLanguageModelConfig, load_pretrained

V, H, L = 11, 6, 2


def make_elmo(**options) -> ELMo:
    torch.manual_seed(0)
    return ELMo(ELMoConfig(vocab_size=V, hidden_size=H, num_layers=L, dropout=0.0, **options)).eval()


def language_model_with(elmo: ELMo, direction: str) -> RNNLanguageModel:
    """An RNNLanguageModel holding the embedding, one direction's LSTM layers and the softmax of ``elmo``."""
    lm = RNNLanguageModel(RNNLanguageModelConfig(vocab_size=V, embedding_size=H, hidden_size=H, num_layers=L)).eval()
    layers = elmo.forward_layers if direction == "forward" else elmo.backward_layers
    state = {"embedding.weight": elmo.embedding.weight}
    state |= {f"output.{k}": v for k, v in elmo.output.state_dict().items()}
    for j, layer in enumerate(layers):
        state |= {f"rnn.cells.{j}.{k.split('.', 2)[2]}": v for k, v in layer.state_dict().items()}
    lm.load_state_dict(state)
    return lm


def test_forward_lm_equals_the_rnn_language_model_and_its_loss():
    elmo = make_elmo(residual=False)
    x = torch.randint(0, V, (3, 7))
    lm_logits = language_model_with(elmo, "forward")(x).logits
    out = elmo(x)
    torch.testing.assert_close(out.forward_logits, lm_logits)
    expected = F.cross_entropy(lm_logits[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1))
    torch.testing.assert_close(elmo.language_model_loss(x).forward_nll, expected)


def test_backward_lm_is_the_rnn_language_model_on_the_reversed_sequence():
    elmo = make_elmo(residual=False)
    x = torch.randint(0, V, (3, 7))
    lm_logits = language_model_with(elmo, "backward")(x.flip(1)).logits.flip(1)
    torch.testing.assert_close(elmo(x).backward_logits, lm_logits)
    expected = F.cross_entropy(lm_logits[:, 1:].reshape(-1, V), x[:, :-1].reshape(-1))
    torch.testing.assert_close(elmo.language_model_loss(x).backward_nll, expected)


def test_loss_by_brute_force_per_position_softmax_under_padding():
    elmo = make_elmo()
    x = torch.randint(0, V, (2, 5))
    keep = torch.tensor([[True, True, True, False, False], [True] * 5])
    out = elmo(x, keep)
    terms_f, terms_b = [], []
    for b, n in enumerate([3, 5]):
        for t in range(n - 1):
            terms_f.append(-torch.log_softmax(out.forward_logits[b, t], -1)[x[b, t + 1]])
            terms_b.append(-torch.log_softmax(out.backward_logits[b, t + 1], -1)[x[b, t]])
    loss = elmo.language_model_loss(x, keep)
    assert loss.num_predictions == 6
    torch.testing.assert_close(loss.forward_nll, torch.stack(terms_f).mean())
    torch.testing.assert_close(loss.backward_nll, torch.stack(terms_b).mean())
    torch.testing.assert_close(loss.loss, loss.forward_nll + loss.backward_nll)


@pytest.mark.parametrize("t", [0, 3, 6])
def test_backward_sees_only_the_future_and_forward_only_the_past(t):
    elmo = make_elmo()
    x = torch.randint(0, V, (1, 7))
    changed = x.clone()
    changed[0, t] = (x[0, t] + 1) % V
    before, after = elmo.elmo_representations(x).layers, elmo.elmo_representations(changed).layers  # (L+1, 1, T, 2H)
    for j in range(1, L + 1):
        torch.testing.assert_close(after[j, 0, :t, :H], before[j, 0, :t, :H])  # forward states before t
        torch.testing.assert_close(after[j, 0, t + 1 :, H:], before[j, 0, t + 1 :, H:])  # backward states after t
        assert not torch.allclose(after[j, 0, t, :H], before[j, 0, t, :H])
        assert not torch.allclose(after[j, 0, t, H:], before[j, 0, t, H:])


def test_layer_zero_is_the_embedding_duplicated_and_padding_changes_nothing():
    elmo = make_elmo()
    x = torch.randint(0, V, (2, 6))
    keep = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])
    padded = elmo.elmo_representations(x, keep).layers
    alone = elmo.elmo_representations(x[:1, :4]).layers
    torch.testing.assert_close(padded[:, :1, :4], alone)
    assert torch.equal(padded[:, 0, 4:], torch.zeros_like(padded[:, 0, 4:]))
    e = elmo.embedding(x[1])
    torch.testing.assert_close(padded[0, 1], torch.cat([e, e], -1))
    assert padded.shape == (L + 1, 2, 6, 2 * H)


def test_residual_adds_each_upper_layer_input():
    with_residual, without = make_elmo(residual=True), make_elmo(residual=False)
    x = torch.randint(0, V, (2, 5))
    a, b = with_residual.elmo_representations(x).layers, without.elmo_representations(x).layers
    torch.testing.assert_close(a[1], b[1])
    second = with_residual.forward_layers[1](a[1][..., :H])[0]
    torch.testing.assert_close(a[2][..., :H], second + a[1][..., :H])


def test_save_and_load_pretrained_round_trip(tmp_path):
    elmo = make_elmo(tie_embeddings=True)
    assert elmo.output.weight is elmo.embedding.weight
    elmo.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    assert isinstance(loaded, ELMo)
    x = torch.randint(0, V, (2, 5))
    torch.testing.assert_close(loaded.elmo_representations(x).layers, elmo.elmo_representations(x).layers)


def test_bad_masks_are_refused():
    elmo = make_elmo()
    x = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"rows \[0\] have real tokens after padding"):
        elmo(x, torch.tensor([[False, True, True], [True, True, True]]))
    with pytest.raises(ValueError, match=r"rows \[1\] have no real token"):
        elmo(x, torch.tensor([[True, True, True], [False, False, False]]))
    with pytest.raises(ValueError, match="integer token ids"):
        elmo(x.float())
