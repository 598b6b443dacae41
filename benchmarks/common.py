"""What every benchmark shares: the machine line, the results file, the Markdown table, the plot.

A benchmark prints a Markdown table, writes ``benchmarks/results/<name>.json``
(seed, configuration, machine, raw measurements, table) and a plot next to it,
so a README row can quote the file and the command that produced it.

Example:
    >>> print(markdown_table(["mode", "s"], [["decoupled", 1.5], ["sync", None]]))
    | mode | s |
    |---|---|
    | decoupled | 1.5 |
    | sync | — |
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos import formatting

RESULTS = Path("benchmarks/results")


def machine() -> dict[str, Any]:
    """Where the numbers were measured (cores this process may use, not only the machine's)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpus": os.cpu_count(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "load_avg_at_start": [round(x, 2) for x in load],
    }


def git_commit() -> str | None:
    """The commit measured (None outside a git checkout); a trailing ``+`` when tracked files differ from it."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def command_line() -> str:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return " ".join([".venv/bin/python -m " + spec.name] + sys.argv[1:]) if spec else " ".join(sys.argv)


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: ``None`` is a dash, floats get ``digits`` significant digits.

    Example:
        >>> fmt(0.123456), fmt(None), fmt(12345.6), fmt("x")
        ('0.123', '—', '1.23e+04', 'x')
    """
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The chaos reports' Markdown table, with benchmark cells (:func:`fmt`)."""
    return formatting.markdown_table(header, rows, fmt)


def median_or_none(values: Sequence[float]) -> float | None:
    """The median, or ``None`` for no values.

    Example:
        >>> median_or_none([3.0, 1.0, 2.0]), median_or_none([])
        (2.0, None)
    """
    return statistics.median(values) if values else None


def write_results(
    name: str,
    *,
    config: dict[str, Any],
    results: dict[str, Any],
    table: str,
    out_dir: Path = RESULTS,
    command: str | None = None,
) -> Path:
    """``<out_dir>/<name>.json`` with the command (this process's, unless the caller ran on another's behalf),
    seed-bearing config, machine and results; returns the path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    doc = {
        "benchmark": name,
        "command": command or command_line(),
        "commit": git_commit(),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": config,
        "results": results,
        "table": table,
    }
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


new_figure = formatting.new_figure


def save_figure(fig: Any, name: str, out_dir: Path = RESULTS) -> Path:
    """``<out_dir>/<name>.png``."""
    return formatting.save_figure(fig, out_dir / f"{name}.png")
