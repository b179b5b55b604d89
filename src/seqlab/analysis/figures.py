"""Figures made and written whole or not at all: every picture of ``seqlab.analysis`` is made by ``new_figure`` and
saved through ``save_figure``.

matplotlib is imported by the first ``new_figure``, not with this package: the ``seqlab`` command imports
``seqlab.analysis`` for every command (its ``analyze`` and ``compare`` groups), and most commands draw nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from seqlab.files import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def new_figure(figsize: tuple[float, float], layout: str | None = None) -> Figure:
    """A new matplotlib ``Figure`` of ``figsize`` (width, height) inches and ``layout`` (matplotlib's: None,
    ``"constrained"``, ...), drawn without pyplot (no global state, no display)."""
    from matplotlib.figure import Figure  # deferred: about 1 s of import, paid only by a command that draws

    return Figure(figsize=figsize, layout=layout)


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int) -> None:
    """Save ``fig`` to ``path`` in the format its suffix names (PNG without one), at ``dpi`` dots per inch,
    atomically (``seqlab.files.atomic_path``: a temporary file renamed into place).

    Raises:
        StorageError: the file cannot be written (a full disk, no permission); ``path`` is then unchanged.
    """
    path = Path(path)
    with atomic_path(path) as temporary:
        fig.savefig(temporary, format=path.suffix.lstrip(".") or "png", dpi=dpi)
