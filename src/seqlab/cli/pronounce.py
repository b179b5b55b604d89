"""``seqlab pronounce WORD ...``: the pronunciation of each word by the pronouncer that ships with the package
(``seqlab.recipes.pronouncer``), in CMUdict format (``word  P H O N E S``; ``word(2)  ...`` for the second best).

Bad input is refused as by ``seqlab predict``: one line naming the word, exit 2.
"""

from __future__ import annotations

import argparse

from seqlab.errors import ConfigError
from seqlab.recipes.system import SystemOptions, check_inputs


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``pronounce`` to the ``seqlab`` command."""
    pronounce = commands.add_parser(
        "pronounce", help="pronounce English words with the pretrained model that ships with seqlab (CMUdict ARPAbet)"
    )
    pronounce.add_argument("words", nargs="+", metavar="WORD")
    pronounce.add_argument("--num-beams", type=int, help="beam width K (default: 5; 1 = greedy)")
    pronounce.add_argument("--nbest", type=int, help="pronunciations printed per word (default: 1)")
    pronounce.set_defaults(handler=_pronounce)


def _pronounce(args: argparse.Namespace) -> int:
    # The g2p recipe is imported by this command only, not by every ``seqlab`` command's start-up (seqlab.recipes).
    from seqlab.recipes.pronouncer import load_pronouncer

    check_inputs(args.words)
    try:
        SystemOptions(num_beams=args.num_beams, nbest=args.nbest)
    except ConfigError as e:  # named by its flag, as ``seqlab predict`` names it
        flag, _, rest = str(e).partition(" ")
        raise ConfigError(f"--{flag.replace('_', '-')} {rest}") from None
    for prediction in load_pronouncer(args.num_beams, args.nbest).predict(args.words):
        for line in prediction.lines():
            print(line)
    return 0
