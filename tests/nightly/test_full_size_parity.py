"""Nightly: parity at full model size (the small model), one scenario a night in turn.

The night's longest test (~25 min quiet: a fault-free run and a chaos run of ~11 min each). Its fault-free run is
test_full_size_baseline.py's, on the other worker at the same time: this test runs its chaos run first
(``baseline_after``) and then reads that baseline from the session's cache (waiting on its lock if need be), so
the two halves overlap instead of one worker carrying both while the other runs out of work (2026-12-03: the
night's last 15 minutes were this test alone)."""

from __future__ import annotations

import pytest

from chaos.scenario import scenario_with

pytestmark = pytest.mark.chaos_nightly(minutes=25)  # measured 2026-12-02, the longest member

# The small model (3.3M parameters) at ~3k tokens/s on the 2-core CI machine: ~11 min per run. At 2M tokens it
# is far from converged (eval 5.59 -> ~4.3) and runs differ by timing alone: kill-and-rejoin ended 0.16 below
# its baseline (measured 2026-11-30). The tolerance is set above that spread: this catches gross regressions, so
# one baseline seed is enough (a 3-seed band took three 11-minute baselines a night: 2026-12-02).
FULL_SIZE = {"cluster": {"model": {"size": "small"}, "token_budget": 2_000_000}, "timeout_s": 2400,
             "checks": {"parity": {"tolerance": 0.3, "baseline_seeds": 1}}}


@pytest.mark.chaos
@pytest.mark.timeout(7200)
@pytest.mark.chaos_rotate(per_night=1)
@pytest.mark.parametrize("name", ["kill-and-rejoin", "syncer-crash", "partition-majority"])
def test_parity_at_full_model_size(name: str, run_chaos) -> None:
    """The small model (3.3M parameters): same final loss as its fault-free baseline, within the tolerance."""
    result = run_chaos(scenario_with(name, **FULL_SIZE), baseline_after=True)
    failed = [f"{v.name}: {v.summary}" for v in result.verdicts if v.status != "pass"]
    assert result.exit_code == 0, failed
