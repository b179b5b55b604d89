import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from seqlab.data.tokenizers import BPETokenizer, CharTokenizer, WordTokenizer, load_tokenizer
from seqlab.errors import CheckpointError, ConfigError, DataError

TRAINING_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
# Any unicode text that UTF-8 can hold (surrogate code points cannot be encoded at all).
UNICODE_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train([TRAINING_TEXT * 20, "héllo wörld 世界 🙂\n" * 5], vocab_size=300, min_frequency=2)


# ---- characters


def test_char_ids_follow_code_point_order_and_there_are_no_special_symbols():
    tokenizer = CharTokenizer.train("cab\nba")
    assert tokenizer.chars == ("\n", "a", "b", "c")
    assert tokenizer.encode("abc\n") == [1, 2, 3, 0]
    assert (tokenizer.vocab_size, tokenizer.eos_id, tokenizer.pad_id) == (4, None, None)


@settings(max_examples=60, deadline=None)
@given(st.text(st.sampled_from(sorted(set(TRAINING_TEXT))), max_size=80))
def test_char_round_trip_is_exact_for_text_of_seen_characters(text):
    tokenizer = CharTokenizer.train(TRAINING_TEXT)
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_char_unseen_characters_are_named_once_in_order_of_appearance():
    tokenizer = CharTokenizer.train("abc ")
    with pytest.raises(DataError) as error:
        tokenizer.encode("a é b ß é\n")
    assert str(error.value) == "text has characters the model never saw: 'é' 'ß' '\\n'"


def test_char_decode_refuses_ids_outside_the_vocabulary():
    with pytest.raises(DataError, match=r"token ids \[3\] are outside the vocabulary \[0, 3\)"):
        CharTokenizer.train("abc").decode([0, 3])


def test_char_tokenizer_needs_text():
    with pytest.raises(DataError, match="empty text"):
        CharTokenizer.train("")


# ---- words (PTB convention)


def test_word_cut_off_maps_rare_words_to_unk_and_ranks_by_count_then_alphabet():
    tokenizer = WordTokenizer.train("the cat sat\nthe dog sat\nthe end\n", min_count=2)
    assert tokenizer.words == ("<unk>", "<eos>", "the", "sat")
    assert (tokenizer.unk_id, tokenizer.eos_id, tokenizer.pad_id, tokenizer.vocab_size) == (0, 1, None, 4)
    # cat, dog (seen once) and bird (never seen) are <unk>; every line ends with <eos>
    assert tokenizer.encode("the cat sat\nthe bird\n") == [2, 0, 3, 1, 2, 0, 1]


def test_word_max_size_counts_the_special_symbols():
    tokenizer = WordTokenizer.train("a a a b b c\n", max_size=4)
    assert tokenizer.words == ("<unk>", "<eos>", "a", "b")
    assert tokenizer.encode("c") == [0, 1]


def test_word_eos_per_line_final_newline_and_empty_lines():
    tokenizer = WordTokenizer.train("a b\n")
    a, b, eos = 2, 3, 1
    assert tokenizer.encode("a b") == tokenizer.encode("a b\n") == [a, b, eos]
    assert tokenizer.encode("a\n\nb\n") == [a, eos, eos, b, eos]
    assert tokenizer.encode("  a \t b  \n") == [a, b, eos]


def test_word_decode_joins_with_spaces_and_turns_eos_into_newlines():
    tokenizer = WordTokenizer.train("the cat sat\non the mat\n")
    text = "the cat sat\non the mat\n\nthe mat\n"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.decode(tokenizer.encode("the  dog\tsat")) == "the <unk> sat\n"


def test_word_settings_are_validated():
    with pytest.raises(ConfigError, match=r"min_count \(0\)"):
        WordTokenizer.train("a", min_count=0)
    with pytest.raises(ConfigError, match=r"max_size \(2\)"):
        WordTokenizer.train("a", max_size=2)
    with pytest.raises(DataError, match="without words"):
        WordTokenizer.train(" \n\n")


# ---- byte-level BPE


@settings(max_examples=80, deadline=None)
@given(UNICODE_TEXT)
def test_bpe_round_trip_is_exact_for_arbitrary_unicode(bpe, text):
    assert bpe.decode(bpe.encode(text)) == text


def test_bpe_learns_merges_and_keeps_eos_special(bpe):
    assert 257 < bpe.vocab_size <= 300
    assert bpe.encode("<|endoftext|>") == [bpe.eos_id]
    assert bpe.decode([bpe.eos_id]) == "<|endoftext|>"
    assert len(bpe.encode("speak, speak")) < len(b"speak, speak")  # merges shorten frequent text
    assert bpe.pad_id is None


def test_bpe_matches_the_tokenizers_library_it_wraps(bpe):
    text = "Before we proceed, héllo 世界"
    assert bpe.encode(text) == bpe.tokenizer.encode(text).ids


def test_bpe_vocab_size_is_validated():
    with pytest.raises(ConfigError, match=r"vocab_size \(256\)"):
        BPETokenizer.train("abc", vocab_size=256)


# ---- save and load


@pytest.mark.parametrize(
    "make",
    [
        lambda: CharTokenizer.train(TRAINING_TEXT + "é"),
        lambda: WordTokenizer.train(TRAINING_TEXT, min_count=2),
        lambda: BPETokenizer.train(TRAINING_TEXT * 10, vocab_size=280),
    ],
    ids=["char", "word", "bpe"],
)
def test_save_and_load_give_an_equal_tokenizer_of_the_same_class(tmp_path, make):
    tokenizer = make()
    file = tokenizer.save(tmp_path)
    assert file == tmp_path / "tokenizer.json"
    loaded = load_tokenizer(tmp_path)
    assert type(loaded) is type(tokenizer) and loaded == tokenizer
    assert load_tokenizer(file) == tokenizer
    assert loaded.encode(TRAINING_TEXT) == tokenizer.encode(TRAINING_TEXT)
    assert (loaded.vocab_size, loaded.eos_id, loaded.pad_id) == (tokenizer.vocab_size, tokenizer.eos_id, None)


def test_bpe_file_is_the_tokenizers_library_file(tmp_path, bpe):
    bpe.save(tmp_path / "tokenizer.json")
    assert HFTokenizer.from_file(str(tmp_path / "tokenizer.json")).encode("speak").ids == bpe.encode("speak")


def test_load_refuses_missing_foreign_and_corrupt_files(tmp_path):
    with pytest.raises(CheckpointError, match="no such tokenizer file"):
        load_tokenizer(tmp_path)
    file = tmp_path / "tokenizer.json"
    file.write_text("{not json")
    with pytest.raises(CheckpointError, match=r"tokenizer.json:1: not valid JSON \(Expecting property name"):
        load_tokenizer(file)
    file.write_text(json.dumps({"vocab": {"a": 0}}))
    with pytest.raises(CheckpointError, match="not a seqlab tokenizer"):
        load_tokenizer(file)
    file.write_text(json.dumps({"seqlab_tokenizer": "char", "chars": "aa"}))
    with pytest.raises(CheckpointError, match="characters must be distinct"):
        load_tokenizer(file)
    file.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json:1: not a text file"):
        load_tokenizer(file)
    file.write_text(json.dumps({"model": {"type": "BPE", "vocab": 3}}))
    with pytest.raises(CheckpointError, match="not a valid tokenizers file"):
        load_tokenizer(file)


def test_bpe_needs_the_eos_token():
    with pytest.raises(CheckpointError, match=r"no <\|endoftext\|> token"):
        BPETokenizer(HFTokenizer(models.BPE(vocab={"a": 0}, merges=[])))
    with pytest.raises(CheckpointError, match="got a WordLevel model"):
        BPETokenizer(HFTokenizer(models.WordLevel(vocab={"a": 0}, unk_token="a")))
