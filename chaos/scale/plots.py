"""Pictures of the scale simulator: goodput against a swept field (the paper's figure) and a run's timeline.

Both write a PNG with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from chaos.formatting import new_figure, save_figure
from chaos.scale.result import COMM, DOWN, PAUSED, TRAIN, WAIT, ScaleResult

COLOURS = {TRAIN: "#4c9a2a", WAIT: "#f2c14e", COMM: "#5b8def", PAUSED: "#f08a24", DOWN: "#c0392b"}


def plot_goodput_sweep(
    simulated: Mapping[str, Sequence[float]],
    xs: Sequence[str],
    path: Path,
    *,
    xlabel: str,
    paper: Mapping[str, Sequence[float]] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Goodput (%) against a swept plan field (the paper's figure sweeps chips): one line per configuration,
    the paper's values as open squares when given. ``xs`` label the points, evenly spaced."""
    fig, ax = new_figure(8.0, 4.8)
    pos = list(range(len(xs)))
    for i, (row, values) in enumerate(simulated.items()):
        colour = f"C{i}"
        ax.plot(pos, values, "-o", color=colour, label=(labels or {}).get(row, row))
        if paper and row in paper:
            ax.plot(pos, paper[row], "s", mfc="none", color=colour, markersize=8)
    ax.set_xticks(pos, list(xs))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("goodput (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.set_title("Goodput: simulated (lines)" + (", paper (open squares)" if paper else ""))
    ax.legend(fontsize=8, loc="lower left")
    return save_figure(fig, path)


def plot_timeline(result: ScaleResult, path: Path) -> Path:
    """Per-unit lanes coloured by state (train, wait, comm, paused, down), model updates as ticks above."""
    if result.timeline is None:
        raise ValueError("this result has no timeline: simulate it with timeline=True")
    merges = result.timeline.updates
    fig, ax = new_figure(10.0, 1.2 + 0.45 * result.learners)
    for seg in result.timeline.segments:
        ax.barh(seg.unit, seg.end - seg.start, left=seg.start, height=0.7, color=COLOURS[seg.state], linewidth=0)
    if merges:
        ax.vlines(list(merges), result.learners - 0.3, result.learners + 0.2, color="black", linewidth=0.6)
    ax.set_yticks(
        range(result.learners),
        [f"learner {i}" for i in range(result.learners)] if result.mode != "data-parallel" else ["job"],
    )
    ax.set_ylim(-0.6, result.learners + 0.4)
    ax.set_xlim(0, result.wall_s)
    ax.set_xlabel("simulated seconds (ticks on top: global model updates)")
    ax.set_title(
        f"{result.label}: goodput {result.goodput:.1%}, longest global stall {result.longest_stall_s:.1f} s"
        + (" (timeline truncated)" if result.timeline.truncated else "")
    )
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=c, label=s) for s, c in COLOURS.items()],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
    )
    return save_figure(fig, path)
