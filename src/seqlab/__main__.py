"""``python -m seqlab`` runs the ``seqlab`` command (and so does ``torchrun -m seqlab``)."""

import sys

from seqlab.cli import main

sys.exit(main())
