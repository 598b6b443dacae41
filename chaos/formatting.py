"""Formatting shared by the run report, the timeline, the benchmarks and the scale simulator: status words and
colours, numbers and cells, Markdown tables and figures (matplotlib imported only when a figure is made)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeGuard

STATUS_WORDS = {
    "pass": "PASS",
    "fail": "FAIL",
    "indeterminate": "INDETERMINATE",
    "error": "ERROR",
    "not_applicable": "NOT APPLICABLE",
}
STATUS_COLOURS = {
    "pass": "tab:green",
    "fail": "tab:red",
    "indeterminate": "tab:orange",
    "error": "tab:purple",
    "not_applicable": "tab:gray",
}


# ---- small helpers ---------------------------------------------------------
def status_word(status: str | None) -> str:
    """The upper-case word for a run or check status (``"fail"`` -> ``"FAIL"``); unknown ones are upper-cased.

    Example:
        >>> status_word("indeterminate")
        'INDETERMINATE'
    """
    s = (status or "unknown").lower()
    return STATUS_WORDS.get(s, s.upper())


def finite(x: object) -> TypeGuard[float]:
    """A finite number (an int or a float, not a bool): what a table can do arithmetic with."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def num(x: Any, digits: int = 3) -> str:
    """A number for a table: ``n/a`` for None/NaN, integers with thousands separators."""
    if isinstance(x, bool) or x is None:
        return "n/a" if x is None else str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "n/a"
        return f"{x:.{digits}f}"
    return str(x)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], cell: Callable[[Any], str] = str) -> str:
    """A Markdown table; ``cell`` turns each value into its text.

    Example:
        >>> print(markdown_table(["mode", "s"], [["decoupled", 1.5]]))
        | mode | s |
        |---|---|
        | decoupled | 1.5 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def new_figure(width: float = 8.0, height: float = 4.5, ncols: int = 1) -> tuple[Any, Any]:
    """A matplotlib (Agg) figure and its axes; matplotlib is imported only when a figure is made."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(1, ncols)


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Lay out and write ``fig`` as a PNG, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path


def natural_key(s: str) -> list[Any]:
    """``learner-10`` after ``learner-2``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


# ---- Markdown ---------------------------------------------------------------
