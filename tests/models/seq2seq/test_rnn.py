import copy
import itertools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.testing import assert_close

from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.models.seq2seq.rnn import EncoderOutput, RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.nn.cells import LSTMState

CELLS = ["rnn", "gru", "lstm"]
ATTENTIONS = ["additive", "dot", "scaled_dot", "bilinear", "none"]
V_SRC, V_TGT, E, H = 11, 9, 5, 6
PAD, BOS, EOS = 0, 1, 2
LENGTHS = [3, 5, 2]  # unsorted, with padding in rows 0 and 2


def make_model(cell="lstm", attention="additive", *, dtype=torch.float64, seed=0, **overrides):
    options = dict(
        embedding_size=E, hidden_size=H, cell=cell, attention=attention, encoder_layers=2, decoder_layers=2, dropout=0.0
    )
    options.update(overrides)
    torch.manual_seed(seed)
    return RNNSeq2Seq(RNNSeq2SeqConfig(V_SRC, V_TGT, **options)).to(dtype).eval()


def make_batch(lengths=LENGTHS, T=4, seed=1):
    """src (B, S) whose padded positions hold real tokens (not PAD), so nothing may read them; tgt_in (B, T)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    src = torch.randint(3, V_SRC, (len(lengths), int(lengths.max())), generator=g)
    tgt_in = torch.randint(3, V_TGT, (len(lengths), T), generator=g)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


def torch_encoder(model, src, lengths):
    """memory (B, S, C*H) and final (B, C*H) from torch.nn's layer with the encoder's weights, on packed input."""
    rnn = model.encoder.rnn.to_torch()
    packed = pack_padded_sequence(model.encoder.embedding(src), lengths, batch_first=True, enforce_sorted=False)
    out, h_n = rnn(packed)
    memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
    h_n = h_n[0] if isinstance(rnn, torch.nn.LSTM) else h_n  # (L*C, B, H)
    final = torch.cat([h_n[-2], h_n[-1]], dim=-1) if rnn.bidirectional else h_n[-1]
    return memory, final


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("cell", CELLS)
def test_encoder_matches_torch_nn_on_packed_input(cell, bidirectional):
    model = make_model(cell, bidirectional=bidirectional)
    src, lengths, _ = make_batch()
    memory, final = torch_encoder(model, src, lengths)
    encoded = model.encoder(src, lengths)
    assert isinstance(encoded, EncoderOutput)
    assert_close(encoded.memory, memory)
    assert_close(encoded.final, final)


@pytest.mark.parametrize(("cell", "attention"), list(itertools.product(CELLS, ATTENTIONS)))
def test_step_by_step_decoding_equals_teacher_forced_forward(cell, attention):
    model = make_model(cell, attention)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        expected = model(src, lengths, tgt_in).logits  # (B, T, V)
        state = model.encode(src, lengths)
        steps = []
        for t in range(tgt_in.shape[1]):
            logits, state = model.step(tgt_in[:, t], state)
            steps.append(logits)
    assert_close(torch.stack(steps, dim=1), expected)


@pytest.mark.parametrize(("cell", "attention"), list(itertools.product(CELLS, ATTENTIONS)))
def test_source_padding_changes_nothing(cell, attention):
    model = make_model(cell, attention)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        batch = model(src, lengths, tgt_in)
        for b, n in enumerate(lengths.tolist()):
            alone = model(src[b : b + 1, :n], lengths[b : b + 1], tgt_in[b : b + 1])
            assert_close(batch.logits[b], alone.logits[0])
            if attention != "none":
                assert_close(batch.attention[b, :, :n], alone.attention[0])


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_attention_weights_are_distributions_over_real_source_steps(attention):
    model = make_model("gru", attention)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        weights = model(src, lengths, tgt_in).attention
    if attention == "none":
        assert weights is None
        return
    B, T, S = tgt_in.shape[0], tgt_in.shape[1], src.shape[1]
    assert weights.shape == (B, T, S)
    assert_close(weights.sum(dim=-1), torch.ones(B, T, dtype=torch.float64))
    padded = torch.arange(S) >= lengths.unsqueeze(1)  # (B, S)
    assert torch.equal(weights.masked_select(padded.unsqueeze(1)), torch.zeros(int(padded.sum()) * T).double())
    assert (weights.masked_select(~padded.unsqueeze(1)) > 0).all()


@pytest.mark.parametrize("cell", CELLS)
def test_fixed_context_model_sees_the_source_only_through_the_final_encoder_vector(cell):
    model = make_model(cell, "none")
    src, lengths, tgt_in = make_batch()
    _, final = torch_encoder(model, src, lengths)
    with torch.no_grad():
        expected = model(src, lengths, tgt_in).logits
        assert_close(model.encode(src, lengths).context, final)
        # Any memory and mask at all: only `final` may reach the decoder.
        g = torch.Generator().manual_seed(5)
        noise = torch.randn(src.shape[0], 7, 2 * H, generator=g, dtype=torch.float64)
        state = model.decoder.init_state(EncoderOutput(noise, final), torch.ones(src.shape[0], 7, dtype=torch.bool))
        logits = model.decoder(tgt_in, state)[0].logits
    assert_close(logits, expected)


@pytest.mark.parametrize("attention", ["additive", "dot", "bilinear"])
def test_attention_models_do_read_the_memory(attention):
    """Contrast for the bottleneck test: the same perturbation changes an attention model's logits."""
    model = make_model("lstm", attention)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        expected = model(src, lengths, tgt_in).logits
        _, final = torch_encoder(model, src, lengths)
        g = torch.Generator().manual_seed(5)
        noise = torch.randn(src.shape[0], src.shape[1], 2 * H, generator=g, dtype=torch.float64)
        state = model.decoder.init_state(EncoderOutput(noise, final), model.encode(src, lengths).src_keep_mask)
        logits = model.decoder(tgt_in, state)[0].logits
    assert not torch.allclose(logits, expected)


def _lstm_step(cell, x, h, c):
    gates = cell.weight_ih @ x + cell.bias_ih + cell.weight_hh @ h + cell.bias_hh
    i, f, g, o = gates.chunk(4)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _score(model, s, m):
    """e = score(s_t, m_j) for one decoder state s (H,) and one memory vector m (C*H,), by the papers' formulas."""
    dec, name = model.decoder, model.config.attention
    if name == "additive":
        return dec.attention.v.weight[0] @ torch.tanh(
            dec.attention.query_proj.weight @ s + dec.attention.key_proj.weight @ m
        )
    if name == "bilinear":
        return s @ dec.attention.key_proj.weight @ m
    k = dec.key_projection.weight @ m  # W_k m_j: the memory (2H) is wider than the decoder (H)
    return s @ k / math.sqrt(H) if name == "scaled_dot" else s @ k


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_decoder_follows_the_module_equations(attention):
    """s_0 = tanh(W_b final + b_b) in each of L = 2 layers, c_0 = 0; s_t = LSTM(s_{t-1}, e(y_{t-1}) [; c]);
    alpha = softmax_j score(s_t, m_j) over real steps, context = sum_j alpha_j m_j (or the fixed c = final);
    h~ = tanh(W_c [s_t; context]); logits = W_y h~ + b_y. Written one row and one step at a time."""
    model = make_model("lstm", attention, decoder_layers=2)
    src, lengths, tgt_in = make_batch()
    memory, final = torch_encoder(model, src, lengths)
    dec = model.decoder
    B, T = tgt_in.shape
    logits = torch.empty(B, T, V_TGT, dtype=torch.float64)
    alphas = torch.zeros(B, T, src.shape[1], dtype=torch.float64)
    with torch.no_grad():
        for b in range(B):
            n = int(lengths[b])
            s_0 = torch.tanh(dec.bridge.weight @ final[b] + dec.bridge.bias)
            h = [s_0[:H], s_0[H:]]  # layer 0 takes the first H outputs of the bridge
            c = [torch.zeros(H, dtype=torch.float64) for _ in range(2)]
            for t in range(T):
                x = dec.embedding.weight[tgt_in[b, t]]
                if attention == "none":
                    x = torch.cat([x, final[b]])
                for layer in range(2):
                    h[layer], c[layer] = _lstm_step(dec.rnn.cells[layer], x, h[layer], c[layer])
                    x = h[layer]
                if attention == "none":
                    context = final[b]
                else:
                    e = torch.stack([_score(model, x, m) for m in memory[b, :n]])
                    alpha = torch.exp(e) / torch.exp(e).sum()
                    context = (alpha.unsqueeze(1) * memory[b, :n]).sum(dim=0)
                    alphas[b, t, :n] = alpha
                h_tilde = torch.tanh(dec.combine.weight @ torch.cat([x, context]))
                logits[b, t] = dec.output.weight @ h_tilde + dec.output.bias
        out = model(src, lengths, tgt_in)
    assert_close(out.logits, logits)
    if attention != "none":
        assert_close(out.attention, alphas)


@pytest.mark.parametrize(("cell", "attention"), list(itertools.product(CELLS, ["additive", "none"])))
def test_reorder_state_then_step_equals_step_then_reorder(cell, attention):
    model = make_model(cell, attention)
    src, lengths, tgt_in = make_batch()
    index = torch.tensor([2, 0, 2, 1])
    with torch.no_grad():
        state = model.encode(src, lengths)
        state = model.step(tgt_in[:, 0], state).state  # a state that has moved away from s_0
        reordered = model.reorder_state(state, index)
        hidden = (state.hidden.h, state.hidden.c) if cell == "lstm" else (state.hidden,)
        got = (reordered.hidden.h, reordered.hidden.c) if cell == "lstm" else (reordered.hidden,)
        for mine, theirs in zip(got, hidden, strict=True):
            assert torch.equal(mine, theirs[:, index])  # (L, B', H): rows along dim 1
        for name in ("memory", "keys", "src_keep_mask"):
            assert torch.equal(getattr(reordered, name), getattr(state, name)[index])
        if attention == "none":
            assert torch.equal(reordered.context, state.context[index])
        else:
            assert reordered.context is None

        after = model.step(tgt_in[index, 1], reordered)
        before = model.step(tgt_in[:, 1], state)
    assert_close(after.logits, before.logits[index])
    if cell == "lstm":
        assert isinstance(after.state.hidden, LSTMState)
        assert_close(after.state.hidden.c, before.state.hidden.c[:, index])
        assert_close(after.state.hidden.h, before.state.hidden.h[:, index])
    else:
        assert_close(after.state.hidden, before.state.hidden[:, index])


@pytest.fixture(scope="module", params=["additive", "none"])
def copier(request):
    """A model overfitted to copy three sources of lengths 3, 5, 2 (then EOS), so hypotheses end at different
    steps; an untrained model's EOS depends on the bias alone and every row ends at the same step."""
    model = make_model("gru", request.param).train()
    src, lengths, _ = make_batch()
    B, S = src.shape
    tgt = torch.full((B, S + 1), PAD)
    for b, n in enumerate(lengths.tolist()):
        tgt[b, :n] = 3 + src[b, :n] % (V_TGT - 3)  # a source token mapped onto a non-special target token
        tgt[b, n] = EOS
    tgt_in = torch.cat([torch.full((B, 1), BOS), tgt[:, :-1]], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these tiny ops run 10-20x slower when intra-op threads compete for busy cores
    try:
        for _ in range(30):
            optimizer.zero_grad()
            logits = model(src, lengths, tgt_in).logits
            F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD).backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval(), src, lengths


def test_beam_search_of_size_one_is_greedy_search(copier):
    model, src, lengths = copier
    start = torch.full((src.shape[0],), BOS)
    greedy = greedy_search(model, model.encode(src, lengths), start, eos_id=EOS, max_length=7)
    beam = beam_search(
        model, model.encode(src, lengths), start, eos_id=EOS, max_length=7, num_beams=1, length_penalty=0.0
    )
    assert len(set(greedy.lengths.flatten().tolist())) > 1  # rows end at different steps
    assert torch.equal(beam.tokens, greedy.tokens)
    assert torch.equal(beam.lengths, greedy.lengths)
    assert_close(beam.log_probs, greedy.log_probs)
    assert_close(beam.scores, greedy.scores)


def test_beam_hypothesis_log_prob_is_the_teacher_forced_sum(copier):
    model, src, lengths = copier
    max_length, K = 7, 3
    start = torch.full((src.shape[0],), BOS)
    out = beam_search(
        model, model.encode(src, lengths), start, eos_id=EOS, max_length=max_length, num_beams=K, num_return_sequences=K
    )
    assert out.tokens.shape[:2] == (src.shape[0], K)
    for b, k in itertools.product(range(src.shape[0]), range(K)):
        n = int(out.lengths[b, k])
        y = out.tokens[b, k, :n]
        assert (y[:-1] != EOS).all() and (y[-1] == EOS or n == max_length)
        tgt_in = torch.cat([torch.tensor([BOS]), y[:-1]]).unsqueeze(0)  # (1, n)
        with torch.no_grad():
            logits = model(src[b : b + 1, : lengths[b]], lengths[b : b + 1], tgt_in).logits[0]  # (n, V)
        expected = torch.log_softmax(logits, dim=-1).gather(1, y.unsqueeze(1)).sum()
        assert_close(out.log_probs[b, k], expected)
        assert_close(out.scores[b, k], expected / n)
    assert (out.scores[:, :-1] >= out.scores[:, 1:]).all()


# Every attention, and every cell with and without attention, without the full product.
@pytest.mark.parametrize(
    ("cell", "attention"),
    [
        ("rnn", "additive"),
        ("gru", "dot"),
        ("lstm", "scaled_dot"),
        ("gru", "bilinear"),
        ("lstm", "none"),
        ("rnn", "none"),
    ],
)
def test_one_training_step_reaches_every_parameter(cell, attention):
    model = make_model(cell, attention, dtype=torch.float32, dropout=0.1).train()
    src, lengths, tgt_in = make_batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((tgt_in.shape[0], 1), EOS)], dim=1)
    logits = model(src, lengths, tgt_in).logits
    F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_eval_disables_dropout():
    model = make_model("lstm", "additive", dropout=0.5)
    twin = make_model("lstm", "additive", dropout=0.0)
    twin.load_state_dict(model.state_dict())
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        assert_close(model(src, lengths, tgt_in).logits, twin(src, lengths, tgt_in).logits)
        model.train()
        assert not torch.allclose(model(src, lengths, tgt_in).logits, twin(src, lengths, tgt_in).logits)


def test_forward_keeps_no_hidden_state_between_calls():
    """A second call and a fresh copy of the model give the first call's outputs (nothing cached in the module)."""
    model = make_model("gru", "bilinear")
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        first = model(src, lengths, tgt_in).logits
        assert_close(model(src, lengths, tgt_in).logits, first)
        assert_close(copy.deepcopy(model)(src, lengths, tgt_in).logits, first)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"hidden_size": 0}, "hidden_size (0) must be an integer >= 1"),
        ({"embedding_size": -2}, "embedding_size (-2) must be an integer >= 1"),
        ({"encoder_layers": 0}, "encoder_layers (0) must be an integer >= 1"),
        ({"decoder_layers": 0}, "decoder_layers (0) must be an integer >= 1"),
        ({"dropout": 1.0}, "dropout (1.0) must be in [0, 1)"),
        ({"dropout": -0.1}, "dropout (-0.1) must be in [0, 1)"),
        ({"attention": "foo"}, "attention ('foo') must be one of 'additive', 'dot', 'scaled_dot', 'bilinear', 'none'"),
        ({"cell": "foo"}, "cell ('foo') must be one of 'rnn', 'gru', 'gru_textbook', 'lstm'"),
    ],
)
def test_config_validation_messages(overrides, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        RNNSeq2SeqConfig(V_SRC, V_TGT, **overrides)


def test_config_rejects_an_empty_vocabulary():
    with pytest.raises(ValueError, match=r"^tgt_vocab_size \(0\) must be an integer >= 1$"):
        RNNSeq2SeqConfig(V_SRC, 0)


@pytest.mark.parametrize("name", ["pad_id", "bos_id", "eos_id"])
def test_config_rejects_special_ids_outside_the_vocabularies(name):
    """Without this check pad_id=99 fails in nn.Embedding with an AssertionError and eos_id=9 only at decoding."""
    with pytest.raises(ValueError, match=rf"^{name} \(9\)"):
        RNNSeq2SeqConfig(V_SRC, V_TGT, **{name: V_TGT})


PLACEMENTS = ["luong_input_feeding", "bahdanau"]


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("attention", ["additive", "dot"])
def test_placements_follow_their_equations_by_hand(placement, attention):
    """luong_input_feeding: s_t = LSTM(s_{t-1}, [e(y_{t-1}); h~_{t-1}]), h~_0 = 0, attention with s_t;
    bahdanau: alpha_t = softmax_j score(s_{t-1}, m_j) with the top layer's previous h, s_t = LSTM(s_{t-1},
    [e(y_{t-1}); context_t]); both h~_t = tanh(W_c [s_t; context_t]), logits = W_y h~_t + b_y. One row and one
    step at a time, two decoder layers."""
    model = make_model("lstm", attention, decoder_layers=2, attention_placement=placement)
    src, lengths, tgt_in = make_batch()
    memory, final = torch_encoder(model, src, lengths)
    dec = model.decoder
    B, T = tgt_in.shape
    logits = torch.empty(B, T, V_TGT, dtype=torch.float64)
    alphas = torch.zeros(B, T, src.shape[1], dtype=torch.float64)

    def attend(b, n, query):
        e = torch.stack([_score(model, query, m) for m in memory[b, :n]])
        alpha = torch.exp(e) / torch.exp(e).sum()
        return (alpha.unsqueeze(1) * memory[b, :n]).sum(dim=0), alpha

    with torch.no_grad():
        for b in range(B):
            n = int(lengths[b])
            s_0 = torch.tanh(dec.bridge.weight @ final[b] + dec.bridge.bias)
            h = [s_0[:H], s_0[H:]]
            c = [torch.zeros(H, dtype=torch.float64) for _ in range(2)]
            h_tilde = torch.zeros(H, dtype=torch.float64)
            for t in range(T):
                e_t = dec.embedding.weight[tgt_in[b, t]]
                if placement == "bahdanau":
                    context, alpha = attend(b, n, h[1])  # s_{t-1}: the top layer's previous state
                    x = torch.cat([e_t, context])
                else:
                    x = torch.cat([e_t, h_tilde])
                for layer in range(2):
                    h[layer], c[layer] = _lstm_step(dec.rnn.cells[layer], x, h[layer], c[layer])
                    x = h[layer]
                if placement == "luong_input_feeding":
                    context, alpha = attend(b, n, x)
                alphas[b, t, :n] = alpha
                h_tilde = torch.tanh(dec.combine.weight @ torch.cat([x, context]))
                logits[b, t] = dec.output.weight @ h_tilde + dec.output.bias
        out = model(src, lengths, tgt_in)
    assert_close(out.logits, logits)
    assert_close(out.attention, alphas)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("cell", CELLS)
def test_placements_step_equals_forward_and_padding_changes_nothing(cell, placement):
    model = make_model(cell, "additive", attention_placement=placement)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        batch = model(src, lengths, tgt_in)
        state, steps = model.encode(src, lengths), []
        for t in range(tgt_in.shape[1]):
            logits, state = model.step(tgt_in[:, t], state)
            steps.append(logits)
        assert_close(torch.stack(steps, dim=1), batch.logits)
        for b, n in enumerate(lengths.tolist()):
            alone = model(src[b : b + 1, :n], lengths[b : b + 1], tgt_in[b : b + 1])
            assert_close(batch.logits[b], alone.logits[0])
            assert_close(batch.attention[b, :, :n], alone.attention[0])


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_placements_beam_one_equals_greedy_and_reorder_follows_rows(placement):
    model = make_model("gru", "additive", attention_placement=placement)
    src, lengths, tgt_in = make_batch()
    start = torch.full((src.shape[0],), BOS)
    with torch.no_grad():
        greedy = greedy_search(model, model.encode(src, lengths), start, eos_id=EOS, max_length=6)
        beam = beam_search(
            model, model.encode(src, lengths), start, eos_id=EOS, max_length=6, num_beams=1, length_penalty=0.0
        )
        index = torch.tensor([2, 0, 2, 1])
        state = model.step(tgt_in[:, 0], model.encode(src, lengths)).state
        after = model.step(tgt_in[index, 1], model.reorder_state(state, index))
        before = model.step(tgt_in[:, 1], state)
    assert torch.equal(beam.tokens, greedy.tokens)
    assert_close(beam.log_probs, greedy.log_probs)
    assert_close(after.logits, before.logits[index])


def test_placement_needs_attention_and_old_configs_default_to_luong():
    message = r"^attention_placement \('bahdanau'\) needs an attention; attention is 'none'$"
    with pytest.raises(ValueError, match=message):
        RNNSeq2SeqConfig(V_SRC, V_TGT, attention="none", attention_placement="bahdanau")
    with pytest.raises(ValueError, match=r"attention_placement \('cho'\) must be one of"):
        RNNSeq2SeqConfig(V_SRC, V_TGT, attention_placement="cho")
    assert RNNSeq2SeqConfig(V_SRC, V_TGT).attention_placement == "luong"
