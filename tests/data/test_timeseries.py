"""Time-series classification data: reading ``.ts`` files through aeon, channel statistics and padded batches.

Small ``.ts`` files are written here with known numbers; the bundled Japanese Vowels files are also parsed by hand
(independently of aeon) and compared with what seqlab reads.
"""

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from seqlab.config import load_toml
from seqlab.data.timeseries import (
    AEON_HINT,
    channel_statistics,
    japanese_vowels_paths,
    read_ts_file,
    series_batches,
)
from seqlab.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[2]


def write_ts(
    path: Path,
    series: list[list[list[str]]],
    labels: list[str],
    *,
    header: dict[str, str] | None = None,
) -> Path:
    """A .ts file with one line per series: channels (each a list of value strings) joined by ':', then the label."""
    dims = len(series[0])
    equal = len({len(channel) for s in series for channel in s}) == 1
    meta = {
        "problemName": "toy",
        "timeStamps": "false",
        "missing": "false",
        "univariate": "true" if dims == 1 else "false",
        "dimensions": str(dims),
        "equalLength": "true" if equal else "false",
        **({"seriesLength": str(len(series[0][0]))} if equal else {}),
        "classLabel": "true " + " ".join(sorted(set(labels))),
        **(header or {}),
    }
    lines = [f"@{key} {value}" for key, value in meta.items()] + ["@data"]
    lines += [":".join([*(",".join(channel) for channel in s), label]) for s, label in zip(series, labels, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def random_texts(rng: np.random.Generator, lengths: list[int], channels: int) -> list[list[list[str]]]:
    """Value strings for series of the given lengths: [series][channel][step], 4 decimals, signs mixed."""
    return [[[f"{v:.4f}" for v in rng.normal(0, 3, size=n)] for _ in range(channels)] for n in lengths]


def time_first(texts: list[list[str]]) -> np.ndarray:
    """(T, C) float32 array of one series written channel by channel (the file's layout)."""
    return np.array([[float(v) for v in channel] for channel in texts], dtype=np.float32).T


# --- read_ts_file ----------------------------------------------------------------------------------------


def test_equal_length_multivariate_series_come_back_time_first(tmp_path):
    texts = random_texts(np.random.default_rng(0), [5, 5, 5, 5], channels=3)
    labels = ["b", "a", "10", "b"]
    data = read_ts_file(write_ts(tmp_path / "eq.ts", texts, labels))
    assert data.labels == labels
    assert all(type(label) is str for label in data.labels)
    assert len(data.series) == 4
    for s, written in zip(data.series, texts, strict=True):
        assert s.shape == (5, 3)
        assert s.dtype == np.float32
        np.testing.assert_array_equal(s, time_first(written))


def test_unequal_length_series_keep_their_lengths(tmp_path):
    lengths = [3, 9, 1, 6, 4]
    texts = random_texts(np.random.default_rng(1), lengths, channels=3)
    labels = ["1", "2", "3", "1", "2"]
    data = read_ts_file(write_ts(tmp_path / "uneq.ts", texts, labels))
    assert data.labels == labels
    assert [s.shape for s in data.series] == [(n, 3) for n in lengths]
    for s, written in zip(data.series, texts, strict=True):
        np.testing.assert_array_equal(s, time_first(written))


def test_a_univariate_file_gives_one_channel(tmp_path):
    data = read_ts_file(write_ts(tmp_path / "uni.ts", [[["1", "2.5", "-3"]], [["4", "5", "6e-2"]]], ["x", "y"]))
    np.testing.assert_array_equal(data.series[0], np.array([[1.0], [2.5], [-3.0]], dtype=np.float32))
    np.testing.assert_array_equal(data.series[1], np.array([[4.0], [5.0], [0.06]], dtype=np.float32))
    assert data.labels == ["x", "y"]


def test_a_missing_file_or_a_directory_is_a_data_error(tmp_path):
    missing = tmp_path / "missing.ts"
    with pytest.raises(DataError, match=rf"^{re.escape(str(missing))}: no such file$"):
        read_ts_file(missing)
    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path))}: is a directory, expected a \.ts file$"):
        read_ts_file(tmp_path)


def test_a_fifo_a_device_a_stray_byte_and_a_long_series_are_one_line_each(tmp_path):
    fifo = tmp_path / "fifo.ts"
    os.mkfifo(fifo)  # aeon would block on it forever
    zero = tmp_path / "zero.ts"
    zero.symlink_to("/dev/zero")  # aeon would read it until memory runs out
    for path in (fifo, zero):
        with pytest.raises(DataError, match=f"^{re.escape(str(path))}: is not a regular file"):
            read_ts_file(path)
    latin1 = tmp_path / "latin1.ts"
    latin1.write_bytes(b"@problemName caf\xe9\n@data\n1,2:a\n")
    with pytest.raises(DataError, match=re.escape(f"{latin1}:1: not UTF-8 text (invalid byte 0xe9 at byte offset 16)")):
        read_ts_file(latin1)
    long = tmp_path / "long.ts"
    header = "@problemName t\n@timeStamps false\n@missing false\n@univariate true\n@equalLength false\n"
    long.write_text(header + "@classLabel true a\n@data\n" + ",".join(["1.0"] * 6) + ":a\n")
    with pytest.raises(DataError, match=re.escape(f"{long}: series 1 has 6 steps, more than max_series_length (5)")):
        read_ts_file(long, max_series_length=5)
    with pytest.raises(DataError, match=re.escape(f"{long}:8: longer than max_line_chars (20) characters")):
        read_ts_file(long, max_line_chars=20)


def test_a_value_that_is_not_a_number_is_a_data_error_naming_the_file(tmp_path):
    path = write_ts(tmp_path / "bad.ts", [[["1", "2", "x"]], [["4", "5", "6"]]], ["a", "b"])
    message = f"{path}: not a valid .ts classification file (could not convert string to float: 'x')"
    with pytest.raises(DataError, match=rf"^{re.escape(message)}$"):
        read_ts_file(path)


def test_a_binary_file_is_a_data_error_naming_the_file(tmp_path):
    path = tmp_path / "binary.ts"
    path.write_bytes(b"\x00\xff\xfe\x01binary")
    message = f"{path}:1: not a text file (control byte 0x00 at byte offset 0)"
    with pytest.raises(DataError, match=rf"^{re.escape(message)}$"):
        read_ts_file(path)


def test_channels_of_different_lengths_in_one_series_are_a_data_error(tmp_path):
    path = write_ts(tmp_path / "ragged.ts", [[["1", "2", "3"], ["4", "5"]]], ["a"])
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: not a valid \.ts classification file \("):
        read_ts_file(path)


def test_a_header_without_series_is_a_data_error(tmp_path):
    path = write_ts(tmp_path / "header_only.ts", [[["1"]]], ["a"])
    path.write_text(path.read_text().split("@data")[0] + "@data\n")
    with pytest.raises(
        DataError, match=rf"^{re.escape(str(path))}: not a valid \.ts classification file \(no series after @data\)$"
    ):
        read_ts_file(path)


def test_a_text_file_that_is_not_ts_fails_in_one_error_naming_the_file(tmp_path):
    path = tmp_path / "words.dict"
    path.write_text(";;; a CMUdict file\nHELLO  HH AH0 L OW1\nWORLD  W ER1 L D\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: "):
        read_ts_file(path)


def test_a_text_file_named_ts_without_series_is_called_not_a_valid_ts_file(tmp_path):
    path = tmp_path / "words.ts"
    path.write_text(";;; a CMUdict file\nHELLO  HH AH0 L OW1\nWORLD  W ER1 L D\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: not a valid \.ts classification file"):
        read_ts_file(path)


@pytest.mark.parametrize("missing_flag", ["true", "false"])
def test_a_series_with_a_missing_value_is_a_data_error_naming_it(tmp_path, missing_flag):
    texts = [[["1", "2", "3"], ["4", "5", "6"]], [["1", "2", "3"], ["4", "?", "6"]]]
    path = write_ts(tmp_path / "missing.ts", texts, ["a", "b"], header={"missing": missing_flag})
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: series 2 has missing or non-finite values$"):
        read_ts_file(path)


def test_a_file_without_class_labels_is_a_data_error(tmp_path):
    path = tmp_path / "unlabelled.ts"
    path.write_text(
        "@problemName toy\n@timeStamps false\n@missing false\n@univariate true\n@equalLength true\n"
        "@seriesLength 3\n@classLabel false\n@data\n1,2,3\n4,5,6\n"
    )
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: .*label"):
        read_ts_file(path)


def test_a_file_not_named_ts_is_refused_by_name(tmp_path):
    # aeon would silently read train.ts instead of train: refusing the name is the only safe answer.
    path = write_ts(tmp_path / "train", [[["1", "2"]], [["3", "4"]]], ["a", "b"])
    with pytest.raises(
        DataError, match=rf"^{re.escape(str(path))}: expected a \.ts file \(the UCR/UEA archive format\)$"
    ):
        read_ts_file(path)


def test_without_aeon_both_readers_name_the_extra_to_install(tmp_path, monkeypatch):
    path = write_ts(tmp_path / "ok.ts", [[["1", "2"]], [["3", "4"]]], ["a", "b"])
    monkeypatch.setitem(sys.modules, "aeon.datasets", None)  # makes `import aeon.datasets` raise ImportError
    assert AEON_HINT == "the time-series recipes need aeon: pip install 'seqlab[timeseries]'"
    with pytest.raises(ConfigError, match=rf"^{re.escape(AEON_HINT)}$"):
        read_ts_file(path)
    with pytest.raises(ConfigError, match=rf"^{re.escape(AEON_HINT)}$"):
        japanese_vowels_paths()


def test_the_install_hint_names_an_extra_that_exists():
    project = load_toml(ROOT / "pyproject.toml")["project"]
    assert any(req.startswith("aeon") for req in project["optional-dependencies"]["timeseries"])
    assert "aeon" not in " ".join(project["dependencies"])


# --- Japanese Vowels -------------------------------------------------------------------------------------


def parse_by_hand(path: Path) -> tuple[list[np.ndarray], list[str]]:
    """The series (T, C) and labels of a .ts file, split on ',' and ':' without aeon."""
    lines = path.read_text().splitlines()
    body = [line for line in lines[lines.index("@data") + 1 :] if line.strip()]
    series, labels = [], []
    for line in body:
        *channels, label = line.split(":")
        series.append(np.array([[float(v) for v in c.split(",")] for c in channels], dtype=np.float32).T)
        labels.append(label.strip())
    return series, labels


@pytest.fixture(scope="module")
def vowels():
    train_path, test_path = japanese_vowels_paths()
    return train_path, test_path, read_ts_file(train_path), read_ts_file(test_path)


def test_the_bundled_japanese_vowels_files_exist(vowels):
    train_path, test_path, *_ = vowels
    assert (train_path.name, test_path.name) == ("JapaneseVowels_TRAIN.ts", "JapaneseVowels_TEST.ts")
    assert train_path.is_file() and test_path.is_file()


@pytest.mark.parametrize(("split", "count"), [("train", 270), ("test", 370)])
def test_japanese_vowels_has_the_published_shape(vowels, split, count):
    data = vowels[2] if split == "train" else vowels[3]
    assert len(data.series) == len(data.labels) == count
    assert {s.shape[1] for s in data.series} == {12}
    lengths = [s.shape[0] for s in data.series]
    assert min(lengths) >= 7 and max(lengths) <= 29
    assert sorted(set(data.labels)) == [str(k) for k in range(1, 10)]
    if split == "train":
        assert all(data.labels.count(str(k)) == 30 for k in range(1, 10))  # 30 utterances per speaker


def test_japanese_vowels_lengths_span_7_to_29(vowels):
    lengths = [s.shape[0] for data in vowels[2:] for s in data.series]
    assert (min(lengths), max(lengths)) == (7, 29)


@pytest.mark.parametrize("split", ["train", "test"])
def test_japanese_vowels_equal_a_parse_by_hand(vowels, split):
    path, data = (vowels[0], vowels[2]) if split == "train" else (vowels[1], vowels[3])
    series, labels = parse_by_hand(path)
    assert data.labels == labels
    assert len(data.series) == len(series)
    for mine, theirs in zip(data.series, series, strict=True):
        np.testing.assert_array_equal(mine, theirs)


# --- channel_statistics ----------------------------------------------------------------------------------


def test_channel_statistics_pool_every_frame_of_every_series():
    rng = np.random.default_rng(2)
    series = [rng.normal(size=(n, 3)) * [1.0, 5.0, 0.1] + [0.0, -2.0, 7.0] for n in (2, 7, 1, 4)]
    frames = [row for s in series for row in s]
    mean = [sum(f[c] for f in frames) / len(frames) for c in range(3)]
    std = [(sum((f[c] - mean[c]) ** 2 for f in frames) / len(frames)) ** 0.5 for c in range(3)]
    got_mean, got_std = channel_statistics(series)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-12, atol=0)
    np.testing.assert_allclose(got_std, std, rtol=1e-12, atol=0)


def test_a_constant_channel_gets_std_one():
    series = [np.array([[1.0, 4.0], [3.0, 4.0]]), np.array([[2.0, 4.0]])]
    mean, std = channel_statistics(series)
    np.testing.assert_allclose(mean, [2.0, 4.0])
    np.testing.assert_allclose(std, [(2 / 3) ** 0.5, 1.0])


# --- series_batches --------------------------------------------------------------------------------------


@pytest.fixture
def toy_series() -> tuple[list[np.ndarray], list[int]]:
    rng = np.random.default_rng(3)
    lengths = [4, 1, 7, 3, 3, 6, 2, 5, 1, 4, 2]
    return [rng.normal(size=(n, 2)).astype(np.float32) + 1.0 for n in lengths], [i % 3 for i in range(11)]


def check_batch(batch, series, targets):
    """Each row holds its series, zeros past its length; lengths and targets match the rows."""
    rows = batch.indices.tolist()
    _, T, C = batch.x.shape
    assert batch.x.shape == (len(rows), max(len(series[i]) for i in rows), 2)
    assert batch.x.dtype == torch.float32
    assert_close(batch.lengths, torch.tensor([len(series[i]) for i in rows]))
    assert_close(batch.targets, torch.tensor([targets[i] for i in rows]))
    for b, i in enumerate(rows):
        n = len(series[i])
        assert_close(batch.x[b, :n], torch.from_numpy(series[i]))
        assert_close(batch.x[b, n:], torch.zeros(T - n, C))


def test_batches_in_dataset_order_are_padded_with_zeros(toy_series):
    series, targets = toy_series
    batches = list(series_batches(series, targets, batch_size=4, shuffle=False))
    assert [b.indices.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    for batch in batches:
        check_batch(batch, series, targets)


def test_shuffled_batches_hold_every_series_once(toy_series):
    series, targets = toy_series
    batches = list(
        series_batches(series, targets, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(0))
    )
    assert [len(b.indices) for b in batches] == [3, 3, 3, 2]
    assert sorted(torch.cat([b.indices for b in batches]).tolist()) == list(range(len(series)))
    for batch in batches:
        check_batch(batch, series, targets)


def test_shuffling_is_deterministic_given_the_generator(toy_series):
    series, targets = toy_series

    def order(seed):
        gen = torch.Generator().manual_seed(seed)
        return [b.indices.tolist() for b in series_batches(series, targets, batch_size=4, shuffle=True, generator=gen)]

    assert order(5) == order(5)
    assert order(5) != order(6)
    assert [i for rows in order(5) for i in rows] != list(range(len(series)))
