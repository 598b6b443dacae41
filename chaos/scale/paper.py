"""The paper's goodput table and the plans that reproduce it.

The paper (arXiv 2604.21428) simulates 150k–2.4M chips with one interruption
per chip-year and reports goodput for data-parallel training without and with
elasticity and for Decoupled DiLoCo with M = 2, 4, 8, 16 learners
(:data:`PAPER_GOODPUT`). It does not publish its recovery times; its text says
the data-parallel columns fit "roughly 60–85 s of global downtime per failure
without elasticity and 20–30 s with it".

Calibration (the :class:`~chaos.scale.config.RecoverySection` defaults):

- ``detect_s`` = 10 s (a heartbeat timeout);
- non-elastic: ``restart_s`` = 61 s, so a failure costs 71 s plus the step in
  flight (1 s on average with 2 s steps);
- elastic (the data-parallel job, and every learner inside Decoupled DiLoCo):
  ``reconfigure_s`` = 11 s, so 21 s plus the step in flight.

Both are the minimax fits of the renewal formula
``(1 − λh) / (1 + λD)`` (λ: failures per second of one unit, h: half a step)
to the paper's rows: non-elastic over its 5 cells, elastic jointly over the
elastic data-parallel row and the 20 Decoupled cells, one value for all 25
(the paper's own rule of thumb is that M learners behave like one elastic job
on M× fewer chips). Workload: 2 s steps, P = H = 24, τ = 2 (the paper's
fragment schedule); goodput does not depend on H or P here because learners
never wait for the syncer.

Example:
    >>> cfg = paper_plan("decoupled-8", 1.2e6)
    >>> cfg.algorithm.num_learners, cfg.chips_per_learner, cfg.elastic
    (8, 150000.0, True)
    >>> PAPER_GOODPUT["decoupled-8"][CHIPS.index(1.2e6)]
    88
"""

from __future__ import annotations

from typing import Any

from chaos.scale.config import ScaleConfig, build_scale_config

CHIPS: tuple[float, ...] = (150e3, 300e3, 600e3, 1.2e6, 2.4e6)

# Goodput (%) per row and chip count, as the paper reports it.
PAPER_GOODPUT: dict[str, tuple[int, ...]] = {
    "data-parallel": (72, 57, 38, 27, 18),
    "data-parallel-elastic": (88, 80, 69, 58, 40),
    "decoupled-2": (94, 88, 80, 70, 54),
    "decoupled-4": (96, 93, 89, 82, 73),
    "decoupled-8": (98, 96, 94, 88, 80),
    "decoupled-16": (99, 98, 96, 93, 86),
}

ROW_LABELS: dict[str, str] = {
    "data-parallel": "Data-parallel, no elasticity",
    "data-parallel-elastic": "Data-parallel, elastic",
    "decoupled-2": "Decoupled M = 2",
    "decoupled-4": "Decoupled M = 4",
    "decoupled-8": "Decoupled M = 8",
    "decoupled-16": "Decoupled M = 16",
}

PAPER_WORKLOAD: dict[str, Any] = {"step_s": 2.0}
PAPER_SCHEDULE: dict[str, Any] = {"num_fragments": 24, "sync_every": 24, "overlap_steps": 2}


def row_tree(row: str) -> dict[str, Any]:
    """The plan fields that make one of the paper's rows."""
    if row == "data-parallel":
        return {"elastic": False, "algorithm": {"mode": "data-parallel"}}
    if row == "data-parallel-elastic":
        return {"elastic": True, "algorithm": {"mode": "data-parallel"}}
    if row.startswith("decoupled-"):
        return {
            "elastic": True,
            "algorithm": {"mode": "decoupled", "num_learners": int(row.split("-")[1]), **PAPER_SCHEDULE},
        }
    raise ValueError(f"unknown row {row!r}; choose from {', '.join(PAPER_GOODPUT)}")


def paper_plan(row: str, chips: float, seed: int = 0, duration: str = "7d") -> ScaleConfig:
    """The calibrated plan of one cell of the paper's table (one simulated week by default)."""
    tree = {
        **row_tree(row),
        "seed": seed,
        "duration": duration,
        "cluster": {"chips": chips},
        "workload": dict(PAPER_WORKLOAD),
        "name": f"{row}@{chips:g}",
    }
    return build_scale_config(tree, f"paper cell {row} × {chips:g} chips")
