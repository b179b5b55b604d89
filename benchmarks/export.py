"""The onnxruntime backend against the torch backend (and transformers), measured in the same run.

step rows   one GPT decode step at batch 1 over a cache of --cache tokens (``GPT.step`` under inference_mode against
            ``OnnxGPT.step``), and one g2p word (encoder, then greedy steps to EOS) of a g2p run (--g2p, default
            the committed fixture) through ``RNNSeq2Seq`` against ``OnnxRNNSeq2Seq``; microseconds per call.
transformer one g2p Transformer word (encoder, BOS through the prefill graph, greedy steps to EOS) and one decode
            step over the caches of the word's first --cache-steps target tokens, of a g2p Transformer run
            (--g2p-transformer, default the committed fixture), ``TransformerSeq2Seq`` against
            ``OnnxTransformerSeq2Seq``; microseconds per call. The torch step is called on the same state each
            round, as the GPT step row's, so its cache is copied into a new buffer every call (a few KB here).
seq2seq     one translate sentence (--sentence-tokens source and target BPE tokens) and one t5-g2p word
            (--word: its letters in, as many phonemes out) at the recipes' default model sizes (translate: the
            Transformer, D256 3+3 layers over 2,003 ids; t5-g2p: D128 Dh32 3+3 layers over 100 ids), untrained:
            encoder, then a fixed number of greedy steps (the first through the prefill graph), so an untrained
            model's early or missing EOS does not change the work; ``TransformerSeq2Seq`` / ``T5`` against
            ``OnnxTransformerSeq2Seq``; microseconds per sentence or word.
generation  ``seqlab.decoding.generate`` over the torch GPT (torch backend) and over its exported graphs
            (onnxruntime backend) against transformers' ``generate`` on GPT2LMHeadModel with the same weights,
            greedy and beam (K = --beams), --new-tokens tokens after a 16-token prompt, at language_model.py's
            default shape (L4 D256 N4 V4096) and the char shape (GPTConfig's defaults: L4 D128 N4 V65).
            Ratios are tokens/s against transformers (the median of per-round time ratios).
All of them must choose the same tokens (checked and printed). One thread by default (--threads), float32, CPU; the
times are this process's CPU time (--clock wall for wall time). Exports go to a temporary directory first.

    python benchmarks/export.py                    # minutes (exports included)
    python benchmarks/export.py --parts transformer    # the g2p Transformer rows only
    python benchmarks/export.py --parts seq2seq        # translate and t5-g2p
    python benchmarks/export.py --new-tokens 8 --repeats 1 --shapes char    # smoke test
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
import time
from pathlib import Path

import torch
from language_model import PROMPT_LENGTH, gpt_pair, hf_generate
from timing import median_and_iqr, time_pair

from seqlab.data.vocab import Vocabulary
from seqlab.decoding import generate, greedy_search
from seqlab.export import export_onnx, load_step_model
from seqlab.models import RNNSeq2Seq, TransformerSeq2Seq
from seqlab.models.t5 import T5
from seqlab.recipes import t5_g2p, translate

SHAPES = {"default": (4, 256, 4, 4096), "char": (4, 128, 4, 65)}  # L, D, N, V
FIXTURES = Path(__file__).parents[1] / "tests" / "fixtures" / "checkpoints"
G2P_FIXTURE, G2P_TRANSFORMER_FIXTURE = FIXTURES / "g2p_v0_1", FIXTURES / "g2p_transformer_v0_1"
PARTS = ("steps", "transformer", "seq2seq", "generation")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="default,char", help="comma-separated: default, char")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generated at batch 1")
    parser.add_argument("--beams", type=int, default=5, help="K of the beam rows")
    parser.add_argument("--cache", type=int, default=64, help="cached tokens before the timed GPT step")
    parser.add_argument("--g2p", type=Path, default=G2P_FIXTURE, help="g2p run of the word row")
    parser.add_argument("--g2p-transformer", type=Path, default=G2P_TRANSFORMER_FIXTURE, help="g2p Transformer run")
    parser.add_argument("--cache-steps", type=int, default=4, help="target tokens cached before the timed step")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)}")
    parser.add_argument("--word", default="pronunciation", help="the g2p word")
    parser.add_argument("--sentence-tokens", type=int, default=20, help="BPE tokens of the translate sentence")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of torch and onnxruntime")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    args = parser.parse_args()
    args.clock = time.perf_counter if args.clock == "wall" else time.process_time
    return args


def exported(model: torch.nn.Module, directory: Path):
    """Save ``model`` as a run in ``directory``, export it, and return its onnxruntime step model."""
    model.save_pretrained(directory)
    export_onnx(directory, directory / "onnx")
    return load_step_model(directory)


def row(kind: str, name: str, seconds: list[float], reference: list[float] | None, per: float, unit: str) -> None:
    value, q1, q3 = median_and_iqr([per / s for s in seconds] if unit == "tokens/s" else [s * 1e6 for s in seconds])
    if reference is None:
        ratio = f"{'1.00x':>8}"
    else:
        r = median_and_iqr([t / s for s, t in zip(seconds, reference, strict=True)])
        ratio = f"{r[0]:>7.2f}x {f'{r[1]:.2f}-{r[2]:.2f}':>11}"
    print(f"{kind:<18} {name:<22} {value:>11,.0f} {f'{q1:,.0f}-{q3:,.0f}':>17} {unit:<9} {ratio}", flush=True)


def step_rows(args: argparse.Namespace, directory: Path) -> None:
    """One GPT decode step and one g2p word, torch against onnxruntime (reference: torch)."""
    L, D, N, V = SHAPES["default"]
    shape = argparse.Namespace(vocab=V, context=256, new_tokens=args.new_tokens, d_model=D, heads=N, layers=L)
    gpt = gpt_pair(shape, torch.device("cpu"))[0].eval()
    onnx_gpt = exported(gpt, directory / "step_gpt")
    ids = torch.randint(0, V, (1, args.cache), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch_state, onnx_state = gpt.prefill(ids).state, onnx_gpt.prefill(ids).state
    token = torch.tensor([7])
    runs = [lambda: gpt.step(token, torch_state), lambda: onnx_gpt.step(token, onnx_state)]
    with torch.inference_mode():
        seconds = time_pair(runs, repeats=args.repeats * 20, sync=lambda: None, clock=args.clock)
    row("GPT step", "torch", seconds[0], None, 1, "us/step")
    row("GPT step", "onnxruntime", seconds[1], seconds[0], 1, "us/step")

    run = directory / "g2p"
    shutil.copytree(args.g2p, run)
    shutil.rmtree(run / "onnx", ignore_errors=True)
    export_onnx(run, run / "onnx")
    model, onnx = RNNSeq2Seq.from_pretrained(run).eval(), load_step_model(run)
    src = torch.randint(3, model.config.src_vocab_size, (1, len(args.word)), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([len(args.word)])
    bos, eos = torch.tensor([model.config.bos_id]), model.config.eos_id
    words = [
        lambda m=m: greedy_search(m, m.encode(src, lengths), bos, eos_id=eos, max_length=32) for m in (model, onnx)
    ]
    with torch.inference_mode():
        same = torch.equal(words[0]().tokens, words[1]().tokens)
        seconds = time_pair(words, repeats=args.repeats * 4, sync=lambda: None, clock=args.clock)
    row("g2p word", "torch", seconds[0], None, 1, "us/word")
    row("g2p word", "onnxruntime", seconds[1], seconds[0], 1, "us/word")
    print(f"same g2p tokens: {'yes' if same else 'no'}")


def transformer_rows(args: argparse.Namespace, directory: Path) -> None:
    """One g2p Transformer word and one of its decode steps, torch against onnxruntime (reference: torch)."""
    run = directory / "g2p_transformer"
    shutil.copytree(args.g2p_transformer, run)
    shutil.rmtree(run / "onnx", ignore_errors=True)
    export_onnx(run, run / "onnx")
    model, onnx = TransformerSeq2Seq.from_pretrained(run).eval(), load_step_model(run)
    src = torch.randint(3, model.config.src_vocab_size, (1, len(args.word)), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([len(args.word)])
    bos, eos = torch.tensor([model.config.bos_id]), model.config.eos_id
    words = [
        lambda m=m: greedy_search(m, m.encode(src, lengths), bos, eos_id=eos, max_length=32) for m in (model, onnx)
    ]
    prefix = torch.tensor([[model.config.bos_id, *range(3, 2 + args.cache_steps)]])  # (1, cache_steps)
    token = torch.tensor([5])
    with torch.inference_mode():
        same = torch.equal(words[0]().tokens, words[1]().tokens)
        seconds = time_pair(words, repeats=args.repeats * 4, sync=lambda: None, clock=args.clock)
        torch_state = model.prefill(prefix, model.encode(src, lengths)).state
        onnx_state = onnx.prefill(prefix, onnx.encode(src, lengths)).state
        steps = [lambda: model.step(token, torch_state), lambda: onnx.step(token, onnx_state)]
        step_seconds = time_pair(steps, repeats=args.repeats * 20, sync=lambda: None, clock=args.clock)
    row("g2p-T word", "torch", seconds[0], None, 1, "us/word")
    row("g2p-T word", "onnxruntime", seconds[1], seconds[0], 1, "us/word")
    row("g2p-T step", "torch", step_seconds[0], None, 1, "us/step")
    row("g2p-T step", "onnxruntime", step_seconds[1], step_seconds[0], 1, "us/step")
    print(f"same g2p Transformer tokens: {'yes' if same else 'no'}")


def fixed_greedy(model, src: torch.Tensor, lengths: torch.Tensor, start: int, steps: int) -> torch.Tensor:
    """Encode, then ``steps`` greedy steps from ``start`` whatever the tokens: (1, steps) chosen tokens."""
    state, token, chosen = model.encode(src, lengths), torch.tensor([start]), []
    for _ in range(steps):
        out = model.step(token, state)
        token, state = out.logits.argmax(dim=-1), out.state
        chosen.append(token)
    return torch.stack(chosen, dim=1)


def seq2seq_rows(args: argparse.Namespace, directory: Path) -> None:
    """One translate sentence and one t5-g2p word, torch against onnxruntime (reference: torch)."""
    torch.manual_seed(0)
    tx = translate.TransformerModelConfig()
    vocab = 2000 + 3  # the default bpe_size and PAD, BOS, EOS
    t5_config = t5_g2p.T5G2PModelConfig(dropout=0.0)
    cases = [
        ("translate sentence", TransformerSeq2Seq(tx.model_config(src_vocab_size=vocab, tgt_vocab_size=vocab)),
         args.sentence_tokens, args.sentence_tokens, 1),
        ("t5-g2p word", T5(t5_config.model_config(t5_g2p_vocabulary())), len(args.word) + 2, len(args.word), 0),
    ]  # fmt: skip
    for label, model, source, target, start in cases:
        model = model.eval()
        onnx = exported(model, directory / label.replace(" ", "_"))
        src = torch.randint(3, 90, (1, source), generator=torch.Generator().manual_seed(3))
        lengths = torch.tensor([source])
        runs = [functools.partial(fixed_greedy, m, src, lengths, start, target) for m in (model, onnx)]
        with torch.inference_mode():
            same = torch.equal(runs[0](), runs[1]())
            seconds = time_pair(runs, repeats=args.repeats * 4, sync=lambda: None, clock=args.clock)
        unit = "us/" + label.split()[1]
        row(label, "torch", seconds[0], None, 1, unit)
        row(label, "onnxruntime", seconds[1], seconds[0], 1, unit)
        print(f"same {label} tokens: {'yes' if same else 'no'}")


def t5_g2p_vocabulary() -> Vocabulary:
    """A t5-g2p vocabulary of the default data's size: the two prefixes, 26 letters, the specials and 69 phonemes
    (CMUdict's 39 with stress marks)."""
    phonemes = [f"P{i}" for i in range(69)]
    return Vocabulary([*t5_g2p.PREFIXES.values(), *"abcdefghijklmnopqrstuvwxyz", *phonemes])


def generation_rows(args: argparse.Namespace, name: str, directory: Path) -> None:
    """Greedy and beam generation: torch backend, onnxruntime backend, transformers (reference)."""
    L, D, N, V = SHAPES[name]
    shape = argparse.Namespace(vocab=V, context=256, new_tokens=args.new_tokens, d_model=D, heads=N, layers=L)
    ours, hf = (m.eval() for m in gpt_pair(shape, torch.device("cpu")))
    onnx = exported(ours, directory / f"gpt_{name}")
    prompt = torch.randint(0, V, (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(2))
    n = args.new_tokens
    for kind, beams in (("greedy", 1), ("beam", args.beams)):
        runs = [
            lambda m=ours, b=beams: generate(m, prompt, max_new_tokens=n, num_beams=b).tokens[:, PROMPT_LENGTH:],
            lambda m=onnx, b=beams: generate(m, prompt, max_new_tokens=n, num_beams=b).tokens[:, PROMPT_LENGTH:],
            lambda b=beams: hf_generate(hf, prompt, n, b),
        ]
        with torch.inference_mode():
            tokens = [run() for run in runs]
            seconds = time_pair(runs, repeats=args.repeats, sync=lambda: None, clock=args.clock)
        same = all(torch.equal(t, tokens[2]) for t in tokens[:2])
        label = f"{name} {kind}" + (f" K={beams}" if beams > 1 else "")
        for backend, times in zip(("seqlab torch", "seqlab onnxruntime"), seconds[:2], strict=True):
            row(label, backend, times, seconds[2], n, "tokens/s")
        row(label, "transformers", seconds[2], None, n, "tokens/s")
        print(f"same {label} tokens (all three): {'yes' if same else 'no'}")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    clock = "wall" if args.clock is time.perf_counter else "CPU"
    print(f"torch {torch.__version__}, float32, {torch.get_num_threads()} thread(s), median [IQR] of {clock} times\n")
    print(f"{'row':<18} {'backend':<22} {'value':>11} {'IQR':>17} {'unit':<9} {'ratio':>8} {'ratio IQR':>11}")
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        if "steps" in parts:
            step_rows(args, Path(tmp))
        if "transformer" in parts:
            transformer_rows(args, Path(tmp))
        if "seq2seq" in parts:
            seq2seq_rows(args, Path(tmp))
        for name in args.shapes.split(",") if "generation" in parts else ():
            generation_rows(args, name, Path(tmp))


if __name__ == "__main__":
    main()
