"""Where a g2p run's long-word errors come from (issue 25.1): the model or the search, and where in the word.

    python benchmarks/g2p_decomposition.py RUN [RUN ...] [--per-bucket 300]

For each run, on a fixed random sample of the test split per length bucket (seed 0, the same words for every run),
under teacher forcing with the first reference pronunciation:

- ``nll``: cross-entropy per phoneme (nats, EOS included); if it grows with word length, the model itself is worse
  on long words before any search or exposure bias;
- ``first3`` / ``middle`` / ``last3`` / ``eos``: the same split by where the phoneme sits in the pronunciation
  (the first three, the last three, the rest, and the end-of-sequence step), so a growth can be placed: losing
  one's place in the middle (alignment), or at the end (the end-of-sequence decision, absolute positions seen
  rarely in training);
- ``search``: the % of words the beam (the run's decode section) gets wrong although a reference scores higher
  than its hypothesis under the model (search errors; the rest of the wrong words are model errors), and ``WER``;
- ``entropy``: mean entropy (nats) of the cross-attention over the letters (the Transformer's last layer averaged
  over heads, as ``seqlab analyze attention`` draws it), and ``back``: % of steps whose most attended letter lies
  before the previous step's.

The cells of a row are comparable across runs (same words); decode time is not reported (``g2p_long_words.py`` has
the WER, PER and coverage of any decode settings on the whole test split; ``g2p_length_buckets.py``, which takes
its teacher-forced NLLs from here, the nll and WER of every test word by length bucket and their growth).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from pathlib import Path

import torch

from seqlab.data.batching import collate_seq2seq
from seqlab.data.cmudict import group_references
from seqlab.data.pronunciations import load_splits
from seqlab.recipes import load_system

BUCKETS = ((5, 7), (8, 10), (11, 14), (15, 64))
PARTS = ("first3", "middle", "last3", "eos")
BATCH = 128


def shuffled_words(references: dict[str, list]) -> list[str]:
    """The test words in a fixed random order (seed 0): the same sample for every run of the same split."""
    shuffled = sorted(references)
    random.Random(0).shuffle(shuffled)
    return shuffled


@torch.no_grad()
def teacher_forced(
    system,
    words: Sequence[str],
    pronunciations: Sequence[Sequence[str]],
    *,
    attention: bool = True,
    source: str = "sample",
) -> list[dict]:
    """Per pair: ``nll``, the token NLLs (nats, EOS last) under teacher forcing, and, with ``attention`` where the
    model returns attention, its mean ``entropy`` (nats) and ``back``, the share of steps whose most attended letter
    lies before the previous step's. ``source`` names the words in an error message."""
    model = system.model.eval()
    pad_id = system.phonemes.pad_id
    need_weights = attention and type(model).__name__ == "TransformerSeq2Seq"
    targets = [system.phonemes.encode(p) for p in pronunciations]
    pairs = list(zip(system.encode_words(words, source=source), targets, strict=True))
    rows = []
    for start in range(0, len(pairs), BATCH):
        batch = collate_seq2seq(pairs[start : start + BATCH], pad_id=pad_id)
        out = model(batch.src, batch.src_lengths, batch.tgt_in, **({"need_weights": True} if need_weights else {}))
        nll = -torch.log_softmax(out.logits.float(), -1).gather(2, batch.tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
        for b in range(nll.shape[0]):
            n, S = int((batch.tgt_out[b] != pad_id).sum()), int(batch.src_lengths[b])
            row = {"nll": nll[b, :n].tolist()}
            if attention and out.attention is not None:
                a = out.attention[b, :n, :S].float()
                a = a / a.sum(-1, keepdim=True).clamp_min(1e-12)  # (n, S)
                row["entropy"] = float(-(a * a.clamp_min(1e-12).log()).sum(-1).mean())
                peak = a[:-1].argmax(-1)  # the phoneme steps
                row["back"] = float((peak[1:] < peak[:-1]).float().mean()) if len(peak) > 1 else 0.0
            rows.append(row)
    return rows


def bucket_row(system, words: Sequence[str], references: dict) -> dict[str, float]:
    firsts = [references[w][0] for w in words]
    rows = teacher_forced(system, words, firsts)
    sums = {part: [0.0, 0] for part in PARTS}
    for row in rows:
        phonemes, eos = row["nll"][:-1], row["nll"][-1]
        for j, value in enumerate(phonemes):
            part = "first3" if j < 3 else "last3" if j >= len(phonemes) - 3 else "middle"
            sums[part][0] += value
            sums[part][1] += 1
        sums["eos"][0] += eos
        sums["eos"][1] += 1
    cells = {part: total / count for part, (total, count) in sums.items() if count}  # short words: no middle
    cells["nll"] = sum(sum(r["nll"]) for r in rows) / sum(len(r["nll"]) for r in rows)
    if "entropy" in rows[0]:
        cells["entropy"] = sum(r["entropy"] for r in rows) / len(rows)
        cells["back"] = 100 * sum(r["back"] for r in rows) / len(rows)
    best = [h[0] for h in system.transcribe(list(words), source="sample")]
    wrong = [i for i, (w, (hyp, _)) in enumerate(zip(words, best, strict=True)) if hyp not in map(tuple, references[w])]
    cells["WER"] = 100 * len(wrong) / len(words)
    hyp_nll = teacher_forced(system, [words[i] for i in wrong], [best[i][0] for i in wrong])
    search = 0
    for i, hyp in zip(wrong, hyp_nll, strict=True):
        variants = references[words[i]]
        ref_nll = teacher_forced(system, [words[i]] * len(variants), variants)
        search += min(sum(r["nll"]) for r in ref_nll) < sum(hyp["nll"]) - 1e-4
    cells["search"] = 100 * search / len(words)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--per-bucket", type=int, default=300, help="test words sampled per length bucket")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    columns = ("nll", *PARTS, "WER", "search", "entropy", "back")
    print(f"{'run':<28} {'letters':>7} " + " ".join(f"{c:>7}" for c in columns))
    samples = None
    for run in args.runs:
        system = load_system(run)
        references = group_references(load_splits(system.config.data)[2])
        if samples is None:
            shuffled = shuffled_words(references)
            samples = [[w for w in shuffled if lo <= len(w) <= hi][: args.per_bucket] for lo, hi in BUCKETS]
        for (lo, hi), words in zip(BUCKETS, samples, strict=True):
            cells = bucket_row(system, words, references)
            label = f"{lo}-{hi}" if hi < 64 else f"{lo}+"
            row = " ".join(f"{cells[c]:7.3f}" if c in cells else f"{'-':>7}" for c in columns)
            print(f"{str(run)[-28:]:<28} {label:>7} {row}", flush=True)


if __name__ == "__main__":
    main()
