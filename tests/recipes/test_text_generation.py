"""recipes/common/text_generation: what streams is exactly the final text, a piece never ends inside a UTF-8
character, and an iterator's pieces are the callback's."""

import torch

from seqlab.data.tokenizers import BPETokenizer
from seqlab.models import GPT, GPTConfig
from seqlab.recipes.common.text_generation import continuation_pieces, prompt_tokens, stream_continuation

TEXT = "déjà vu, naïve café, Zürich, 東京, 🙂 " * 20


def test_byte_pieces_are_held_back_until_their_character_is_complete():
    tokenizer = BPETokenizer.train(TEXT, vocab_size=270)  # mostly single bytes: characters split across tokens
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, context_length=16, d_model=8, num_heads=2, num_layers=1))
    model.eval()
    prompt = prompt_tokens(tokenizer, "caf", context_length=16)
    settings = {"max_new_tokens": 40, "do_sample": True, "temperature": 2.0}
    pieces: list[str] = []
    text = stream_continuation(
        model, tokenizer, prompt, settings=settings, stop=None, on_text=pieces.append,
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    assert "".join(pieces) == text
    assert all(not piece.endswith("\ufffd") for piece in pieces[:-1])
    assert 5 < len(pieces) < 40  # 40 tokens: those that end inside a character were held back
    again = continuation_pieces(
        model, tokenizer, prompt, settings=settings, stop=None, generator=torch.Generator().manual_seed(1)
    )
    assert list(again) == pieces
