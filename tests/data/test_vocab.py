import json
import re
from pathlib import Path

import pytest
import torch

from seqlab.data.vocab import Vocabulary
from seqlab.errors import CheckpointError, UnknownSymbolError


@pytest.fixture
def vocab():
    return Vocabulary.build([["HH", "AH", "L", "OW"], ["AH"], ["B", "AH", "L"]])


def test_build_puts_specials_first_and_sorts_symbols(vocab):
    assert vocab.symbols == ("<pad>", "<s>", "</s>", "AH", "B", "HH", "L", "OW")
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2)
    assert (Vocabulary.PAD, Vocabulary.BOS, Vocabulary.EOS) == ("<pad>", "<s>", "</s>")
    assert len(vocab) == 8
    assert "OW" in vocab
    assert "ZH" not in vocab


def test_build_is_independent_of_data_order_and_skips_specials():
    a = Vocabulary.build(["hello", "world"])
    b = Vocabulary.build(["dlrow", "olleh", ["</s>", "<pad>"]])
    assert a == b
    assert a.symbols[3:] == tuple("dehlorw")


def test_encode_decode_round_trip(vocab):
    ids = vocab.encode(["HH", "AH", "L", "OW"], add_bos=True, add_eos=True)
    assert ids == [1, 5, 3, 6, 7, 2]
    assert vocab.encode(["B"]) == [4]
    assert vocab.decode(ids[1:]) == ["HH", "AH", "L", "OW"]  # a search's output row: no start token
    assert vocab.decode(ids, strip_special=False) == ["<s>", "HH", "AH", "L", "OW", "</s>"]


def test_decode_stops_at_the_first_eos(vocab):
    assert vocab.decode([4, 3, 2, 6, 6, 0]) == ["B", "AH"]
    assert vocab.decode(torch.tensor([4, 3, 2, 2, 2])) == ["B", "AH"]  # rows are padded with EOS
    assert vocab.decode([2, 4]) == []
    assert vocab.decode([4, 3]) == ["B", "AH"]  # no EOS: every step counts


def test_decode_keeps_pad_and_bos_before_eos_as_visible_symbols(vocab):
    """A hypothesis with PAD or BOS inside is wrong, so they must survive decoding to be scored."""
    assert vocab.decode([4, 0, 3, 2, 0]) == ["B", "<pad>", "AH"]
    assert vocab.decode([1, 4, 3, 2]) == ["<s>", "B", "AH"]
    assert vocab.decode([0, 0, 2]) == ["<pad>", "<pad>"]


def test_repr_shows_the_size_and_the_first_twelve_symbols(vocab):
    assert repr(vocab) == "Vocabulary(8 symbols: <pad> <s> </s> AH B HH L OW)"
    assert repr(Vocabulary("abcdefghij")) == "Vocabulary(13 symbols: <pad> <s> </s> a b c d e f g h i ...)"
    assert repr(Vocabulary("abcdefghi")) == "Vocabulary(12 symbols: <pad> <s> </s> a b c d e f g h i)"


def test_decode_out_of_range(vocab):
    with pytest.raises(ValueError, match=r"^id 8 is out of range for a vocabulary of 8 symbols$"):
        vocab.decode([3, 8])
    with pytest.raises(ValueError, match=r"^id -1 is out of range for a vocabulary of 8 symbols$"):
        vocab.decode([-1])


def test_unknown_symbol(vocab):
    with pytest.raises(UnknownSymbolError) as info:
        vocab.encode(["HH", "ß"])
    assert str(info.value) == "unknown symbol 'ß' (not in the vocabulary of 8 symbols)"


@pytest.mark.parametrize(
    ("symbols", "message"),
    [
        (["a", "a"], "symbol 'a' appears twice (ids 3 and 4)"),
        (["a", "<s>"], "symbol '<s>' appears twice (ids 1 and 4)"),
        (["a", ""], "symbol '' must be a non-empty string"),
        (["a", 7], "symbol 7 must be a non-empty string"),
    ],
)
def test_constructor_rejects_bad_symbols(symbols, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Vocabulary(symbols)


def test_save_load_round_trip(tmp_path, vocab):
    path = tmp_path / "vocab.json"
    unicode_vocab = Vocabulary(["é", "ß", "'"])
    for original in (vocab, unicode_vocab):
        original.save(path)
        assert json.loads(path.read_text(encoding="utf-8")) == {"symbols": list(original.symbols)}
        loaded = Vocabulary.load(path)
        assert loaded == original
        assert loaded.encode(original.symbols[3:]) == original.encode(original.symbols[3:])
    assert vocab != unicode_vocab


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"


@pytest.mark.parametrize("name", ["g2p_v0_1/source_vocab.json", "g2p_transformer_v0_1/target_vocab.json"])
def test_save_writes_the_bytes_seqlab_0_1_wrote(tmp_path, name):
    """Vocabulary files are part of every checkpoint: re-saving one written by seqlab 0.1.0 gives it back."""
    Vocabulary.load(FIXTURES / name).save(tmp_path / "vocab.json")
    assert (tmp_path / "vocab.json").read_bytes() == (FIXTURES / name).read_bytes()


def test_save_writes_non_ascii_symbols_as_utf8(tmp_path):
    Vocabulary(["é", "ß"]).save(tmp_path / "vocab.json")
    assert (
        tmp_path / "vocab.json"
    ).read_bytes() == '{\n"symbols": [\n"<pad>",\n"<s>",\n"</s>",\n"é",\n"ß"\n]\n}\n'.encode()


def test_load_missing(tmp_path):
    path = tmp_path / "missing.json"
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: no such vocabulary file$"):
        Vocabulary.load(path)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"symbols": ["<pad>", "<s>", "</s>", 3]}', 'expected {"symbols": [strings]}'),
        ('["<pad>", "<s>", "</s>"]', 'expected {"symbols": [strings]}'),
        ('{"tokens": []}', 'expected {"symbols": [strings]}'),
        ('{"symbols": ["a", "<pad>", "<s>", "</s>"]}', "symbols must start with ['<pad>', '<s>', '</s>']"),
        ('{"symbols": ["<pad>", "<s>", "</s>", "a", "a"]}', "symbol 'a' appears twice (ids 3 and 4)"),
    ],
)
def test_load_malformed(tmp_path, content, reason):
    path = tmp_path / "vocab.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CheckpointError, match=f"^{re.escape(f'{path}: not a seqlab vocabulary file ({reason})')}$"):
        Vocabulary.load(path)


def test_load_not_json(tmp_path):
    path = tmp_path / "vocab.json"
    path.write_text("{symbols", encoding="utf-8")
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}:1: not valid JSON \\(Expecting"):
        Vocabulary.load(path)
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}:1: not a text file \\(control byte 0x00"):
        Vocabulary.load(path)
