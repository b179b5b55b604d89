"""``seqlab distill TEACHER [--ensemble DIR ...] [--rescore DIR ...] --out DIR``: the data of a sequence-level
knowledge-distilled g2p student (Kim and Rush 2016; ``seqlab.recipes.g2p.distillation``).

The teacher (with ``--ensemble``, the ensemble; with ``--rescore``, its beam re-ranked by those runs, as ``seqlab
evaluate`` re-ranks it) transcribes the training split it was trained on, by beam search;
OUT gets ``train.txt`` (its pronunciations; with ``--union`` the references too), ``valid.txt`` and ``test.txt``
(the split's references), and the command prints the ``seqlab train g2p`` arguments that train a student on them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.errors import CheckpointError, ConfigError
from seqlab.recipes.saved_run import recipe_name_of
from seqlab.recipes.system import SystemOptions

RESCORE_HELP = "runs of the same split and vocabularies (e.g. trained right to left) that re-rank the teacher's beam"
WEIGHT_HELP = "weight w in [0, 1] of --rescore's scores: (1 - w) * beam score + w * their score (default 0.5)"


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``distill`` to the ``seqlab`` command."""
    distill = commands.add_parser(
        "distill", help="write a g2p teacher's transcriptions of its training split, to train a distilled student"
    )
    distill.add_argument("teacher", type=Path, help="the g2p run that transcribes")
    distill.add_argument("--ensemble", type=Path, nargs="+", default=[], metavar="DIR", help="more runs of the same "
                         "split and vocabularies, decoded together with TEACHER")  # fmt: skip
    distill.add_argument("--rescore", type=Path, nargs="+", default=[], metavar="DIR", help=RESCORE_HELP)
    distill.add_argument("--rescore-weight", type=float, metavar="W", help=WEIGHT_HELP)
    distill.add_argument("--out", type=Path, required=True, help="directory for train.txt, valid.txt and test.txt "
                         "(created if missing; existing files are refused)")  # fmt: skip
    distill.add_argument("--num-beams", type=int, help="the teacher's beam width K (default: TEACHER's)")
    distill.add_argument("--union", action="store_true", help="train.txt holds the references as well")
    distill.set_defaults(handler=_distill)


def _distill(args: argparse.Namespace) -> int:
    # The g2p recipe is imported by this command only, not by every ``seqlab`` command's start-up (seqlab.recipes).
    from seqlab.recipes.g2p import G2PSystem
    from seqlab.recipes.g2p.distillation import DISTILLED_FILES, distillation_files, teacher_data

    if args.num_beams is not None and args.num_beams < 1:
        raise ConfigError(f"--num-beams must be at least 1, got {args.num_beams}")
    name = recipe_name_of(args.teacher)
    if name != "g2p":
        raise CheckpointError(f"{args.teacher}: a {name} run; distill takes g2p runs")
    data = teacher_data(args.teacher, args.ensemble, args.rescore)
    try:
        options = SystemOptions(
            ensemble=tuple(args.ensemble), rescore=tuple(args.rescore), rescore_weight=args.rescore_weight
        )
    except ConfigError as e:
        raise ConfigError(str(e).replace("rescore_weight", "--rescore-weight", 1)) from None  # the one checked value
    teacher = G2PSystem.load(args.teacher, options)
    taken = [args.out / name for name in DISTILLED_FILES if (args.out / name).exists()]
    if taken:
        raise ConfigError(f"--out {args.out}: {taken[0].name} exists (distill never overwrites data)")
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out}: not a directory")
    num_beams = args.num_beams or teacher.config.decode.num_beams
    counts = distillation_files(teacher, data, args.out, num_beams=num_beams, union=args.union)
    print(", ".join(f"{name}: {count} pronunciations" for name, count in counts.items()))
    paths = " ".join(f"data.{name[:-4]}_path={args.out / name}" for name in DISTILLED_FILES)
    print(f"train a student: seqlab train g2p --set {paths}")
    return 0
