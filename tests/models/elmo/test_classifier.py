import torch

from seqlab.models import ELMo, ELMoClassifier, ELMoClassifierConfig, load_pretrained


def make_classifier(**options) -> ELMoClassifier:
    torch.manual_seed(0)
    config = ELMoClassifierConfig(
        vocab_size=9, num_classes=3, elmo_hidden_size=4, elmo_num_layers=2, hidden_size=5, dropout=0.0, **options
    )
    return ELMoClassifier(config).eval()


def test_frozen_elmo_gets_no_gradient_while_the_mix_and_classifier_do():
    model = make_classifier().train()
    x = torch.randint(0, 9, (2, 5))
    model(x, torch.tensor([5, 3])).logits.sum().backward()
    assert all(p.grad is None and not p.requires_grad for p in model.elmo.parameters())
    assert model.mix.scalars.grad is not None and model.mix.gamma.grad is not None
    assert all(p.grad is not None for p in model.classifier.parameters())


def test_unfrozen_elmo_is_fine_tuned():
    model = make_classifier(freeze_elmo=False).train()
    model(torch.randint(0, 9, (2, 5))).logits.sum().backward()
    assert model.elmo.embedding.weight.grad is not None


def test_logits_are_the_classifier_on_the_mixed_representations_and_padding_changes_nothing():
    model = make_classifier()
    x = torch.randint(0, 9, (2, 6))
    logits = model(x, torch.tensor([4, 6])).logits
    layers = model.elmo.elmo_representations(x[:1, :4]).layers
    torch.testing.assert_close(logits[:1], model.classifier(model.mix(layers)).logits)


def test_biLM_weights_load_into_the_classifier_by_name(tmp_path):
    model = make_classifier()
    torch.manual_seed(1)
    elmo = ELMo(model.config.elmo_config())
    model.elmo.load_state_dict(elmo.state_dict())
    model.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    x = torch.randint(0, 9, (2, 5))
    torch.testing.assert_close(loaded(x).logits, model(x).logits)
    torch.testing.assert_close(loaded.elmo.embedding.weight, elmo.embedding.weight)


def test_a_token_embedding_beside_elmo_is_read_concatenated_and_learns_while_the_biLM_stays_frozen():
    model = make_classifier(embedding_size=3)
    x = torch.randint(0, 9, (2, 6))
    logits = model(x, torch.tensor([4, 6])).logits
    layers = model.elmo.elmo_representations(x[:1, :4]).layers  # (L+1, 1, 4, 2H)
    features = torch.cat([model.embedding(x[:1, :4]), model.mix(layers)], dim=-1)  # [x_t; ELMo_t]
    torch.testing.assert_close(logits[:1], model.classifier(features).logits)
    model.train()
    model(x).logits.sum().backward()
    assert model.embedding.weight.grad is not None and all(p.grad is None for p in model.elmo.parameters())
    assert model.classifier.rnn.input_size == 3 + 8


def test_without_a_token_embedding_the_classifier_has_none():
    assert make_classifier().embedding is None
    assert not any(name.startswith("embedding.") for name in make_classifier().state_dict())
