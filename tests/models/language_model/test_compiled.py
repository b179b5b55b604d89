"""CompiledGPT and the GPT's static state: a step over static caches equals the dynamic-cache step and the full
forward; generation through the compiled step (torch.compile with tracing backends; one test with inductor) picks
the same tokens as the eager path, greedy and beam, through LoRA adapters, int8 weights, grown caches and weights
changed after compiling, with one graph for every step of a batch size."""

import pytest
import torch
from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend
from torch.testing import assert_close

from seqlab.decoding import generate
from seqlab.errors import ConfigError
from seqlab.models import CompiledGPT, RNNLanguageModel, RNNLanguageModelConfig
from seqlab.models.language_model.gpt import GPT, gpt
from seqlab.nn.lora import add_lora, lora_layers

PROMPT = torch.tensor([[0, 0, 3, 1, 4], [9, 2, 6, 5, 3]])  # row 0 left-padded
KEEP = torch.tensor([[False, False, True, True, True], [True] * 5])
NEW_TOKENS = 7


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from nothing: no graph, and no batch size marked dynamic, from another test."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def _gpt(positional: str = "learned") -> GPT:
    model = gpt(vocab_size=11, context_length=16, d_model=16, num_heads=2, num_layers=2, positional=positional)
    with torch.no_grad():  # larger than GPT-2's init, so every weight moves the logits visibly
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def _generate(model, **options) -> torch.Tensor:
    return generate(model, PROMPT, keep_mask=KEEP, max_new_tokens=NEW_TOKENS, **options).tokens


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rotary"])
@torch.no_grad()
def test_static_steps_equal_dynamic_steps_and_the_full_forward(positional):
    model = _gpt(positional).double()
    tokens = torch.randint(0, 11, (2, 4))
    _, dynamic = model.prefill(PROMPT, KEEP)
    static = model.static_state(dynamic, 12)
    assert static.keep_mask.shape == (2, 12)
    for t in range(4):
        dynamic_logits, dynamic = model.step(tokens[:, t], dynamic)
        static_logits, static = model.step(tokens[:, t], static)
        assert_close(static_logits, dynamic_logits, rtol=0, atol=1e-12)
    assert static.caches[0].length.tolist() == [9]
    full = model(torch.cat([PROMPT, tokens], dim=1), keep_mask=torch.cat([KEEP, torch.ones(2, 4, dtype=torch.bool)], 1))
    assert_close(static_logits, full.logits[:, -1], rtol=0, atol=1e-12)
    assert_close(static_logits.float(), full.logits[:, -1].float(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_compiled_greedy_and_beam_choose_the_eager_tokens_with_one_graph_per_batch_size(positional):
    model = _gpt(positional)
    counter = CompileCounter()
    compiled = CompiledGPT(model, capacity=16, compile_backend=counter)
    assert torch.equal(_generate(compiled), _generate(model))
    assert counter.frame_count == 1  # the 6 steps at B = 2: one graph
    assert torch.equal(_generate(compiled, num_beams=3), _generate(model, num_beams=3))
    assert counter.frame_count == 2  # B K = 6 rows: one more
    assert torch.equal(_generate(compiled), _generate(model))
    assert counter.frame_count == 2  # nothing recompiled


def test_compiled_steps_through_aot_autograd_equal_the_eager_logits():
    model = _gpt()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = CompiledGPT(model, capacity=16, compile_backend=counter)
    with torch.inference_mode():
        logits, state = model.prefill(PROMPT, KEEP)
        compiled_logits, compiled_state = compiled.prefill(PROMPT, KEEP)
        for _ in range(3):
            tokens = logits.argmax(dim=-1)
            logits, state = model.step(tokens, state)
            compiled_logits, compiled_state = compiled.step(tokens, compiled_state)
            assert_close(compiled_logits, logits, rtol=0, atol=1e-5)
    assert counter.frame_count == 1  # the whole step is one graph


def test_a_full_cache_doubles_and_generation_goes_on():
    model = _gpt()
    counter = CompileCounter()
    compiled = CompiledGPT(model, capacity=4, compile_backend=counter)
    with torch.inference_mode():
        _, state = compiled.prefill(PROMPT, KEEP)
    assert state.state.caches[0].capacity == 10  # room for the prompt: 2 T
    assert torch.equal(_generate(compiled), _generate(model))  # 5 + 6 steps: the buffers grew to 20
    assert counter.frame_count == 2  # one graph per capacity


def test_lora_adapters_are_traced_and_an_adapter_added_after_compiling_recompiles():
    model = _gpt()
    counter = CompileCounter()
    compiled = CompiledGPT(model, capacity=16, compile_backend=counter)
    assert torch.equal(_generate(compiled), _generate(model))
    names = [f"decoder.layers.{i}.{n}" for i in range(2) for n in ("self_attn.q_proj", "feed_forward.linear2")]
    add_lora(model, names, rank=2, alpha=4.0)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.normal_(0.0, 0.5)  # B = 0 at init: the adapters would change nothing
    adapted = _generate(model)  # the eager fast path calls the LoRA modules
    assert torch.equal(_generate(compiled), adapted)
    assert counter.frame_count == 2  # the guards on the Linear classes failed: traced again, through the adapters
    beam = _generate(CompiledGPT(model, compile_backend="eager"), num_beams=2)
    assert torch.equal(beam, _generate(model, num_beams=2))


def test_a_weight_changed_in_place_after_compiling_is_read_by_the_next_generation():
    model = _gpt()
    compiled = CompiledGPT(model, capacity=16, compile_backend="eager")
    before = _generate(compiled)
    with torch.no_grad():
        model.decoder.layers[0].feed_forward.linear1.weight.mul_(-2.0)
    after = _generate(model)
    assert not torch.equal(after, before)
    assert torch.equal(_generate(compiled), after)


def test_int8_quantized_linears_are_traced_as_the_module_path_computes_them():
    pytest.importorskip("torchao")
    from seqlab.models.quantized import quantize_linears

    model = _gpt()
    names = [name for name, m in model.named_modules() if type(m) is torch.nn.Linear]
    quantize_linears(model, names, method="dynamic-int8")
    counter = CompileCounterWithBackend("aot_eager")
    assert torch.equal(_generate(CompiledGPT(model, capacity=16, compile_backend=counter)), _generate(model))
    assert counter.frame_count == 1  # the int8 products inside the one graph, no graph break


def test_refusals_name_the_reason():
    rnn = RNNLanguageModel(RNNLanguageModelConfig(vocab_size=11, embedding_size=4, hidden_size=4))
    with pytest.raises(ConfigError, match=r"^compile applies to GPT language models, not to a RNNLanguageModel$"):
        CompiledGPT(rnn)
    with pytest.raises(ConfigError, match=r"capacity \(1\) must be an integer >= 2"):
        CompiledGPT(_gpt(), capacity=1)
    compiled = CompiledGPT(_gpt(), compile_backend=None)
    with torch.inference_mode():
        _, state = compiled.prefill(PROMPT, KEEP)
    with pytest.raises(ValueError, match=r"^a compiled GPT step decodes only: no gradients and no dropout in effect$"):
        compiled.step(PROMPT[:, -1], state)
    model = _gpt()
    with torch.no_grad():
        _, state = model.prefill(PROMPT, KEEP)
        static = model.static_state(state, 8)
    with pytest.raises(ValueError, match=r"^the state's caches are static already$"):
        model.static_state(static, 8)
    with pytest.raises(ValueError, match=r"^a static state is decoded by the fast path only"):
        model.step(PROMPT[:, -1], static)  # gradients on


@pytest.mark.slow
def test_inductor_compiled_greedy_and_beam_choose_the_eager_tokens():
    model = _gpt()
    compiled = CompiledGPT(model, capacity=16)
    assert torch.equal(_generate(compiled), _generate(model))
    assert torch.equal(_generate(compiled, num_beams=2), _generate(model, num_beams=2))
