"""Dynamic int8 (``seqlab quantize``) against float32 on trained runs: size, speed and quality, measured in one run.

Each run given (--g2p, --lm) is quantized into a temporary directory by ``quantize_run``, as ``seqlab quantize`` does,
and both directories are loaded by ``load_system``, as ``seqlab evaluate`` loads them. Rows per run:
    size        bytes of model.safetensors.
    g2p         PER / WER (%) of the best hypotheses of beam search with --beams beams (the run's decode batch
                size) on the first --words words of the run's own test split (one pass, which is also the warm-up),
                and words/s of the same search over the first --timed-words of them.
    lm          generation tokens/s: --new-tokens tokens, greedy, batch 1, after the first 16 characters of the
                test split as the prompt (``System.generate``); evaluation: seconds to score the first --lm-chars
                characters of the test split (``LanguageModelSystem.perplexity``, its sliding window for a GPT),
                and the perplexity (per token) it gives.
Decoding and scoring are deterministic: the quality rows need one pass.

Timing: each round runs float32 and int8 once, float32 first in even rounds and int8 first in odd ones, after one
warm-up round; the table shows the median over --repeats rounds and the ratio int8 / float32 of speeds (or of
seconds for evaluation), the median of the per-round ratios. Times are this process's CPU time (``--clock cpu``,
the default: with one thread, the time the work took, which other processes on a shared CPU disturb far less than
wall time) or wall time (``--clock wall``).

    python benchmarks/quantize.py --g2p runs/g2p --lm runs/lm                       # minutes at one thread
    F=tests/fixtures/checkpoints; python benchmarks/quantize.py --g2p $F/g2p_v0_1 --g2p-test $F/train.dict \\
        --lm $F/lm_gpt_9a192c4 --lm-test $F/corpus.txt --lm-chars 300 --new-tokens 8 --repeats 1   # smoke test
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from seqlab.cli.quantize import quantize_run
from seqlab.data.cmudict import group_references
from seqlab.data.pronunciations import load_splits, read_entries
from seqlab.data.text import read_text
from seqlab.metrics import g2p_scores
from seqlab.models.pretrained import WEIGHTS_FILE
from seqlab.recipes import GenerationRequest, load_system
from seqlab.recipes.lm.training import read_splits

PROMPT_CHARS = 16


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--g2p", type=Path, help="a g2p run directory")
    parser.add_argument("--lm", type=Path, help="an lm run directory")
    parser.add_argument("--g2p-test", type=Path, help="g2p: a CMUdict file instead of the run's test split")
    parser.add_argument("--lm-test", type=Path, help="lm: a text file instead of the run's test split")
    parser.add_argument("--words", type=int, default=2000, help="g2p: words of the test split (default: %(default)s)")
    parser.add_argument("--timed-words", type=int, default=500, help="g2p: words of those timed (default: %(default)s)")
    parser.add_argument("--beams", type=int, default=5, help="g2p: beam width (default: %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=200, help="lm: tokens generated (default: %(default)s)")
    parser.add_argument(
        "--lm-chars", type=int, default=20000, help="lm: characters of the test split scored (default: %(default)s)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after one warm-up (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="time measured (default: %(default)s)")
    return parser.parse_args()


def time_rounds(
    runs: list[Callable[[], object]], *, repeats: int, clock: Callable[[], float], warmup: bool = True
) -> list[list[float]]:
    """Seconds per run (outer) and round (inner); the order of the two runs alternates by round; with ``warmup``,
    one untimed round first."""
    seconds: list[list[float]] = [[] for _ in runs]
    skipped = 1 if warmup else 0
    for i in range(skipped + repeats):
        order = range(len(runs)) if (i - skipped) % 2 == 0 else reversed(range(len(runs)))
        for r in order:
            start = clock()
            runs[r]()
            if i >= skipped:
                seconds[r].append(clock() - start)
    return seconds


def row(run: str, metric: str, reference: float, int8: float, ratio: float, digits: int = 2) -> None:
    print(f"{run:<5} {metric:<32} {reference:>14,.{digits}f} {int8:>14,.{digits}f} {ratio:>12.2f}x", flush=True)


def speed_rows(run: str, metric: str, work: float, seconds: list[list[float]], *, per_second: bool) -> None:
    """A row of work / second (per_second) or of seconds, and the ratio int8 / float32 of the same quantity."""
    reference, int8 = seconds
    if per_second:
        ratio = statistics.median(r / q for r, q in zip(reference, int8, strict=True))
        row(run, metric, work / statistics.median(reference), work / statistics.median(int8), ratio, digits=1)
    else:
        ratio = statistics.median(q / r for r, q in zip(reference, int8, strict=True))
        row(run, metric, statistics.median(reference), statistics.median(int8), ratio)


def size_row(run: str, directories: tuple[Path, Path]) -> None:
    sizes = [(d / WEIGHTS_FILE).stat().st_size / 1e6 for d in directories]
    row(run, "model.safetensors (MB)", sizes[0], sizes[1], sizes[1] / sizes[0], digits=3)


def g2p_rows(directories: tuple[Path, Path], args: argparse.Namespace, clock: Callable[[], float]) -> None:
    systems = [load_system(d) for d in directories]
    data = systems[0].config.data
    test = load_splits(data)[2] if args.g2p_test is None else read_entries(str(args.g2p_test), data)
    references = group_references(test)
    words = list(references)[: args.words]
    variants = [references[w] for w in words]
    best = [
        [hyps[0][0] for hyps in system.transcribe(words, source="test split", num_beams=args.beams)]
        for system in systems
    ]
    timed = words[: args.timed_words]

    def transcribe(i: int) -> Callable[[], None]:
        return lambda: systems[i].transcribe(timed, source="test split", num_beams=args.beams)

    seconds = time_rounds([transcribe(0), transcribe(1)], repeats=args.repeats, clock=clock, warmup=False)
    size_row("g2p", directories)
    speed_rows("g2p", f"words/s (beam {args.beams}, {len(timed)} words)", len(timed), seconds, per_second=True)
    scores = [g2p_scores(b, variants) for b in best]
    row("g2p", f"PER (%, {len(words)} test words)", scores[0].per, scores[1].per, scores[1].per / scores[0].per)
    row("g2p", f"WER (%, {len(words)} test words)", scores[0].wer, scores[1].wer, scores[1].wer / scores[0].wer)


def lm_rows(directories: tuple[Path, Path], args: argparse.Namespace, clock: Callable[[], float]) -> None:
    systems = [load_system(d) for d in directories]
    text = read_splits(systems[0].config.data).test if args.lm_test is None else read_text(str(args.lm_test))
    prompt, scored = text[:PROMPT_CHARS], text[: args.lm_chars]
    request = GenerationRequest(prompt, max_new_tokens=args.new_tokens, do_sample=False, num_beams=1)
    perplexity = [0.0, 0.0]

    def generate(i: int) -> Callable[[], None]:
        return lambda: "".join(chunk.text for chunk in systems[i].generate(request))

    def evaluate(i: int) -> Callable[[], None]:
        def run() -> None:
            perplexity[i] = systems[i].perplexity(scored, source="test split").perplexity

        return run

    generation = time_rounds([generate(0), generate(1)], repeats=args.repeats, clock=clock)
    evaluation = time_rounds([evaluate(0), evaluate(1)], repeats=args.repeats, clock=clock)
    size_row("lm", directories)
    speed_rows("lm", "generation tokens/s (greedy, B=1)", args.new_tokens, generation, per_second=True)
    speed_rows("lm", f"evaluation s ({len(scored):,} chars)", 0, evaluation, per_second=False)
    row("lm", f"perplexity ({len(scored):,} chars)", perplexity[0], perplexity[1], perplexity[1] / perplexity[0], 3)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"threads {torch.get_num_threads()}, clock {args.clock}, {args.repeats} rounds after one warm-up")
    print(f"{'run':<5} {'metric':<32} {'float32':>14} {'int8':>14} {'int8/float32':>13}")
    with tempfile.TemporaryDirectory() as scratch:
        for name, run, rows in (("g2p", args.g2p, g2p_rows), ("lm", args.lm, lm_rows)):
            if run is not None:
                quantized = Path(scratch) / name
                quantize_run(run, quantized, method="dynamic-int8")
                rows((run, quantized), args, clock)


if __name__ == "__main__":
    main()
