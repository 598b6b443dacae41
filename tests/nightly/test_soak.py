"""Nightly: the soak (benchmarks.costs.soak) — an hour of seeded random faults on two honest learners beside a
hostile insider, every check passing, the syncer's memory, file descriptors and /metrics flat (growth per hour over
the second half within :data:`benchmarks.costs.soak.BOUNDS`). Its figures, as the benchmark writes them, are in
docs/security.md ("Soak").
"""

from __future__ import annotations

import pytest

from benchmarks.costs.soak import BOUNDS, soak
from chaos.pytest_plugin import OPTIONS

pytestmark = pytest.mark.chaos_nightly(minutes=75)

MINUTES = 60.0


@pytest.mark.chaos
@pytest.mark.timeout(3 * 3600)
def test_an_hour_of_faults_beside_a_hostile_insider_leaves_the_syncer_flat(tmp_path) -> None:
    r = soak(MINUTES, OPTIONS.seed or 1, tmp_path / "run")
    failed = {name: status for name, status in r["verdicts"].items() if status != "pass"}
    assert r["status"] == "pass" and not failed, (r["status"], failed)
    assert r["samples"] >= MINUTES * 3, r["samples"]  # sampled all through (every 10 s)
    for field, bound in BOUNDS.items():
        growth = r["per_hour"][field]
        assert growth is not None and growth <= bound, f"syncer {field} grew {growth}/h (bound {bound}/h): {r}"
