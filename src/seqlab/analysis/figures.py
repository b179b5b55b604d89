"""Figures written whole or not at all: every picture of ``seqlab.analysis`` is saved through ``save_figure``."""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.figure import Figure

from seqlab.files import atomic_path


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int) -> None:
    """Save ``fig`` to ``path`` in the format its suffix names (PNG without one), at ``dpi`` dots per inch,
    atomically (``seqlab.files.atomic_path``: a temporary file renamed into place).

    Raises:
        StorageError: the file cannot be written (a full disk, no permission); ``path`` is then unchanged.
    """
    path = Path(path)
    with atomic_path(path) as temporary:
        fig.savefig(temporary, format=path.suffix.lstrip(".") or "png", dpi=dpi)
