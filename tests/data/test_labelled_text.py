import collections

import pytest
import torch

from seqlab.data.labelled_text import (
    LabelledText,
    read_labelled_file,
    stratified_sample,
    stratified_split,
    token_batches,
)
from seqlab.data.names import name_origin_examples
from seqlab.errors import DataError


def test_names_data_has_one_language_per_name_and_the_documented_counts():
    examples = name_origin_examples()
    counts = collections.Counter(e.label for e in examples)
    assert counts == {
        "american": 1497,
        "chinese": 408,
        "finnish": 2500,
        "french": 2500,
        "german": 112,
        "japanese": 243,
        "russian": 2500,
        "spanish": 1787,
        "swedish": 541,
    }
    assert len({e.text for e in examples}) == len(examples)
    assert examples == name_origin_examples()
    for text, label in [("Ivanov", "russian"), ("Sato", "japanese"), ("Andersson", "swedish")]:
        assert LabelledText(text, label) in examples
    assert not {"Anna", "Wang", "Schmidt"} & {e.text for e in examples}


def test_stratified_split_is_deterministic_disjoint_and_per_class():
    examples = [LabelledText(f"{label}{i}", label) for label, n in (("a", 50), ("b", 20)) for i in range(n)]
    splits = stratified_split(examples, valid_fraction=0.1, test_fraction=0.2, seed=3)
    assert splits == stratified_split(examples, valid_fraction=0.1, test_fraction=0.2, seed=3)
    assert sorted(splits.train + splits.valid + splits.test) == sorted(examples)
    assert collections.Counter(e.label for e in splits.valid) == {"a": 5, "b": 2}
    assert collections.Counter(e.label for e in splits.test) == {"a": 10, "b": 4}
    with pytest.raises(DataError, match=r"the valid split is empty: too few examples \(2\)"):
        stratified_split(examples[:1] + examples[-1:], valid_fraction=0.1, test_fraction=0.1, seed=0)


def test_stratified_sample_keeps_each_class_share_in_the_original_order():
    examples = [LabelledText(f"a{i}", "a") for i in range(60)] + [LabelledText(f"b{i}", "b") for i in range(40)]
    examples = examples[::2] + examples[1::2]  # classes interleaved
    sample = stratified_sample(examples, 25, seed=4)
    assert sample == stratified_sample(examples, 25, seed=4) != stratified_sample(examples, 25, seed=5)
    assert collections.Counter(e.label for e in sample) == {"a": 15, "b": 10}  # 25 * 60/100 and 25 * 40/100
    assert sample == [e for e in examples if e in set(sample)]
    rare = [*examples, LabelledText("c0", "c")]
    assert (
        collections.Counter(e.label for e in stratified_sample(rare, 10, seed=0))["c"] == 1
    )  # a class is never left out
    assert stratified_sample(examples, 100, seed=0) == examples


@pytest.mark.parametrize("size", [1, 102])
def test_a_stratified_sample_that_cannot_hold_every_class_or_exceeds_the_examples_is_one_error(size):
    examples = [LabelledText(f"a{i}", "a") for i in range(60)] + [LabelledText(f"b{i}", "b") for i in range(41)]
    with pytest.raises(DataError, match=rf"cannot sample {size} of 101 examples in 2 classes: .* \[2, 101\]"):
        stratified_sample(examples, size, seed=0)


def test_read_labelled_file_and_its_errors(tmp_path):
    path = tmp_path / "data.tsv"
    path.write_text("Ivanov\trussian\n\nDe Luca\titalian\n")
    assert read_labelled_file(path) == [LabelledText("Ivanov", "russian"), LabelledText("De Luca", "italian")]
    path.write_text("Ivanov\trussian\nTanaka japanese\n")
    with pytest.raises(DataError, match=f"^{path}:2: 1 column, expected 2 \\(TEXT<TAB>LABEL lines\\)$"):
        read_labelled_file(path)
    path.write_text("Ivanov\trussian\nTanaka\tjapanese\tjapan\n")  # a tab in the text is not a third column
    with pytest.raises(DataError, match=f"^{path}:2: 3 columns, expected 2 \\(TEXT<TAB>LABEL lines\\)$"):
        read_labelled_file(path)
    with pytest.raises(DataError, match="no such file"):
        read_labelled_file(tmp_path / "missing.tsv")


def test_token_batches_pad_after_each_row_and_keep_indices():
    ids, targets = [[5, 6, 7], [8], [9, 10]], [0, 1, 0]
    batches = list(token_batches(ids, targets, batch_size=2, pad_id=0, shuffle=False))
    assert torch.equal(batches[0].x, torch.tensor([[5, 6, 7], [8, 0, 0]]))
    assert batches[0].lengths.tolist() == [3, 1] and batches[1].indices.tolist() == [2]
    shuffled = list(token_batches(ids, targets, batch_size=3, pad_id=0, shuffle=True, generator=torch.Generator()))
    rows = shuffled[0].indices.tolist()
    assert sorted(rows) == [0, 1, 2] and shuffled[0].targets.tolist() == [targets[i] for i in rows]
