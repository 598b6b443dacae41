"""Pictures of the scale simulator: goodput against chips (the paper's figure) and a run's timeline.

Both write a PNG with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chaos.scale.quantities import format_count
from chaos.scale.result import COMM, DOWN, PAUSED, TRAIN, WAIT, ScaleResult

COLOURS = {TRAIN: "#4c9a2a", WAIT: "#f2c14e", COMM: "#5b8def", PAUSED: "#f08a24", DOWN: "#c0392b"}


def _figure(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(1, 1)


def plot_goodput_vs_chips(simulated: Mapping[str, Sequence[float]], chips: Sequence[float], path: Path,
                          paper: Mapping[str, Sequence[float]] | None = None,
                          labels: Mapping[str, str] | None = None) -> Path:
    """One line per configuration (simulated, %), the paper's values as open markers when given."""
    fig, ax = _figure(8.0, 4.8)
    for i, (row, values) in enumerate(simulated.items()):
        colour = f"C{i}"
        ax.plot(chips, values, "-o", color=colour, label=(labels or {}).get(row, row))
        if paper and row in paper:
            ax.plot(chips, paper[row], "s", mfc="none", color=colour, markersize=8)
    ax.set_xscale("log")
    ax.set_xticks(list(chips), [format_count(c) for c in chips])
    ax.minorticks_off()
    ax.set_xlabel("chips (one interruption per chip-year)")
    ax.set_ylabel("goodput (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    title = "Goodput against scale: simulated (lines)"
    ax.set_title(title + (", paper (open squares)" if paper else ""))
    ax.legend(fontsize=8, loc="lower left")
    return _save(fig, path)


def plot_timeline(result: ScaleResult, path: Path) -> Path:
    """Per-unit lanes coloured by state (train, wait, comm, paused, down), model updates as ticks above."""
    if result.timeline is None:
        raise ValueError("this result has no timeline: simulate it with timeline=True")
    merges = result.timeline.updates
    fig, ax = _figure(10.0, 1.2 + 0.45 * result.learners)
    for seg in result.timeline.segments:
        ax.barh(seg.unit, seg.end - seg.start, left=seg.start, height=0.7, color=COLOURS[seg.state], linewidth=0)
    if merges:
        ax.vlines(list(merges), result.learners - 0.3, result.learners + 0.2, color="black", linewidth=0.6)
    ax.set_yticks(range(result.learners), [f"learner {i}" for i in range(result.learners)]
                  if result.mode != "data-parallel" else ["job"])
    ax.set_ylim(-0.6, result.learners + 0.4)
    ax.set_xlim(0, result.wall_s)
    ax.set_xlabel("simulated seconds (ticks on top: global model updates)")
    ax.set_title(f"{result.label}: goodput {result.goodput:.1%}, longest global stall {result.longest_stall_s:.1f} s"
                 + (" (timeline truncated)" if result.timeline.truncated else ""))
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=s) for s, c in COLOURS.items()], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.005, 1.0))
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
