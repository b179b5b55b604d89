"""Plain-text tables for the command line."""

from __future__ import annotations

from collections.abc import Sequence


def format_value(value: object) -> str:
    """A metric as printed: integers without decimals, other floats with three."""
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() and abs(value) >= 1 else f"{value:.3f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns under a dashed rule; every cell shown with ``str``."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
