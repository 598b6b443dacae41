"""Nightly: the paper's whole goodput table over a simulated week per cell, the median of three seeds."""

from __future__ import annotations

import statistics

import pytest

from chaos.scale import simulate_scale
from chaos.scale.paper import CHIPS, PAPER_GOODPUT, paper_plan

pytestmark = pytest.mark.chaos_nightly(minutes=5)  # measured 2026-12-02, the longest member


@pytest.mark.timeout(1800)
@pytest.mark.chaos_rotate(per_night=2)  # a week of 2.4M chips per cell: up to 8 min a row on 2 cores
@pytest.mark.parametrize("row", list(PAPER_GOODPUT))
def test_paper_row_within_5_points_over_a_week(row: str) -> None:
    """Every cell of the row, a simulated week per seed, median of seeds 0-2, is within 5 points of the paper."""
    diffs = []
    for chips, paper in zip(CHIPS, PAPER_GOODPUT[row]):
        g = statistics.median(100 * simulate_scale(paper_plan(row, chips, seed=s)).goodput for s in range(3))
        diffs.append(g - paper)
    assert max(abs(d) for d in diffs) <= 5.0, diffs
