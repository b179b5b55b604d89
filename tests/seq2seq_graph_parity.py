"""One check shared by the export tests of encoder-decoders (the Transformer seq2seq and T5): the exported encoder,
decoder prefill and decoder steps, run by onnxruntime, against the module's own methods."""

import torch

TOLERANCE = {"rtol": 0.0, "atol": 1e-5}


def assert_graphs_match_the_module(model, onnx, src, lengths, prefix, tokens) -> None:
    """Encode ``src`` (B, S) with both, prefill ``prefix`` (B, T0), then step each of ``tokens`` for every row:
    the memory, logits and self-attention caches of the graphs within 1e-5 of the module's at every step."""
    with torch.no_grad():
        expected, state = model.encode(src, lengths), onnx.encode(src, lengths)
        assert torch.equal(state.src_keep_mask, expected.src_keep_mask)
        memory = [t for pair in expected.memory_kv for t in pair]
        for got, tensor in zip(state.memory, memory, strict=True):
            torch.testing.assert_close(got, tensor, **TOLERANCE)
        out, got = model.prefill(prefix, expected), onnx.prefill(prefix, state)
        torch.testing.assert_close(got.logits, out.logits, **TOLERANCE)
        expected, state = out.state, got.state
        for token in tokens:
            step_tokens = torch.full((prefix.shape[0],), token)
            out, got = model.step(step_tokens, expected), onnx.step(step_tokens, state)
            torch.testing.assert_close(got.logits, out.logits, **TOLERANCE)
            caches = [t for cache in out.state.caches for t in (cache.keys, cache.values)]
            for got_cache, cache in zip(got.state.caches, caches, strict=True):
                torch.testing.assert_close(got_cache, cache, **TOLERANCE)
            expected, state = out.state, got.state
        assert state.caches[0].shape[2] == prefix.shape[1] + len(tokens)
